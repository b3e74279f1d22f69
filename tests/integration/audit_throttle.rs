//! The audit's throttles (issue 30, "gentle on a live application": audits run back to back
//! doubled the application's p99 and had no way to be throttled): `--pause-file` holds the
//! audit before its next batch while the file exists, and `--pause-between-batches` spaces
//! the batches; both keep the session alive (`stages::keepalive`), and neither changes a row
//! of the report or the exit code.

use sqlx::Connection;
use std::time::{Duration, Instant};

use crate::common::faults::{statuses, wait, Fixture};
use crate::common::{on_every_backend, Backend, TestDb};
use crate::scenario;

/// Scenarios with drift, one conversation each, loaded side by side (conversations 100, 200,
/// 300), so that the reports compared hold rows and a batch of one conversation is one of
/// three.
const DRIFTING: [&str; 3] = [
    "S1b-duplicate-delivery-overcount",
    "S2-clear-raced-new-message",
    "S7-lost-update-undercount",
];

/// The longest a spawned run may take.
const LIMIT: Duration = Duration::from_secs(120);

/// The scenario loaded, expanded and backfilled, and the reference audit's exit code and
/// report (no throttle).
async fn backfilled(backend: Backend, label: &str) -> Option<(Fixture, i32, String)> {
    let db = TestDb::create(backend, label).await?;
    let mut conn = db.connect().await;
    crate::common::exec_all(&mut conn, &scenario::schema_sql()).await;
    let all = scenario::load_all().unwrap();
    for (i, id) in DRIFTING.iter().enumerate() {
        let s = all
            .iter()
            .find(|s| s.id == *id)
            .expect("the scenario exists");
        crate::common::exec_all(&mut conn, &scenario::data_sql(s, (i as i64 + 1) * 100)).await;
    }
    let f = Fixture::with_mapping(db, &scenario::mapping_toml("per_member", false));
    f.run(&["backfill", "--quiet"]).expect_code(0);
    let reference = f.run(&["audit", "--quiet", "--report", "ref.csv"]);
    let code = reference.code.expect("the audit exits with a code");
    assert_eq!(code, 1, "the scenario drifts:\n{}", reference.stderr);
    let report = std::fs::read_to_string(f.path().join("ref.csv")).unwrap();
    assert!(report.lines().count() > 1, "the reference report has rows");
    Some((f, code, report))
}

on_every_backend!(pause_file_holds_the_audit);

/// While the pause file exists the audit is running (its ledger row says so) and writes no
/// report; once it is removed the audit finishes with the reference's exit code and rows.
async fn pause_file_holds_the_audit(backend: Backend) {
    let Some((f, code, reference)) = backfilled(backend, "audit_pause_file").await else {
        return;
    };
    let mut admin = f.connect().await;
    let pause = f.path().join("pause");
    std::fs::write(&pause, "").unwrap();
    let mut child = f.spawn(
        &[
            "audit",
            "--quiet",
            "--report",
            "paused.csv",
            "--pause-file",
            pause.to_str().unwrap(),
        ],
        &[],
    );
    let started = Instant::now();
    while !statuses(&mut admin, "audit")
        .await
        .contains(&"running".to_string())
    {
        assert!(started.elapsed() < LIMIT, "the paused audit never started");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        child.try_wait().unwrap().is_none(),
        "the audit waits while the pause file exists"
    );
    assert!(
        !f.path().join("paused.csv").exists(),
        "no report while paused"
    );
    std::fs::remove_file(&pause).unwrap();
    let run = wait(child, LIMIT);
    run.expect_code(code);
    let report = std::fs::read_to_string(f.path().join("paused.csv")).unwrap();
    assert_eq!(report, reference, "a paused audit reports the same rows");
    admin.close().await.unwrap();
    f.db.cleanup().await;
}

on_every_backend!(pause_between_batches_spaces_the_batches);

/// One conversation per batch and 300 ms between batches: the run lasts at least
/// (batches − 1) × 300 ms (the pause follows every batch, the last included: at least
/// batches × 300 ms), and its report and exit code are the reference's.
async fn pause_between_batches_spaces_the_batches(backend: Backend) {
    let Some((f, code, reference)) = backfilled(backend, "audit_pause_between").await else {
        return;
    };
    let started = Instant::now();
    let run = f.run(&[
        "audit",
        "--format",
        "json",
        "--report",
        "spaced.csv",
        "--batch-size",
        "1",
        "--pause-between-batches",
        "300ms",
    ]);
    let elapsed = started.elapsed();
    run.expect_code(code);
    let summary: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let batches = summary["batches"].as_u64().expect("batches in the summary");
    assert_eq!(batches, 3, "one batch per conversation");
    assert!(
        elapsed >= Duration::from_millis(300 * batches),
        "{batches} batches with 300 ms after each took {elapsed:?}"
    );
    let report = std::fs::read_to_string(f.path().join("spaced.csv")).unwrap();
    assert_eq!(report, reference, "a throttled audit reports the same rows");
    f.db.cleanup().await;
}
