//! The fault matrix (issue 13, "Faults"): each fault on PostgreSQL and MariaDB (SQLite where it
//! applies) ends with the documented exit code (README "Exit codes"), the ledger and the
//! checkpoint consistent, nothing half-written, and a rerun that finishes the job with the same
//! watermarks (or report) as an uninterrupted run on a twin database.
//!
//! - the server's backend killed in the middle of a batch (`pg_terminate_backend`, `KILL`),
//!   while `backfill` or `audit` waits inside a batch statement on a lock a second connection
//!   holds: exit 3;
//! - a statement that hits the lock timeout (`--lock-timeout`, `--retries`): exit 3, the
//!   message names the lock wait;
//! - the report's disk full (a 4 KiB tmpfs, or a file-size limit where no tmpfs can be
//!   mounted): exit 3, no report and no temporary file left, the audit recorded as failed;
//! - SIGTERM and SIGINT during `backfill` (stop after the batch, checkpoint, exit 4) and
//!   `audit` (the same: the rows so far kept in `REPORT.partial`, exit 4, `--resume`);
//! - kill -9 during `contract --execute` in the archive, before the checksum and before the
//!   DDL (the hidden `TIDEMARK_TEST_PAUSE_AT` hook, `src/stages/contract/test_pause.rs`), and
//!   while the DDL waits for a lock: the counter column or its verified archive is always
//!   there, and a rerun drops it; kill -9 after the DDL committed, before the ledger recorded
//!   it (issue 25 row 8): the next `contract --execute` finds the archive verified and records
//!   the drop in the killed run's ledger row.
//!
//! - the server session ended while `contract --execute` waits between two archive batches
//!   (the `archive` pause) and while its DDL waits for a lock: exit 3.
//!
//! After a lost server session the message names the stage, the batch and what was kept
//! (issue 25, row 14): "backfill run #1 stopped in batch 7 (conversations after 150 up to
//! 175): the batches up to conversation 150 are committed; run `tidemark backfill` again to
//! continue", and the like for the audit and the contract's archive and DDL.
//!
//! The outcomes are tabulated in the session note (`h13_faults.md`).

use std::time::Duration;

use sqlx::{AnyConnection, Connection};

use crate::common::bin::Run;
use crate::common::faults::{
    self, archived, counter_column_exists, counters, kill_session, scalar, session_id, statuses,
    wait, waiting_session, watermarks, Fixture,
};
use crate::common::{exec_all, on_every_backend, Backend};

/// The backfill options every run here uses: small batches, no settle time (the generated
/// messages are recent), no change count (not under test).
const BACKFILL: [&str; 6] = [
    "backfill",
    "--quiet",
    "--settle-time",
    "0",
    "--skip-change-count",
    "--batch-size=25",
];

/// Long enough for any test here to reach its fault.
const LIMIT: Duration = Duration::from_secs(120);

/// Evaluates `probe` (an `Option`, may `.await`) every 50 ms until it is Some, at most
/// [`LIMIT`]; panics naming `what`.
macro_rules! until {
    ($what:expr, $probe:expr) => {{
        let started = std::time::Instant::now();
        loop {
            if let Some(v) = $probe {
                break v;
            }
            assert!(started.elapsed() < LIMIT, "waited {LIMIT:?} for {}", $what);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }};
}

/// The watermarks and the audit report of an uninterrupted backfill and audit of the same
/// generated database: what every rerun must reach (None when the backend is skipped).
async fn baseline(backend: Backend) -> Option<(Vec<String>, String)> {
    let f = Fixture::generated(backend, "fault_base").await?;
    f.run(&BACKFILL).expect_code(0);
    f.run(&["audit", "--quiet", "--report", "base.csv"])
        .expect_code(1);
    let mut conn = f.connect().await;
    let w = watermarks(&mut conn).await;
    let report = std::fs::read_to_string(f.path().join("base.csv")).unwrap();
    let _ = conn.close().await;
    f.db.cleanup().await;
    Some((w, report))
}

/// Ends `f`'s test: closes `conns` and drops the database.
async fn done(f: Fixture, conns: Vec<AnyConnection>) {
    for c in conns {
        let _ = c.close().await;
    }
    f.db.cleanup().await;
}

/// The stderr of `run` must name the cause `what` (one of `needles`, lower case).
#[track_caller]
fn names(run: &Run, what: &str, needles: &[&str]) {
    let err = run.stderr.to_ascii_lowercase();
    assert!(
        needles.iter().any(|n| err.contains(n)),
        "the message names {what}: {run:?}"
    );
}

mod contract_faults;
mod killed;
mod signals;
