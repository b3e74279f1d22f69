//! Messages only some readers count (issue 22, semantics.md), through expand, backfill, audit
//! and `contract --execute` on every backend, on two real schemas whose expected values are
//! worked out by hand in their fixture's `expected.md` (not by running tidemark):
//!
//! - `tests/fixtures/discourse/`: staff whispers (`[messages] restricted` with
//!   `restricted_readers` over the reader's `users` row): a staff member's stored counter
//!   counts whispers, a regular user's does not, in the audit and in the counter evidence's
//!   rank;
//! - `tests/fixtures/dendrite/`: invites counted for the invitee only (`[messages] recipient`),
//!   with receipt evidence whose `filter` reads the looked-up event (`lookup.`).
//!
//! The random worlds of `differential` check the same rules against the independent model.

use crate::common::statements;
use std::collections::BTreeMap;
use std::path::PathBuf;

use sqlx::{AnyConnection, Connection, Row};

use crate::common::{csv, exec_all, on_every_backend, Backend, TestDb};
use tidemark::db::Dsn;
use tidemark::mapping::Mapping;
use tidemark::stages::contract::{self, ContractOptions};
use tidemark::stages::{audit, backfill, expand};
use tidemark::values::text;

on_every_backend!(discourse_whispers, dendrite_invites);

/// What a fixture's expected.md says.
struct Expected {
    /// The fixture's folder under tests/fixtures/.
    name: &'static str,
    /// (conv, user) -> (last_read_id, source), every watermark the backfill writes.
    watermarks: Vec<(&'static str, &'static str, i64, &'static str)>,
    /// Members the backfill finds no evidence for.
    no_evidence: u64,
    /// The audit: rows checked, sum |drift|, largest |drift|.
    checked: u64,
    sums: (i64, i64),
    /// The report's rows, as CSV lines.
    report: Vec<&'static str>,
    /// The repair: (counter table, column, conversation column, user column), then per row
    /// (conv, user, value).
    counter: (&'static str, &'static str, &'static str, &'static str),
    repair: Vec<(&'static str, &'static str, i64)>,
    /// The archive: rows and sum of the dropped column.
    archive: (i64, &'static str),
}

/// A key column as text (an integer key written in decimal).
fn key(r: &sqlx::any::AnyRow, i: usize) -> String {
    match r.try_get::<i64, _>(i) {
        Ok(v) => v.to_string(),
        Err(_) => text(r, i).unwrap().unwrap_or_default(),
    }
}

/// (conv, user) -> (last_read_id, source), keys as text.
async fn watermarks(conn: &mut AnyConnection) -> BTreeMap<(String, String), (i64, String)> {
    sqlx::query("SELECT conversation_id, user_id, last_read_id, source FROM read_watermarks")
        .fetch_all(&mut *conn)
        .await
        .unwrap()
        .iter()
        .map(|r| {
            (
                (key(r, 0), key(r, 1)),
                (
                    r.try_get(2).unwrap(),
                    text(r, 3).unwrap().unwrap_or_default(),
                ),
            )
        })
        .collect()
}

async fn run(backend: Backend, want: Expected) {
    let Some(db) = TestDb::create(backend, want.name).await else {
        return;
    };
    let dsn = Dsn::parse(&db.url).unwrap();
    let dialect = dsn.dialect;
    let mut conn = dsn.connect().await.unwrap();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(want.name);
    let schema = std::fs::read_to_string(dir.join("schema.sql")).unwrap();
    exec_all(&mut conn, &statements(&schema)).await;
    let mapping =
        Mapping::load(&crate::common::known_mapping(want.name)).expect("the mapping loads");
    assert!(mapping.has_reader_rules());
    mapping
        .check_predicates(dialect.sql_parser_dialect(), dialect.name())
        .unwrap();
    tidemark::schema::preflight(&mut conn, &mapping, dialect)
        .await
        .expect("preflight");
    expand::run(&mut conn, &mapping, dialect, false)
        .await
        .unwrap();

    // Backfill: expected.md's watermarks, the counter ranked per reader.
    let b = backfill::run(&mut conn, &mapping, dialect, &Default::default())
        .await
        .expect("backfill");
    assert_eq!(b.no_evidence, want.no_evidence, "{b:?}");
    assert_eq!(b.unread_changes, want.report.len() as u64, "{b:?}");
    let expected: BTreeMap<(String, String), (i64, String)> = want
        .watermarks
        .iter()
        .map(|(c, u, v, s)| ((c.to_string(), u.to_string()), (*v, s.to_string())))
        .collect();
    assert_eq!(watermarks(&mut conn).await, expected, "watermarks");

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
    let s = &a.summary;
    assert_eq!(
        (
            s.rows_checked,
            s.drifting_rows,
            s.sum_abs_drift,
            s.max_abs_drift
        ),
        (
            want.checked,
            want.report.len() as u64,
            want.sums.0,
            want.sums.1
        ),
        "{s:?}"
    );
    let rows: Vec<String> = csv::read(&report)
        .rows
        .iter()
        .map(|r| r.join(","))
        .collect();
    assert_eq!(rows, want.report);

    // Repair, then a clean audit, then the contract drops the counter.
    let (table, column, conv_col, user_col) = want.counter;
    for (c, u, v) in &want.repair {
        exec_all(
            &mut conn,
            &[format!(
                "UPDATE {table} SET {column} = {v} WHERE {conv_col} = '{c}' AND {user_col} = '{u}'"
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
    let done = contract::run(
        &mut conn,
        &mapping,
        dialect,
        &ContractOptions {
            execute: true,
            audit_report: Some(tmp.path().join("final.csv")),
            lock_timeout: std::time::Duration::from_secs(2),
            ..Default::default()
        },
    )
    .await
    .expect("contract --execute");
    assert!(done.executed, "{:?} {:?}", done.notes, done.verdict);
    let archive = done.archive.as_ref().expect("the archive");
    assert_eq!(
        (archive.checksum.rows, archive.checksum.sum.as_str()),
        want.archive
    );
    let gone = sqlx::query(&format!("SELECT {column} FROM {table}"))
        .fetch_all(&mut conn)
        .await;
    assert!(gone.is_err(), "{table}.{column} is still there");
    let _ = conn.close().await;
    db.cleanup().await;
}

/// tests/fixtures/discourse/expected.md.
async fn discourse_whispers(backend: Backend) {
    let pos = "position";
    run(
        backend,
        Expected {
            name: "discourse",
            watermarks: vec![
                ("10", "1", 3, pos),
                ("10", "2", 6, "counter"),
                ("10", "3", 3, "counter"),
                ("10", "4", 6, pos),
                ("10", "5", 8, pos),
                ("20", "1", 1, pos),
                ("20", "2", 4, pos),
                ("20", "5", 1, pos),
            ],
            no_evidence: 1,
            checked: 9,
            sums: (2, 1),
            report: vec![
                "10,4,2,1,1,excluded_counted,6,position",
                "20,1,2,3,-1,undercount,1,position",
                "20,3,,2,,null_counter,,",
            ],
            counter: ("topic_users", "unread_count", "topic_id", "user_id"),
            repair: vec![("10", "4", 1), ("20", "1", 3), ("20", "3", 2)],
            archive: (9, "13"),
        },
    )
    .await;
}

/// tests/fixtures/dendrite/expected.md.
async fn dendrite_invites(backend: Backend) {
    let (a, b) = ("!a:example.org", "!b:example.org");
    let pos = "position";
    run(
        backend,
        Expected {
            name: "dendrite",
            watermarks: vec![
                (a, "@alice:example.org", 6, pos),
                (a, "@bob:example.org", 8, pos),
                (a, "@erin:example.org", 10, pos),
                (a, "@carol:example.org", 6, "counter"),
                (a, "@dave:example.org", 10, "counter"),
                (b, "@carol:example.org", 17, pos),
                (b, "@alice:example.org", 17, pos),
                (b, "@erin:example.org", 17, "counter"),
            ],
            no_evidence: 0,
            checked: 8,
            sums: (4, 2),
            report: vec![
                "!a:example.org,@bob:example.org,4,2,2,overcount,8,position",
                "!a:example.org,@erin:example.org,0,1,-1,cleared,10,position",
                "!b:example.org,@alice:example.org,1,0,1,orphan,17,position",
            ],
            counter: (
                "syncapi_notification_data",
                "notification_count",
                "room_id",
                "user_id",
            ),
            repair: vec![
                (a, "@bob:example.org", 2),
                (a, "@erin:example.org", 1),
                (b, "@alice:example.org", 0),
            ],
            archive: (8, "11"),
        },
    )
    .await;
}
