//! Runs that did not finish (issue 25, rows 10 and 11).
//!
//! - Row 10, an audit after a missing or unfinished backfill: before, `audit` reported the
//!   members without a watermark as ordinary drift (9 104 of 10 000 rows), and a passing audit
//!   (within a tolerance) counted for the gate. Now its summary (text, JSON, metrics) says how
//!   many members have no watermark and that the last backfill of the mapping never ran or did
//!   not finish, naming `tidemark backfill`; the gate never counts such an audit (reason
//!   `backfill_unfinished`).
//! - Row 11, a killed audit: before, `status` showed it `running` forever. Now the audit holds
//!   a runner lock of its own as the backfill does: `status` shows a `running` audit whose
//!   lock is free as gone (`alive: false`), and the next audit of the mapping marks it
//!   `abandoned`.

use std::time::{Duration, Instant};

use serde_json::Value;
use sqlx::{AnyConnection, Connection};

use crate::common::bin::Run;
use crate::common::faults::{self, scalar, statuses, wait, Fixture};
use crate::common::{on_every_backend, Backend};

on_every_backend!(audit_after_unfinished_backfill, killed_audit_is_abandoned);

/// The backfill every run here uses: small batches, no settle time, no change count.
const BACKFILL: [&str; 6] = [
    "backfill",
    "--quiet",
    "--settle-time",
    "0",
    "--skip-change-count",
    "--batch-size=25",
];

/// Long enough for any wait here.
const LIMIT: Duration = Duration::from_secs(120);

fn json(run: &Run) -> Value {
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {run:?}"))
}

/// Counter rows whose member has no watermark.
async fn without_watermark(conn: &mut AnyConnection) -> i64 {
    scalar(
        conn,
        "SELECT COUNT(*) FROM unread_counters c WHERE NOT EXISTS (SELECT 1 FROM read_watermarks w \
         WHERE w.conversation_id = c.conv_id AND w.user_id = c.user_id)",
    )
    .await
}

/// The gate reasons' kinds of `contract --accept-tolerance --format json`, and its exit code.
fn gate(f: &Fixture) -> (Option<i32>, Vec<String>) {
    let run = f.run(&["contract", "--accept-tolerance", "--format", "json"]);
    let kinds = json(&run)["gate"]["reasons"]
        .as_array()
        .unwrap_or_else(|| panic!("{run:?}"))
        .iter()
        .map(|r| r["kind"].as_str().unwrap().to_string())
        .collect();
    (run.code, kinds)
}

/// An audit with no backfill at all, then one after a backfill killed mid-run: each says how
/// many members have no watermark and where the backfill stands (text, JSON, metrics), and the
/// gate does not count it even though it passed within its tolerance; once the backfill is
/// finished, the next audit counts.
async fn audit_after_unfinished_backfill(backend: Backend) {
    let Some(f) = Fixture::generated(backend, "au_no_backfill").await else {
        return;
    };
    let mut conn = f.connect().await;
    let tolerant = [
        "audit",
        "--quiet",
        "--report",
        "d.csv",
        "--max-drift-ratio",
        "1",
    ];

    // Never run: every counter row's member lacks a watermark.
    let mut args = tolerant.to_vec();
    args.extend(["--format", "json", "--metrics-file", "m.prom"]);
    let run = f.run(&args);
    run.expect_code(0);
    let s = json(&run);
    let rows = s["rows_checked"].as_u64().unwrap();
    assert!(rows > 1000, "{s}");
    assert_eq!(s["members_without_watermark"], rows, "{s}");
    assert_eq!(s["backfill"]["id"], Value::Null, "never run: {s}");
    assert_eq!(s["backfill"]["status"], Value::Null, "{s}");
    assert_eq!(s["backfill"]["finished"], false, "{s}");
    assert_eq!(s["backfill"]["command"], "tidemark backfill", "{s}");
    let metrics = std::fs::read_to_string(f.path().join("m.prom")).unwrap();
    assert!(
        metrics.lines().any(|l| {
            l.starts_with("tidemark_audit_members_without_watermark{")
                && l.ends_with(&format!(" {rows}"))
        }),
        "{metrics}"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("tidemark_audit_backfill_finished{") && l.ends_with(" 0")),
        "{metrics}"
    );
    let text = f.run(&tolerant);
    text.expect_code(0);
    assert!(
        text.stdout.contains(&format!(
            "{rows} members have no watermark: no backfill of this mapping has run"
        )) && text.stdout.contains("run `tidemark backfill`")
            && text
                .stdout
                .contains("the contract gate does not count this audit"),
        "{text:?}"
    );
    let (code, kinds) = gate(&f);
    assert_eq!(code, Some(1), "{kinds:?}");
    assert!(
        kinds.contains(&"backfill_unfinished".to_string()),
        "{kinds:?}"
    );

    // A backfill killed after some batches: `running`, its process gone.
    let mut args = BACKFILL.to_vec();
    args.extend(["--pause-between-batches", "200ms"]);
    let child = f.spawn(&args, &[]);
    let started = Instant::now();
    while scalar(&mut conn, "SELECT COUNT(*) FROM read_watermarks").await == 0 {
        assert!(started.elapsed() < LIMIT, "a first batch");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    faults::signal(&child, "KILL");
    let _ = wait(child, LIMIT);
    assert_eq!(statuses(&mut conn, "backfill").await, ["running"]);
    let missing = without_watermark(&mut conn).await;
    assert!(missing > 0 && (missing as u64) < rows, "{missing}");
    let mut args = tolerant.to_vec();
    args.extend(["--format", "json"]);
    let run = f.run(&args);
    run.expect_code(0);
    let s = json(&run);
    assert_eq!(s["members_without_watermark"], missing, "{s}");
    assert!(s["backfill"]["id"].as_i64().is_some(), "{s}");
    assert_eq!(s["backfill"]["status"], "running", "{s}");
    assert_eq!(s["backfill"]["alive"], false, "{s}");
    assert_eq!(s["backfill"]["finished"], false, "{s}");
    let text = f.run(&tolerant);
    assert!(
        text.stdout
            .contains(&format!("{missing} members have no watermark"))
            && text.stdout.contains("stopped unfinished")
            && text.stdout.contains("run `tidemark backfill`"),
        "{text:?}"
    );
    let (code, kinds) = gate(&f);
    assert_eq!(code, Some(1), "{kinds:?}");
    assert!(
        kinds.contains(&"backfill_unfinished".to_string()),
        "{kinds:?}"
    );

    // Finished: the next audit says so and counts.
    f.run(&BACKFILL).expect_code(0);
    assert_eq!(statuses(&mut conn, "backfill").await, ["done"]);
    let mut args = tolerant.to_vec();
    args.extend(["--format", "json"]);
    let run = f.run(&args);
    let s = json(&run);
    assert_eq!(s["backfill"]["status"], "done", "{s}");
    assert_eq!(s["backfill"]["finished"], true, "{s}");
    assert_eq!(s["backfill"]["command"], Value::Null, "{s}");
    assert_eq!(
        s["members_without_watermark"],
        without_watermark(&mut conn).await,
        "{s}"
    );
    let text = f.run(&tolerant);
    assert!(!text.stdout.contains("have no watermark"), "{text:?}");
    let (code, kinds) = gate(&f);
    assert_eq!(code, Some(0), "{kinds:?}");
    let _ = conn.close().await;
    f.db.cleanup().await;
}

/// kill -9 of an audit in the middle of its batches: `status` shows the run recorded as
/// `running` as gone (JSON `alive: false`, text `gone`), and the next audit marks it
/// `abandoned`, which `status` then shows.
async fn killed_audit_is_abandoned(backend: Backend) {
    let Some(f) = Fixture::generated(backend, "au_kill9").await else {
        return;
    };
    f.run(&BACKFILL).expect_code(0);
    let mut conn = f.connect().await;
    let audit = [
        "audit",
        "--quiet",
        "--report",
        "drift.csv",
        "--batch-size",
        "5",
    ];
    let child = f.spawn(&audit, &[]);
    let started = Instant::now();
    while statuses(&mut conn, "audit").await.is_empty() {
        assert!(started.elapsed() < LIMIT, "the audit's ledger row");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    faults::signal(&child, "KILL");
    let run = wait(child, LIMIT);
    assert_eq!(run.code, None, "killed: {run:?}");
    assert_eq!(
        statuses(&mut conn, "audit").await,
        ["running"],
        "killed in the middle"
    );
    // The server may take a moment to end the killed client's session.
    let started = Instant::now();
    let status = loop {
        let status = f.run(&["status", "--format", "json"]);
        status.expect_code(0);
        let s = json(&status);
        if s["audits"][0]["alive"] == false || started.elapsed() > Duration::from_secs(10) {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(status["audits"][0]["status"], "running", "{status}");
    assert_eq!(status["audits"][0]["alive"], false, "{status}");
    let text = f.run(&["status"]);
    assert!(
        text.stdout.contains("gone")
            && text.stdout.contains("its process is gone")
            && text
                .stdout
                .contains("the next audit of its mapping marks it abandoned"),
        "{text:?}"
    );

    f.run(&audit).expect_code(1);
    assert_eq!(
        statuses(&mut conn, "audit").await,
        ["abandoned", "done"],
        "the dead run is abandoned by the next"
    );
    let status = f.run(&["status", "--format", "json"]);
    let s = json(&status);
    assert_eq!(s["audits"][0]["status"], "done", "{s}");
    assert_eq!(s["audits"][1]["status"], "abandoned", "{s}");
    assert_eq!(s["audits"][1]["alive"], false, "{s}");
    let _ = conn.close().await;
    f.db.cleanup().await;
}
