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
//! Both run through the fixture runner (`common::fixture`): the watermarks and the drift
//! report are the folder's expected CSVs. The random worlds of `differential` check the same
//! rules against the independent model.

use crate::common::fixture::Fixture;
use crate::common::{on_every_backend, Backend};
use tidemark::stages::audit;
use tidemark::stages::contract::ContractOptions;

on_every_backend!(discourse_whispers, dendrite_invites);

/// What a fixture's expected.md says beyond its expected CSVs (the watermarks and the drift
/// report, which the runner compares).
struct Expected {
    /// The fixture's folder under tests/fixtures/.
    name: &'static str,
    /// Members the backfill finds no evidence for.
    no_evidence: u64,
    /// The audit: rows checked, drifting rows, sum |drift|, largest |drift|.
    checked: u64,
    drifting: u64,
    sums: (i64, i64),
    /// The repair: (counter table, column, conversation column, user column), then per row
    /// (conv, user, value).
    counter: (&'static str, &'static str, &'static str, &'static str),
    repair: Vec<(&'static str, &'static str, i64)>,
    /// The archive: rows and sum of the dropped column.
    archive: (i64, &'static str),
}

async fn run(backend: Backend, want: Expected) {
    let Some(mut f) = Fixture::load(backend, want.name).await else {
        return;
    };
    assert!(f.mapping.has_reader_rules());
    tidemark::schema::preflight(&mut f.conn, &f.mapping, f.dialect)
        .await
        .expect("preflight");
    // The runner's story: backfill (expected_watermarks.csv, the counter ranked per reader)
    // and audit (expected_drift.csv: exactly expected.md's drifting rows).
    let story = f.story(&[], Default::default()).await;
    let b = &story.backfill;
    assert_eq!(b.no_evidence, want.no_evidence, "{b:?}");
    assert_eq!(b.unread_changes, want.drifting, "{b:?}");
    let s = &story.audit.summary;
    assert_eq!(
        (
            s.rows_checked,
            s.drifting_rows,
            s.sum_abs_drift,
            s.max_abs_drift
        ),
        (want.checked, want.drifting, want.sums.0, want.sums.1),
        "{s:?}"
    );
    assert_eq!(story.report.rows.len() as u64, want.drifting);

    // Repair, then a clean audit, then the contract drops the counter.
    let (table, column, conv_col, user_col) = want.counter;
    for (c, u, v) in &want.repair {
        f.exec(&[&format!(
            "UPDATE {table} SET {column} = {v} WHERE {conv_col} = '{c}' AND {user_col} = '{u}'"
        )])
        .await;
    }
    let clean = f
        .audit(&audit::AuditOptions {
            report: f.path("clean.csv"),
            ..Default::default()
        })
        .await;
    assert!(clean.summary.passed, "{:?}", clean.summary);
    let done = f
        .contract(&ContractOptions {
            execute: true,
            audit_report: Some(f.path("final.csv")),
            lock_timeout: std::time::Duration::from_secs(2),
            ..Default::default()
        })
        .await;
    assert!(done.executed, "{:?} {:?}", done.notes, done.verdict);
    let archive = done.archive.as_ref().expect("the archive");
    assert_eq!(
        (archive.checksum.rows, archive.checksum.sum.as_str()),
        want.archive
    );
    let gone = sqlx::query(&format!("SELECT {column} FROM {table}"))
        .fetch_all(&mut f.conn)
        .await;
    assert!(gone.is_err(), "{table}.{column} is still there");
    f.finish().await;
}

/// tests/fixtures/discourse/expected.md.
async fn discourse_whispers(backend: Backend) {
    run(
        backend,
        Expected {
            name: "discourse",
            no_evidence: 1,
            checked: 9,
            drifting: 3,
            sums: (2, 1),
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
    run(
        backend,
        Expected {
            name: "dendrite",
            no_evidence: 0,
            checked: 8,
            drifting: 3,
            sums: (4, 2),
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
