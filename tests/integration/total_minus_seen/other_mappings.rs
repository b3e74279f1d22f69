//! Other mappings over the fixture's schema: a `[contract] columns` entry naming a missing
//! column (exit 2 from every stage), and several counter rows per member (with `drop =
//! "nothing"` recording the gate's decision).

use super::*;

on_every_backend!(missing_contract_column, several_rows_per_member);

/// A `[contract] columns` entry naming a column that does not exist (and no contract run
/// archived) is bad input for every stage that connects, not only `contract`: exit 2, naming
/// the key (with its file:line:col) and the column, before any statement; `status` prints a
/// warning line (JSON: `missing_contract_columns`) and exits 0.
async fn missing_contract_column(backend: Backend) {
    let Some(db) = TestDb::create(backend, "tms_nope").await else {
        return;
    };
    let dsn = Dsn::parse(&db.url).unwrap();
    let dialect = dsn.dialect;
    let mut conn = dsn.connect().await.unwrap();
    let dir = fixture_dir();
    exec_all(
        &mut conn,
        &statements(&std::fs::read_to_string(dir.join("schema.sql")).unwrap()),
    )
    .await;
    let text = std::fs::read_to_string(dir.join("tidemark.toml"))
        .unwrap()
        .replace(
            "\"channel_members.seen_count\"]",
            "\"channel_members.seen_nope\"]",
        );
    assert!(text.contains("seen_nope"));
    let mapping = Mapping::parse(&text, "tidemark.toml").expect("the mapping parses");
    let line = text
        .lines()
        .find(|l| l.contains("seen_nope"))
        .unwrap()
        .trim();
    let want = format!(
        "{}: contract.columns = \"channel_members.seen_nope\": column \"seen_nope\" not found in table \"channel_members\"",
        crate::common::value_at("tidemark.toml", &text, line)
    );
    let want = want.as_str();
    // `plan` runs expand as a dry run first.
    let err = expand::run(&mut conn, &mapping, dialect, true)
        .await
        .expect_err("plan (expand dry run)");
    assert_eq!(tidemark::cli::Outcome::code_of(&err), 2, "{err:#}");
    assert!(format!("{err:#}").contains(want), "{err:#}");
    let err = expand::run(&mut conn, &mapping, dialect, false)
        .await
        .expect_err("expand");
    assert_eq!(tidemark::cli::Outcome::code_of(&err), 2, "{err:#}");
    assert!(format!("{err:#}").contains(want), "{err:#}");
    let err = backfill::run(&mut conn, &mapping, dialect, &Default::default())
        .await
        .expect_err("backfill");
    assert_eq!(tidemark::cli::Outcome::code_of(&err), 2, "{err:#}");
    assert!(format!("{err:#}").contains(want), "{err:#}");
    let tmp = tempfile::tempdir().unwrap();
    let err = audit::run(
        &mut conn,
        &mapping,
        dialect,
        &audit::AuditOptions {
            report: tmp.path().join("drift.csv"),
            ..Default::default()
        },
    )
    .await
    .expect_err("audit");
    assert_eq!(tidemark::cli::Outcome::code_of(&err), 2, "{err:#}");
    assert!(format!("{err:#}").contains(want), "{err:#}");

    // `status` warns instead, and still exits 0: after an expand under the good mapping, the
    // broken one names a column the database does not have; the good one names none.
    let good = std::fs::read_to_string(dir.join("tidemark.toml")).unwrap();
    let good_mapping = Mapping::parse(&good, "tidemark.toml").unwrap();
    expand::run(&mut conn, &good_mapping, dialect, false)
        .await
        .expect("expand with the good mapping");
    std::fs::write(tmp.path().join("bad.toml"), &text).unwrap();
    std::fs::write(tmp.path().join("good.toml"), &good).unwrap();
    let status = |file: &str, json: bool| {
        let mut args = vec!["status", "--database", &db.url, "--mapping", file];
        if json {
            args.extend(["--format", "json"]);
        }
        let run = crate::common::bin::run(tmp.path(), &args);
        assert_eq!(run.code, Some(0), "status {file}: {}", run.stderr);
        run.stdout
    };
    let warning = "warning:   [contract] columns names channel_members.seen_nope, which the database does not have";
    let out = status("bad.toml", false);
    assert_eq!(out.matches("warning:").count(), 1, "{out}");
    assert!(out.contains(warning), "{out}");
    let json: serde_json::Value = serde_json::from_str(&status("bad.toml", true)).unwrap();
    assert_eq!(
        json["missing_contract_columns"],
        serde_json::json!(["channel_members.seen_nope"])
    );
    assert!(!status("good.toml", false).contains("warning:"));
    let json: serde_json::Value = serde_json::from_str(&status("good.toml", true)).unwrap();
    assert_eq!(json["missing_contract_columns"], serde_json::json!([]));
    drop(conn);
    db.cleanup().await;
}

/// `combine`: several counter rows per member are bad input (exit 2, named) without
/// `combine = "sum"`, and summed with it; `rows` keeps only some rows.
async fn several_rows_per_member(backend: Backend) {
    let Some(db) = TestDb::create(backend, "tms_rows").await else {
        return;
    };
    let dsn = Dsn::parse(&db.url).unwrap();
    let dialect = dsn.dialect;
    let mut conn = dsn.connect().await.unwrap();
    exec_all(
        &mut conn,
        &statements(
            "CREATE TABLE messages (id INTEGER NOT NULL PRIMARY KEY, conv_id INTEGER NOT NULL, sender_id INTEGER NOT NULL);
INSERT INTO messages (id, conv_id, sender_id) VALUES (1, 1, 9);
INSERT INTO messages (id, conv_id, sender_id) VALUES (2, 1, 9);
INSERT INTO messages (id, conv_id, sender_id) VALUES (3, 1, 9);
CREATE TABLE summary (conv_id INTEGER NOT NULL, user_id INTEGER NOT NULL, thread_id INTEGER NULL, n INTEGER NOT NULL);
INSERT INTO summary (conv_id, user_id, thread_id, n) VALUES (1, 1, NULL, 2);
INSERT INTO summary (conv_id, user_id, thread_id, n) VALUES (1, 1, 7, 1);
INSERT INTO summary (conv_id, user_id, thread_id, n) VALUES (1, 2, NULL, 3);
CREATE TABLE read_pos (conv_id INTEGER NOT NULL, user_id INTEGER NOT NULL, pos INTEGER NOT NULL);
INSERT INTO read_pos (conv_id, user_id, pos) VALUES (1, 1, 1);
INSERT INTO read_pos (conv_id, user_id, pos) VALUES (1, 2, 0);
",
        ),
    )
    .await;
    let base = |counter: &str| {
        format!(
            "[messages]\ntable = \"messages\"\nid = \"id\"\nconversation = \"conv_id\"\nsender = \"sender_id\"\n\n[counter]\nshape = \"per_member\"\ntable = \"summary\"\nuser = \"user_id\"\nconversation = \"conv_id\"\n{counter}\n[contract]\ndrop = \"nothing\"\n\n[[evidence]]\nkind = \"position\"\ntable = \"read_pos\"\nuser = \"user_id\"\nconversation = \"conv_id\"\ncolumn = \"pos\"\n\n[watermarks]\ntable = \"read_watermarks\"\n"
        )
    };
    let single = Mapping::parse(&base("value = \"this.n\"\n"), "t.toml").unwrap();
    let main_only = Mapping::parse(
        &base("value = \"this.n\"\nrows = \"this.thread_id IS NULL\"\n"),
        "t.toml",
    )
    .unwrap();
    expand::run(&mut conn, &main_only, dialect, false)
        .await
        .unwrap();
    let e = backfill::run(&mut conn, &single, dialect, &Default::default())
        .await
        .unwrap_err();
    let msg = format!("{e:#}");
    assert!(
        msg.contains("1 member(s) have several counter rows"),
        "{msg}"
    );
    assert!(msg.contains("conversation 1, user 1: 2 rows"), "{msg}");
    assert_eq!(tidemark::cli::Outcome::code_of(&e), 2, "{msg}");

    let tmp = tempfile::tempdir().unwrap();
    for (counter, drifting) in [
        // main timeline only: user 1 has 2 unread after position 1, stored 2: clean.
        ("value = \"this.n\"\nrows = \"this.thread_id IS NULL\"\n", 0),
        // summed: user 1 stores 3 (2 + 1) against 2 unread: one drifting row.
        ("value = \"this.n\"\ncombine = \"sum\"\n", 1),
    ] {
        let m = Mapping::parse(&base(counter), "t.toml").unwrap();
        backfill::run(&mut conn, &m, dialect, &Default::default())
            .await
            .expect("backfill");
        let a = audit::run(
            &mut conn,
            &m,
            dialect,
            &audit::AuditOptions {
                report: tmp.path().join("r.csv"),
                ..Default::default()
            },
        )
        .await
        .expect("audit");
        assert_eq!(
            (a.summary.rows_checked, a.summary.drifting_rows),
            (2, drifting),
            "{counter}"
        );
        if drifting == 0 {
            drop_nothing_records_the_decision(&mut conn, &m, &db.url, tmp.path()).await;
        }
    }
    drop(conn);
    db.cleanup().await;
}

/// `contract`, text and JSON, after `opts`' run.
fn rendered(o: &contract::ContractOutcome, url: &str, opts: &ContractOptions) -> (String, String) {
    let mut out = Vec::new();
    tidemark::render::text::contract(&mut out, o, &Dsn::parse(url).unwrap(), opts).unwrap();
    let mut json = Vec::new();
    tidemark::render::json::contract(&mut json, o, 0).unwrap();
    (
        String::from_utf8(out).unwrap(),
        String::from_utf8(json).unwrap(),
    )
}

/// `status` as text.
async fn status_text(conn: &mut AnyConnection, mapping: &Mapping, url: &str) -> String {
    let dsn = Dsn::parse(url).unwrap();
    let s = tidemark::stages::status::run(conn, mapping, dsn.dialect)
        .await
        .expect("status");
    let mut out = Vec::new();
    tidemark::render::text::status(&mut out, &s, &dsn, mapping).unwrap();
    String::from_utf8(out).unwrap()
}

/// drop = "nothing" (issue 25 row 6): the gate opens, nothing is archived or dropped, and the
/// run records the gate's decision; the text, the JSON and `status` say so (never "dropped");
/// a second run, dry or `--execute`, says it is already done, audits nothing and records no
/// other run.
async fn drop_nothing_records_the_decision(
    conn: &mut AnyConnection,
    m: &Mapping,
    url: &str,
    tmp: &std::path::Path,
) {
    let dialect = Dsn::parse(url).unwrap().dialect;
    let dry_opts = ContractOptions {
        audit_report: Some(tmp.join("f.csv")),
        ..Default::default()
    };
    let exec_opts = ContractOptions {
        execute: true,
        ..dry_opts.clone()
    };
    let dry = contract::run(conn, m, dialect, &dry_opts)
        .await
        .expect("contract dry run, drop = nothing");
    let (text, _) = rendered(&dry, url, &dry_opts);
    assert!(
        text.contains("dry run: nothing was changed; --execute records the gate's decision"),
        "{text}"
    );
    assert!(!text.contains("archives the values and drops"), "{text}");

    let o = contract::run(conn, m, dialect, &exec_opts)
        .await
        .expect("contract, drop = nothing");
    assert!(
        o.executed && o.targets.is_empty() && o.ledger_id.is_some(),
        "{o:?}"
    );
    let id = o.ledger_id.unwrap();
    let archived: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tidemark_counter_archive")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(archived, 0);
    let (text, json) = rendered(&o, url, &exec_opts);
    assert!(
        text.contains(&format!(
            "done: the gate's decision is recorded (ledger run #{id}); nothing was archived or dropped"
        )),
        "{text}"
    );
    assert!(
        !text.contains("ran:") && !text.contains("dropped (ledger run"),
        "{text}"
    );
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["executed"], true, "{json}");
    assert_eq!(v["dropped"], serde_json::json!([]), "{json}");
    assert_eq!(v["ledger_id"], id, "{json}");
    let status = status_text(conn, m, url).await;
    assert!(
        status.contains(&format!(
            "contract:  done: run #{id} recorded the gate's decision; nothing was dropped"
        )),
        "{status}"
    );
    assert!(!status.contains("the counter was dropped"), "{status}");

    // Again, dry and --execute: already done; no audit, no other run.
    for opts in [&dry_opts, &exec_opts] {
        let again = contract::run(conn, m, dialect, opts)
            .await
            .expect("contract again, drop = nothing");
        let (text, json) = rendered(&again, url, opts);
        let want = format!(
            "already done: contract run #{id} recorded the gate's decision ([contract] drop = \"nothing\": nothing to archive or drop)"
        );
        assert_eq!(
            again.nothing_to_drop.as_deref(),
            Some(want.as_str()),
            "{text}"
        );
        assert!(text.contains(&want), "{text}");
        assert!(!text.contains("--execute archives the values"), "{text}");
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["nothing_to_drop"], want.as_str(), "{json}");
        assert!(
            again.final_audit.is_none() && again.ledger_id.is_none(),
            "{again:?}"
        );
        let runs: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM tidemark_ledger WHERE stage = 'contract'")
                .fetch_one(&mut *conn)
                .await
                .unwrap();
        assert_eq!(runs, 1, "one contract run recorded");
    }
}
