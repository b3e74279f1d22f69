//! The "total minus seen" shape (issue 12, `tests/fixtures/total_minus_seen/`): a conversation
//! total minus a per-member snapshot as the counter's value (`[counter] value` over `this` and
//! `conv`), epoch-millisecond positions, a last-viewed time as evidence, and a membership
//! history deciding who is active (a correlated subquery on `this`), run through expand,
//! backfill, audit and `contract --execute` on every backend. The expected values are worked
//! out by hand in the fixture's `expected.md`, not by running tidemark.

use crate::common::{int_watermarks as watermarks, statements};
use std::collections::BTreeMap;
use std::path::PathBuf;

use sqlx::{AnyConnection, Row};

use crate::common::{csv, exec_all, on_every_backend, Backend, TestDb};
use tidemark::db::Dsn;
use tidemark::dialect::Dialect;
use tidemark::mapping::Mapping;
use tidemark::stages::contract::{self, ContractOptions};
use tidemark::stages::{audit, backfill, expand};

on_every_backend!(
    total_minus_seen,
    several_rows_per_member,
    contract_resumes_after_a_kill,
    missing_contract_column
);

const T: i64 = 1_700_000_000_000;

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/total_minus_seen")
}

/// (conv, user or NULL) -> value: a table's column, or one target's archive rows.
async fn values(conn: &mut AnyConnection, sql: &str) -> BTreeMap<(i64, Option<i64>), Option<i64>> {
    let rows = sqlx::query(sql).fetch_all(&mut *conn).await.unwrap();
    let mut out = BTreeMap::new();
    for r in &rows {
        let key = (r.try_get(0).unwrap(), r.try_get(1).unwrap());
        assert!(
            out.insert(key, r.try_get(2).unwrap()).is_none(),
            "{sql}: {key:?} twice"
        );
    }
    out
}

async fn total_minus_seen(backend: Backend) {
    let Some(db) = TestDb::create(backend, "tms").await else {
        return;
    };
    let dsn = Dsn::parse(&db.url).unwrap();
    let dialect = dsn.dialect;
    let int = dialect.int_cast();
    let mut conn = dsn.connect().await.unwrap();
    let dir = fixture_dir();
    exec_all(
        &mut conn,
        &statements(&std::fs::read_to_string(dir.join("schema.sql")).unwrap()),
    )
    .await;
    let mapping = Mapping::load(&dir.join("tidemark.toml")).expect("the mapping loads");
    mapping
        .check_predicates(dialect.sql_parser_dialect(), dialect.name())
        .unwrap();
    expand::run(&mut conn, &mapping, dialect, false)
        .await
        .unwrap();

    // Backfill: expected.md's watermarks.
    let b = backfill::run(&mut conn, &mapping, dialect, &Default::default())
        .await
        .expect("backfill");
    assert_eq!(b.members, 10, "{b:?}");
    let ts = |d: i64| (T + d, "timestamp".to_string());
    let want: BTreeMap<(i64, i64), (i64, String)> = [
        ((1, 1), ts(3000)),
        ((1, 2), ts(6000)),
        ((1, 3), ts(2000)),
        ((1, 4), ts(2000)),
        ((1, 5), (T + 6000, "counter".to_string())),
        ((2, 2), ts(3500)),
        ((2, 3), (0, "timestamp".to_string())),
        ((2, 6), ts(2500)),
        ((2, 7), ts(3500)),
    ]
    .into_iter()
    .collect();
    let mut got = watermarks(&mut conn).await;
    // (2, 1): a counter equal to every countable message of others gives no position; a
    // watermark of 0 (nothing read) is the same as none.
    if let Some(w) = got.remove(&(2, 1)) {
        assert_eq!(w.0, 0, "(2, 1): {w:?}");
    }
    assert_eq!(got, want, "watermarks");

    // Audit: exactly expected.md's drifting rows.
    let tmp = tempfile::tempdir().unwrap();
    let report = tmp.path().join("drift.csv");
    let a = audit::run(
        &mut conn,
        &mapping,
        dialect,
        &audit::AuditOptions {
            report: report.clone(),
            ..Default::default()
        },
    )
    .await
    .expect("audit");
    assert_eq!(
        (
            a.summary.rows_checked,
            a.summary.drifting_rows,
            a.summary.passed
        ),
        (10, 5, false)
    );
    let file = csv::read(&report);
    let rows: Vec<String> = file.rows.iter().map(|r| r.join(",")).collect();
    let w = |d: i64| T + d;
    assert_eq!(
        rows,
        [
            format!("1,1,3,2,1,own_messages_counted,{},timestamp", w(3000)),
            format!("1,3,2,1,1,excluded_counted,{},timestamp", w(2000)),
            format!("1,4,4,0,4,orphan,{},timestamp", w(2000)),
            format!("2,6,-2,1,-3,negative,{},timestamp", w(2500)),
            format!("2,7,,0,,null_counter,{},timestamp", w(3500)),
        ]
    );

    // Repair (expected.md), then a clean audit.
    for (c, u, seen) in [(1, 1, 4), (1, 3, 5), (1, 4, 6), (2, 6, 2), (2, 7, 3)] {
        exec_all(
            &mut conn,
            &[format!(
                "UPDATE channel_members SET seen_count = {seen} WHERE conv_id = {c} AND user_id = {u}"
            )],
        )
        .await;
    }
    let clean = audit::run(
        &mut conn,
        &mapping,
        dialect,
        &audit::AuditOptions {
            report: tmp.path().join("clean.csv"),
            ..Default::default()
        },
    )
    .await
    .expect("clean audit");
    assert!(clean.summary.passed, "{:?}", clean.summary);

    let totals_sql = format!(
        "SELECT conv_id, CAST(NULL AS {int}), CAST(message_total AS {int}) FROM conversations"
    );
    let seen_sql =
        format!("SELECT conv_id, user_id, CAST(seen_count AS {int}) FROM channel_members");
    let totals = values(&mut conn, &totals_sql).await;
    let seen = values(&mut conn, &seen_sql).await;
    assert_eq!(
        totals.values().map(|v| v.unwrap()).collect::<Vec<_>>(),
        [6, 3]
    );
    assert_eq!(
        seen.values().map(|v| v.unwrap()).collect::<Vec<_>>(),
        [4, 6, 5, 6, 6, 1, 3, 0, 2, 3]
    );

    // A view on the conversation total (not on the counter table) closes the gate, named.
    exec_all(
        &mut conn,
        &["CREATE VIEW totals_view AS SELECT conv_id, message_total FROM conversations".into()],
    )
    .await;
    let blocked = contract::run(
        &mut conn,
        &mapping,
        dialect,
        &ContractOptions {
            audit_report: Some(tmp.path().join("final.csv")),
            ..Default::default()
        },
    )
    .await
    .expect("contract dry run with a view");
    let v = blocked.verdict.unwrap();
    assert!(!v.open);
    let reasons: Vec<String> = v.reasons.iter().map(|r| r.to_string()).collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("totals_view") && r.contains("message_total")),
        "{reasons:?}"
    );
    exec_all(&mut conn, &["DROP VIEW totals_view".into()]).await;

    // The dry run: the gate opens, both targets and the value are shown, nothing changes.
    let opts = ContractOptions {
        audit_report: Some(tmp.path().join("final.csv")),
        lock_timeout: std::time::Duration::from_secs(2),
        ..Default::default()
    };
    let dry = contract::run(&mut conn, &mapping, dialect, &opts)
        .await
        .expect("contract dry run");
    assert!(dry.verdict.as_ref().unwrap().open, "{:?}", dry.verdict);
    assert_eq!(dry.targets.len(), 2);
    let ddl = dry.ddl.join("\n");
    assert!(
        ddl.contains("conv.message_total - this.seen_count"),
        "{ddl}"
    );
    assert!(ddl.contains("column conversations.message_total"), "{ddl}");
    assert!(ddl.contains("column channel_members.seen_count"), "{ddl}");
    assert!(!dry.executed);

    // --execute: the archive holds both columns' values per row of their own table.
    let done = contract::run(
        &mut conn,
        &mapping,
        dialect,
        &ContractOptions {
            execute: true,
            ..opts.clone()
        },
    )
    .await
    .expect("contract --execute");
    assert!(done.executed, "{:?}", done.notes);
    let id = done.ledger_id.unwrap();
    let archive = |table: &str, column: &str| {
        format!(
            "SELECT conversation_id, CAST(user_id AS {int}), counter_value FROM tidemark_counter_archive WHERE contract_id = {id} AND counter_table = '{table}' AND counter_column = '{column}'"
        )
    };
    assert_eq!(
        values(&mut conn, &archive("conversations", "message_total")).await,
        totals
    );
    assert_eq!(
        values(&mut conn, &archive("channel_members", "seen_count")).await,
        seen
    );
    let sums: Vec<(i64, String)> = done
        .target_archives
        .iter()
        .map(|t| (t.checksum.rows, t.checksum.sum.clone()))
        .collect();
    assert_eq!(sums, [(2, "9".to_string()), (10, "36".to_string())]);
    assert_eq!(done.target_archives[1].checksum.sum_squares, "172");
    // The text names every target: one headline for all rows, one line per target, and a
    // done line listing both columns (not the first target's figures alone).
    let mut out = Vec::new();
    tidemark::render::text::contract(
        &mut out,
        &done,
        &Dsn::parse(&db.url).unwrap(),
        &ContractOptions {
            execute: true,
            ..opts.clone()
        },
    )
    .unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.contains(&format!(
            "archived 12 row(s) into tidemark_counter_archive (contract run #{id}, covered by audit"
        )) && out.contains(") for 2 columns; verified"),
        "{out}"
    );
    assert!(
        out.contains("    conversations.message_total: 2 row(s)")
            && out.contains("    channel_members.seen_count: 10 row(s)"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "done: columns conversations.message_total, channel_members.seen_count dropped (ledger run #{id})"
        )),
        "{out}"
    );
    if backend == Backend::Postgres {
        for t in ["conversations.message_total", "channel_members.seen_count"] {
            assert!(
                out.contains(&format!("note: {t}: PostgreSQL drops any index")),
                "{out}"
            );
        }
    }
    for (table, column) in [
        ("conversations", "message_total"),
        ("channel_members", "seen_count"),
    ] {
        let sql = format!("SELECT {column} FROM {table} WHERE 1 = 0");
        assert!(
            sqlx::raw_sql(&sql).execute(&mut conn).await.is_err(),
            "{table}.{column} is still there"
        );
    }
    // The other columns stay.
    let kept: i64 = sqlx::query_scalar(&format!(
        "SELECT CAST(COUNT(last_viewed_ms) AS {int}) FROM channel_members"
    ))
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(kept, 8); // (1, 5) and (2, 1) never viewed

    // `status` names the run that dropped them.
    assert_eq!(
        contract::dropped_by(&mut conn, &mapping, dialect)
            .await
            .unwrap(),
        Some(id)
    );

    // Again: nothing left to drop.
    let again = contract::run(&mut conn, &mapping, dialect, &opts)
        .await
        .unwrap();
    assert!(
        again
            .nothing_to_drop
            .as_deref()
            .unwrap_or_default()
            .contains("nothing left to drop"),
        "{:?}",
        again.nothing_to_drop
    );

    // Backfill and audit after the drop: exit 2, naming the run and both columns it dropped.
    let want = format!(
        "dropped by contract run #{id} (conversations.message_total, channel_members.seen_count): there is nothing left to backfill from or audit"
    );
    let err = backfill::run(&mut conn, &mapping, dialect, &Default::default())
        .await
        .expect_err("backfill after the contract");
    assert_eq!(tidemark::cli::Outcome::code_of(&err), 2, "{err:#}");
    assert!(format!("{err:#}").contains(&want), "{err:#}");
    let err = audit::run(
        &mut conn,
        &mapping,
        dialect,
        &audit::AuditOptions {
            report: tmp.path().join("after.csv"),
            ..Default::default()
        },
    )
    .await
    .expect_err("audit after the contract");
    assert_eq!(tidemark::cli::Outcome::code_of(&err), 2, "{err:#}");
    assert!(format!("{err:#}").contains(&want), "{err:#}");
    drop(conn);
    let _ = Dialect::ALL;
    db.cleanup().await;
}

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

/// A contract killed between its two drops (the first column gone, the second archived but
/// not dropped, the ledger row left `running` as a kill leaves it) is finished by the next run:
/// it names the first target as done by the killed run, does not audit again (the value
/// cannot be read without the first column), archives and drops the second, and the archive
/// rows of both runs together equal the values.
async fn contract_resumes_after_a_kill(backend: Backend) {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    let Some(db) = TestDb::create(backend, "tms_kill").await else {
        return;
    };
    let dsn = Dsn::parse(&db.url).unwrap();
    let dialect = dsn.dialect;
    let int = dialect.int_cast();
    let mut conn = dsn.connect().await.unwrap();
    let dir = fixture_dir();
    exec_all(
        &mut conn,
        &statements(&std::fs::read_to_string(dir.join("schema.sql")).unwrap()),
    )
    .await;
    for (c, u, seen) in [(1, 1, 4), (1, 3, 5), (1, 4, 6), (2, 6, 2), (2, 7, 3)] {
        exec_all(
            &mut conn,
            &[format!(
                "UPDATE channel_members SET seen_count = {seen} WHERE conv_id = {c} AND user_id = {u}"
            )],
        )
        .await;
    }
    let mapping = Mapping::load(&dir.join("tidemark.toml")).unwrap();
    expand::run(&mut conn, &mapping, dialect, false)
        .await
        .unwrap();
    backfill::run(&mut conn, &mapping, dialect, &Default::default())
        .await
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let a = audit::run(
        &mut conn,
        &mapping,
        dialect,
        &audit::AuditOptions {
            report: tmp.path().join("a.csv"),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(a.summary.passed);
    let totals_sql = format!(
        "SELECT conv_id, CAST(NULL AS {int}), CAST(message_total AS {int}) FROM conversations"
    );
    let seen_sql =
        format!("SELECT conv_id, user_id, CAST(seen_count AS {int}) FROM channel_members");
    let totals = values(&mut conn, &totals_sql).await;
    let seen = values(&mut conn, &seen_sql).await;

    // The first run "dies" before its second drop.
    let calls = Arc::new(AtomicU32::new(0));
    let hook_calls = calls.clone();
    let hook: contract::Hook = Arc::new(move || {
        let n = hook_calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            if n == 1 {
                anyhow::bail!("killed before the second drop")
            }
            Ok(())
        })
    });
    let opts = ContractOptions {
        execute: true,
        audit_report: Some(tmp.path().join("final.csv")),
        ..Default::default()
    };
    let first = contract::run(
        &mut conn,
        &mapping,
        dialect,
        &ContractOptions {
            before_ddl: Some(hook),
            ..opts.clone()
        },
    )
    .await;
    assert!(first.is_err(), "the first run must fail at its second drop");
    let first_id: i64 = sqlx::query_scalar(&format!(
        "SELECT CAST(MAX(id) AS {int}) FROM tidemark_ledger WHERE stage = 'contract'"
    ))
    .fetch_one(&mut conn)
    .await
    .unwrap();
    // A kill leaves the ledger row running.
    exec_all(
        &mut conn,
        &[format!(
            "UPDATE tidemark_ledger SET status = 'running' WHERE id = {first_id}"
        )],
    )
    .await;
    let gone = |sql: &str| sql.to_string();
    assert!(
        sqlx::raw_sql(&gone("SELECT message_total FROM conversations WHERE 1 = 0"))
            .execute(&mut conn)
            .await
            .is_err()
    );
    assert!(
        sqlx::raw_sql(&gone("SELECT seen_count FROM channel_members WHERE 1 = 0"))
            .execute(&mut conn)
            .await
            .is_ok()
    );

    // The dry run names what is done and what is left; the run finishes it.
    let dry = contract::run(
        &mut conn,
        &mapping,
        dialect,
        &ContractOptions {
            execute: false,
            ..opts.clone()
        },
    )
    .await
    .expect("dry run after the kill");
    let ddl = dry.ddl.join("\n");
    assert!(
        ddl.contains(&format!(
            "column conversations.message_total: done by contract run #{first_id}"
        )),
        "{ddl}"
    );
    assert!(dry.verdict.unwrap().open);
    let second = contract::run(&mut conn, &mapping, dialect, &opts)
        .await
        .expect("the resumed contract");
    assert!(second.executed);
    assert!(
        second.final_audit.is_none(),
        "a resumed run does not audit again"
    );
    let second_id = second.ledger_id.unwrap();
    let archive = |id: i64, table: &str, column: &str| {
        format!(
            "SELECT conversation_id, CAST(user_id AS {int}), counter_value FROM tidemark_counter_archive WHERE contract_id = {id} AND counter_table = '{table}' AND counter_column = '{column}'"
        )
    };
    assert_eq!(
        values(
            &mut conn,
            &archive(first_id, "conversations", "message_total")
        )
        .await,
        totals
    );
    assert_eq!(
        values(
            &mut conn,
            &archive(second_id, "channel_members", "seen_count")
        )
        .await,
        seen
    );
    assert!(
        sqlx::raw_sql("SELECT seen_count FROM channel_members WHERE 1 = 0")
            .execute(&mut conn)
            .await
            .is_err()
    );
    let again = contract::run(
        &mut conn,
        &mapping,
        dialect,
        &ContractOptions {
            execute: false,
            ..opts
        },
    )
    .await
    .unwrap();
    assert!(again.nothing_to_drop.is_some(), "{:?}", again.ddl);
    drop(conn);
    db.cleanup().await;
}

/// The book's mapping chapter (`docs/src/mapping.md`) shows this fixture's `tidemark plan` contract part as it is (SQLite).
#[tokio::test]
async fn readme_shows_the_plan() {
    use crate::common::bin;
    let Some(db) = TestDb::create(Backend::Sqlite, "tms_plan").await else {
        return;
    };
    let dsn = Dsn::parse(&db.url).unwrap();
    let mut conn = dsn.connect().await.unwrap();
    let dir = fixture_dir();
    exec_all(
        &mut conn,
        &statements(&std::fs::read_to_string(dir.join("schema.sql")).unwrap()),
    )
    .await;
    drop(conn);
    let mapping = dir.join("tidemark.toml");
    let args = |cmd: &str| {
        vec![
            cmd.to_string(),
            "--database".to_string(),
            db.url.clone(),
            "--mapping".to_string(),
            mapping.display().to_string(),
        ]
    };
    let tmp = tempfile::tempdir().unwrap();
    let expand: Vec<String> = args("expand");
    let expand: Vec<&str> = expand.iter().map(String::as_str).collect();
    bin::run(tmp.path(), &expand).expect_code(0);
    let plan: Vec<String> = args("plan");
    let plan: Vec<&str> = plan.iter().map(String::as_str).collect();
    let out = bin::run(tmp.path(), &plan);
    out.expect_code(0);
    let at = out
        .stdout
        .find("== 4. contract ==")
        .expect("a contract part");
    let part = out.stdout[at..]
        .trim_end()
        .trim_end_matches("nothing was changed")
        .trim_end();
    let readme = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/src/mapping.md"),
    )
    .unwrap();
    assert!(
        readme.contains(&format!("```text\n{part}\n```")),
        "docs/src/mapping.md does not show this plan's contract part:\n{part}"
    );
    db.cleanup().await;
}
