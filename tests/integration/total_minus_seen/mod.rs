//! The "total minus seen" shape (issue 12, `tests/fixtures/total_minus_seen/`): a conversation
//! total minus a per-member snapshot as the counter's value (`[counter] value` over `this` and
//! `conv`), epoch-millisecond positions, a last-viewed time as evidence, and a membership
//! history deciding who is active (a correlated subquery on `this`), run through expand,
//! backfill, audit and `contract --execute` on every backend by the fixture runner
//! (`common::fixture`). The expected values are worked out by hand in the fixture's
//! `expected.md` (the drift report also as the folder's `expected_drift.csv`), not by running
//! tidemark.

use crate::common::{int_watermarks as watermarks, statements};
use std::collections::BTreeMap;
use std::path::PathBuf;

use sqlx::{AnyConnection, Row};

use crate::common::fixture::Fixture;
use crate::common::{exec_all, on_every_backend, Backend, TestDb};
use tidemark::db::Dsn;
use tidemark::mapping::Mapping;
use tidemark::stages::contract::{self, ContractOptions};
use tidemark::stages::{audit, backfill, expand};

mod contract_runs;
mod other_mappings;

const T: i64 = 1_700_000_000_000;

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/total_minus_seen")
}

/// The repairs of expected.md: the seen counts that make every counter right.
fn repairs() -> Vec<String> {
    [(1, 1, 4), (1, 3, 5), (1, 4, 6), (2, 6, 2), (2, 7, 3)]
        .iter()
        .map(|(c, u, seen)| {
            format!("UPDATE channel_members SET seen_count = {seen} WHERE conv_id = {c} AND user_id = {u}")
        })
        .collect()
}

/// (conv, user or NULL) -> value: a table's column, or one target's archive rows.
type Values = BTreeMap<(i64, Option<i64>), Option<i64>>;

/// The rows of `sql` (conv, user or NULL, value) as [`Values`].
async fn values(conn: &mut AnyConnection, sql: &str) -> Values {
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
    let Some(mut f) = Fixture::load(backend, "total_minus_seen").await else {
        return;
    };
    let story = f.story(&[], Default::default()).await;
    // Backfill: expected.md's watermarks.
    let b = &story.backfill;
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
    let mut got = watermarks(&mut f.conn).await;
    // (2, 1): a counter equal to every countable message of others gives no position; a
    // watermark of 0 (nothing read) is the same as none.
    if let Some(w) = got.remove(&(2, 1)) {
        assert_eq!(w.0, 0, "(2, 1): {w:?}");
    }
    assert_eq!(got, want, "watermarks");

    // Audit: expected.md's summary (its drifting rows: expected_drift.csv, by the runner).
    let a = &story.audit;
    assert_eq!(
        (
            a.summary.rows_checked,
            a.summary.drifting_rows,
            a.summary.passed
        ),
        (10, 5, false)
    );
    let (totals, seen) = repair(&mut f).await;
    view_closes_the_gate(&mut f).await;
    let id = contract_drops_both(&mut f, backend, &totals, &seen).await;
    after_the_drop(&mut f, id).await;
    f.finish().await;
}

/// Repairs the counters (expected.md), checks a clean audit, and returns the two columns'
/// values: (conv, NULL) -> conversation total and (conv, user) -> seen count.
async fn repair(f: &mut Fixture) -> (Values, Values) {
    let int = f.dialect.int_cast();
    // Repair (expected.md), then a clean audit.
    for sql in repairs() {
        f.exec(&[&sql]).await;
    }
    let clean = f
        .audit(&audit::AuditOptions {
            report: f.path("clean.csv"),
            ..Default::default()
        })
        .await;
    assert!(clean.summary.passed, "{:?}", clean.summary);

    let totals_sql = format!(
        "SELECT conv_id, CAST(NULL AS {int}), CAST(message_total AS {int}) FROM conversations"
    );
    let seen_sql =
        format!("SELECT conv_id, user_id, CAST(seen_count AS {int}) FROM channel_members");
    let totals = values(&mut f.conn, &totals_sql).await;
    let seen = values(&mut f.conn, &seen_sql).await;
    assert_eq!(
        totals.values().map(|v| v.unwrap()).collect::<Vec<_>>(),
        [6, 3]
    );
    assert_eq!(
        seen.values().map(|v| v.unwrap()).collect::<Vec<_>>(),
        [4, 6, 5, 6, 6, 1, 3, 0, 2, 3]
    );

    (totals, seen)
}

/// A view on the conversation total (not on the counter table) closes the gate, named.
async fn view_closes_the_gate(f: &mut Fixture) {
    // A view on the conversation total (not on the counter table) closes the gate, named.
    f.exec(&["CREATE VIEW totals_view AS SELECT conv_id, message_total FROM conversations"])
        .await;
    let blocked = f
        .contract(&ContractOptions {
            audit_report: Some(f.path("final.csv")),
            ..Default::default()
        })
        .await;
    let v = blocked.verdict.unwrap();
    assert!(!v.open);
    let reasons: Vec<String> = v.reasons.iter().map(|r| r.to_string()).collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("totals_view") && r.contains("message_total")),
        "{reasons:?}"
    );
    f.exec(&["DROP VIEW totals_view"]).await;
}

/// The dry run (the gate opens, both targets and the value shown, nothing changed), then
/// `--execute`: the archive holds both columns' values per row of their own table, the text
/// names every target, both columns are gone and the others stay. Returns the contract run.
async fn contract_drops_both(
    f: &mut Fixture,
    backend: Backend,
    totals: &Values,
    seen: &Values,
) -> i64 {
    let int = f.dialect.int_cast();
    // The dry run: the gate opens, both targets and the value are shown, nothing changes.
    let opts = ContractOptions {
        audit_report: Some(f.path("final.csv")),
        lock_timeout: std::time::Duration::from_secs(2),
        ..Default::default()
    };
    let dry = f.contract(&opts).await;
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
    let done = f
        .contract(&ContractOptions {
            execute: true,
            ..opts.clone()
        })
        .await;
    assert!(done.executed, "{:?}", done.notes);
    let id = done.ledger_id.unwrap();
    let archive = |table: &str, column: &str| {
        format!(
            "SELECT conversation_id, CAST(user_id AS {int}), counter_value FROM tidemark_counter_archive WHERE contract_id = {id} AND counter_table = '{table}' AND counter_column = '{column}'"
        )
    };
    assert_eq!(
        values(&mut f.conn, &archive("conversations", "message_total")).await,
        *totals
    );
    assert_eq!(
        values(&mut f.conn, &archive("channel_members", "seen_count")).await,
        *seen
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
        &Dsn::parse(&f.db.url).unwrap(),
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
            sqlx::raw_sql(&sql).execute(&mut f.conn).await.is_err(),
            "{table}.{column} is still there"
        );
    }
    // The other columns stay.
    let kept = f
        .count(&format!(
            "SELECT CAST(COUNT(last_viewed_ms) AS {int}) FROM channel_members"
        ))
        .await;
    assert_eq!(kept, 8); // (1, 5) and (2, 1) never viewed

    id
}

/// After the drop: `status` names the run, a second contract has nothing left to drop, and
/// backfill and audit exit 2 naming the run and both columns.
async fn after_the_drop(f: &mut Fixture, id: i64) {
    // `status` names the run that dropped them.
    assert_eq!(
        contract::dropped_by(&mut f.conn, &f.mapping, f.dialect)
            .await
            .unwrap(),
        Some(id)
    );

    // Again: nothing left to drop.
    let opts = ContractOptions {
        audit_report: Some(f.path("final.csv")),
        lock_timeout: std::time::Duration::from_secs(2),
        ..Default::default()
    };
    let again = f.contract(&opts).await;
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
    let err = backfill::run(&mut f.conn, &f.mapping, f.dialect, &Default::default())
        .await
        .expect_err("backfill after the contract");
    assert_eq!(tidemark::cli::Outcome::code_of(&err), 2, "{err:#}");
    assert!(format!("{err:#}").contains(&want), "{err:#}");
    let after = f.path("after.csv");
    let err = audit::run(
        &mut f.conn,
        &f.mapping,
        f.dialect,
        &audit::AuditOptions {
            report: after,
            ..Default::default()
        },
    )
    .await
    .expect_err("audit after the contract");
    assert_eq!(tidemark::cli::Outcome::code_of(&err), 2, "{err:#}");
    assert!(format!("{err:#}").contains(&want), "{err:#}");
}

/// The book's mapping chapter (`docs/src/mapping.md`) shows this fixture's `tidemark plan`
/// contract part as it is (SQLite).
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

on_every_backend!(total_minus_seen);
