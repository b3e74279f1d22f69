//! The fault matrix (issue 13, "Faults"): each fault on PostgreSQL and MariaDB (SQLite where it
//! applies) ends with the documented exit code (the book: docs/src/introduction.md, "Exit codes"), the ledger and the
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

on_every_backend!(servers: backend_killed_mid_backfill, backend_killed_mid_audit);
on_every_backend!(servers: backfill_kill9_before_a_checkpoint);
on_every_backend!(multi_thread: backfill_lock_timeout, report_disk_full);
on_every_backend!(multi_thread: backfill_sigterm, backfill_sigint, audit_sigterm, audit_sigint);
on_every_backend!(multi_thread: contract_kill9_at_each_step, contract_kill9_after_the_drop);
on_every_backend!(servers: contract_kill9_while_ddl_waits);
on_every_backend!(servers: contract_server_lost_mid_archive, contract_server_lost_while_ddl_waits);

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

// ---- the server's backend killed in the middle of a batch ----

/// A backfill waits inside a batch (its write blocked by a second connection's uncommitted
/// watermarks of the later conversations, after some batches committed); its server session is killed: exit 3,
/// the committed batches stay, the run is not recorded as done, and the rerun reaches the
/// uninterrupted run's watermarks.
async fn backend_killed_mid_backfill(backend: Backend) {
    let Some((want, _)) = baseline(backend).await else {
        return;
    };
    let Some(f) = Fixture::generated(backend, "fault_kill_bf").await else {
        return;
    };
    let mut admin = f.connect().await;
    let mut holder = f.connect().await;
    let mine = vec![
        session_id(&mut admin, backend).await,
        session_id(&mut holder, backend).await,
    ];
    let mut args = BACKFILL.to_vec();
    args.extend(["--pause-between-batches", "200ms", "--lock-timeout", "60s"]);
    let child = f.spawn(&args, &[]);
    until!("a first batch", {
        (scalar(&mut admin, "SELECT COUNT(*) FROM read_watermarks").await > 0).then_some(())
    });
    // Hold the conversations a little ahead of where the backfill is now.
    let ahead = scalar(
        &mut admin,
        "SELECT MAX(conversation_id) FROM read_watermarks",
    )
    .await
        + 10;
    exec_all(&mut holder, &faults::hold_rows_sql(backend, ahead)).await;
    let victim = until!("the backfill waiting for the lock", {
        waiting_session(&mut admin, backend, &f.db.name, &mine).await
    });
    let before = watermarks(&mut admin).await;
    kill_session(&mut admin, backend, victim).await;
    let run = wait(child, LIMIT);
    exec_all(&mut holder, &["ROLLBACK".to_string()]).await;
    run.expect_code(3);
    names(
        &run,
        "the lost connection",
        &[
            "terminat",
            "connection",
            "killed",
            "communicating with database",
        ],
    );
    // Issue 25, row 14: the message names the stage, the batch and what was kept.
    eprintln!("{}: {}", backend.name(), run.stderr.trim());
    let lo = checkpoint_lo(&mut admin).await;
    for said in [
        "backfill run #1 stopped in batch ".to_string(),
        format!("(conversations after {lo} up to "),
        format!("the batches up to conversation {lo} are committed"),
        "run `tidemark backfill` again to continue".to_string(),
    ] {
        assert!(run.stderr.contains(&said), "says {said:?}: {run:?}");
    }
    // The batches before the kill were committed, the one in flight was not.
    let after = watermarks(&mut admin).await;
    assert_eq!(after, before, "nothing of the killed batch was written");
    assert!(!after.is_empty() && after.len() < want.len());
    let runs = statuses(&mut admin, "backfill").await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_ne!(runs[0], "done", "{runs:?}");
    eprintln!("{}: killed backfill left ledger {runs:?}", backend.name());

    f.run(&BACKFILL).expect_code(0);
    assert_eq!(watermarks(&mut admin).await, want);
    let runs = statuses(&mut admin, "backfill").await;
    assert_eq!(runs, ["done"], "the killed run resumed and finished");
    done(f, vec![admin, holder]).await;
}

/// kill -9 of a backfill before its first checkpoint (it waits on `--pause-file`): its run
/// stays `running` with nothing to resume; the rerun starts a new run, and once it holds the
/// runner lock marks the dead one `abandoned` (servers: the session lock goes with the
/// process; SQLite's lock row would only be taken over after its heartbeat goes stale).
/// `status` then shows the newest run done, and the watermarks are the uninterrupted ones.
async fn backfill_kill9_before_a_checkpoint(backend: Backend) {
    let Some((want, _)) = baseline(backend).await else {
        return;
    };
    let Some(f) = Fixture::generated(backend, "fault_bf_kill9").await else {
        return;
    };
    let mut admin = f.connect().await;
    let pause = f.path().join("pause");
    std::fs::write(&pause, "").unwrap();
    let mut args = BACKFILL.to_vec();
    args.extend(["--pause-file", pause.to_str().unwrap()]);
    let child = f.spawn(&args, &[]);
    until!("the backfill's ledger row", {
        (statuses(&mut admin, "backfill").await.len() == 1).then_some(())
    });
    faults::signal(&child, "KILL");
    let run = wait(child, LIMIT);
    assert_eq!(run.code, None, "killed: {run:?}");
    assert_eq!(statuses(&mut admin, "backfill").await, ["running"]);
    assert!(watermarks(&mut admin).await.is_empty(), "no batch ran");

    std::fs::remove_file(&pause).unwrap();
    f.run(&BACKFILL).expect_code(0);
    assert_eq!(
        statuses(&mut admin, "backfill").await,
        ["abandoned", "done"],
        "the dead run is abandoned, the new one done"
    );
    assert_eq!(watermarks(&mut admin).await, want);
    let status = f.run(&["status", "--format", "json"]);
    status.expect_code(0);
    let json: serde_json::Value = serde_json::from_str(&status.stdout).unwrap();
    assert_eq!(json["backfill"]["status"], "done", "{}", status.stdout);
    done(f, vec![admin]).await;
}

/// An audit waits inside a batch statement (a second connection locks the counter table
/// against reads once the audit's run is in the ledger); its server session is killed:
/// exit 3, no report and no temporary file, and the rerun's report is the uninterrupted one.
async fn backend_killed_mid_audit(backend: Backend) {
    let Some((_, want)) = baseline(backend).await else {
        return;
    };
    let Some(f) = Fixture::generated(backend, "fault_kill_au").await else {
        return;
    };
    f.run(&BACKFILL).expect_code(0);
    let mut admin = f.connect().await;
    let mut holder = f.connect().await;
    let mine = vec![
        session_id(&mut admin, backend).await,
        session_id(&mut holder, backend).await,
    ];
    let child = f.spawn(
        &[
            "audit",
            "--quiet",
            "--report",
            "drift.csv",
            "--batch-size",
            "25",
            "--lock-timeout",
            "60s",
        ],
        &[],
    );
    until!("the audit's ledger row", {
        (statuses(&mut admin, "audit").await.len() == 1).then_some(())
    });
    exec_all(
        &mut holder,
        &faults::hold_lock_sql(backend, "unread_counters", true),
    )
    .await;
    let victim = until!("the audit waiting for the lock", {
        waiting_session(&mut admin, backend, &f.db.name, &mine).await
    });
    kill_session(&mut admin, backend, victim).await;
    let run = wait(child, LIMIT);
    exec_all(
        &mut holder,
        &[faults::release_lock_sql(backend, true).to_string()],
    )
    .await;
    run.expect_code(3);
    // Issue 25, row 14: the stage, the batch and what was kept (nothing).
    eprintln!("{}: {}", backend.name(), run.stderr.trim());
    for said in [
        "audit run #2 stopped in batch ",
        "(conversations ",
        "nothing is kept: no report was written and the run is not recorded as passed",
        "run the audit again",
    ] {
        assert!(run.stderr.contains(said), "says {said:?}: {run:?}");
    }
    assert_eq!(
        faults::files(f.path()),
        ["m.toml"],
        "no report, no temporary file"
    );
    let runs = statuses(&mut admin, "audit").await;
    assert_ne!(runs[0], "done", "{runs:?}");
    eprintln!("{}: killed audit left ledger {runs:?}", backend.name());

    f.run(&["audit", "--quiet", "--report", "drift.csv"])
        .expect_code(1);
    assert_eq!(
        std::fs::read_to_string(f.path().join("drift.csv")).unwrap(),
        want
    );
    done(f, vec![admin, holder]).await;
}

/// The conversation of the checkpoint of the newest backfill run (`lo` of its JSON).
async fn checkpoint_lo(conn: &mut AnyConnection) -> i64 {
    let row = sqlx::query(
        "SELECT checkpoint FROM tidemark_ledger WHERE stage = 'backfill' ORDER BY id DESC LIMIT 1",
    )
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    // MariaDB hands a TEXT column over as bytes.
    let text = tidemark::values::text(&row, 0).unwrap().unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["lo"].as_i64().unwrap_or_else(|| panic!("{json}"))
}

// ---- a statement that hits the lock timeout ----

/// The conversations after this one are held by the second connection.
const HELD_AFTER: i64 = 100;

/// A second connection holds watermark rows of the later conversations (SQLite: the
/// database's write lock): the backfill's lock waits give up after `--lock-timeout`, it retries
/// `--retries` times, then exits 3 naming the lock wait, the batches before kept and nothing of
/// the held ones written; the rerun finishes.
async fn backfill_lock_timeout(backend: Backend) {
    let Some((want, _)) = baseline(backend).await else {
        return;
    };
    let Some(f) = Fixture::generated(backend, "fault_lockwait").await else {
        return;
    };
    let mut admin = f.connect().await;
    let mut holder = f.connect().await;
    // Servers: the application's uncommitted watermarks of the later conversations (their row
    // locks): the batches before them commit, the first batch that reaches them waits.
    // SQLite: the database's write lock.
    let hold = match backend {
        Backend::Sqlite => faults::hold_lock_sql(backend, "read_watermarks", false),
        _ => faults::hold_rows_sql(backend, HELD_AFTER),
    };
    exec_all(&mut holder, &hold).await;
    let mut args = BACKFILL.to_vec();
    args.extend(["--lock-timeout", "1s", "--retries", "2"]);
    let run = f.run(&args);
    exec_all(&mut holder, &["ROLLBACK".to_string()]).await;
    run.expect_code(3);
    names(
        &run,
        "the lock wait",
        &["lock wait", "lock timeout", "database is locked"],
    );
    let kept = scalar(&mut admin, "SELECT COUNT(*) FROM read_watermarks").await;
    let beyond = scalar(
        &mut admin,
        &format!("SELECT COUNT(*) FROM read_watermarks WHERE conversation_id > {HELD_AFTER}"),
    )
    .await;
    assert_eq!(beyond, 0, "nothing of the held conversations written");
    if backend == Backend::Sqlite {
        assert_eq!(kept, 0, "nothing written under the write lock");
    } else {
        assert!(kept > 0, "the batches before the held rows are kept");
    }
    let runs = statuses(&mut admin, "backfill").await;
    eprintln!(
        "{}: lock timeout left ledger {runs:?}: {}",
        backend.name(),
        run.stderr
    );
    assert!(
        runs.iter().all(|s| s != "done" && s != "running"),
        "{runs:?}"
    );

    f.run(&BACKFILL).expect_code(0);
    assert_eq!(watermarks(&mut admin).await, want);
    done(f, vec![admin, holder]).await;
}

// ---- the report's disk full ----

/// `audit --report` onto a full file system (a 64 KiB tmpfs filled up first; without the right
/// to mount one, a file-size limit of one block on the process): exit 3 naming the disk,
/// neither the report nor its temporary file left, the audit recorded as failed; the rerun
/// elsewhere gives the uninterrupted report.
async fn report_disk_full(backend: Backend) {
    let Some((_, want)) = baseline(backend).await else {
        return;
    };
    assert!(want.len() > 1024, "the report outgrows one block");
    let Some(f) = Fixture::generated(backend, "fault_diskfull").await else {
        return;
    };
    f.run(&BACKFILL).expect_code(0);
    let mut admin = f.connect().await;
    let disk = faults::SmallDisk::mount(65536);
    let (run, folder) = match &disk {
        Some(disk) => {
            disk.fill();
            let report = disk.path.join("drift.csv");
            (
                f.run(&["audit", "--quiet", "--report", report.to_str().unwrap()]),
                disk.path.clone(),
            )
        }
        None if backend == Backend::Sqlite => {
            eprintln!("sqlite: no tmpfs (not root): the file-size limit would stop the database file too; skipped");
            done(f, vec![admin]).await;
            return;
        }
        None => {
            eprintln!("{}: no tmpfs (not root): a file-size limit", backend.name());
            std::fs::create_dir(f.path().join("out")).unwrap();
            let cmd = format!(
                "trap '' XFSZ; ulimit -f 1; exec '{}' audit --quiet --report out/drift.csv --database '{}' --mapping m.toml",
                crate::common::bin::PATH,
                f.db.url
            );
            let out = std::process::Command::new("sh")
                .args(["-c", &cmd])
                .current_dir(f.path())
                .env_remove("DATABASE_URL")
                .output()
                .unwrap();
            (out.into(), f.path().join("out"))
        }
    };
    run.expect_code(3);
    names(&run, "the full disk", &["no space left", "file too large"]);
    let left: Vec<String> = faults::files(&folder)
        .into_iter()
        .filter(|n| n != faults::FILLER)
        .collect();
    assert!(left.is_empty(), "nothing left on the full disk: {left:?}");
    assert_eq!(statuses(&mut admin, "audit").await, ["failed"]);
    eprintln!("{}: disk full: {}", backend.name(), run.stderr.trim());
    if let Some(disk) = &disk {
        // The metrics file on the full disk (the report elsewhere): exit 3, no temporary file.
        let metrics = disk.path.join("tidemark.prom");
        let run = f.run(&[
            "audit",
            "--quiet",
            "--report",
            "elsewhere.csv",
            "--metrics-file",
            metrics.to_str().unwrap(),
        ]);
        run.expect_code(3);
        names(&run, "the full disk", &["no space left"]);
        assert_eq!(faults::files(&disk.path), [faults::FILLER], "{run:?}");
        eprintln!(
            "{}: metrics on a full disk: {} (ledger {:?})",
            backend.name(),
            run.stderr.trim(),
            statuses(&mut admin, "audit").await
        );
    }
    drop(disk);

    f.run(&["audit", "--quiet", "--report", "drift.csv"])
        .expect_code(1);
    assert_eq!(
        std::fs::read_to_string(f.path().join("drift.csv")).unwrap(),
        want
    );
    done(f, vec![admin]).await;
}

// ---- SIGTERM and SIGINT ----

/// `signal` during a backfill (after a first batch): it finishes the batch, records the
/// checkpoint, exits 4 saying so; the rerun continues and reaches the uninterrupted
/// watermarks.
async fn backfill_stopped_by(backend: Backend, signal: &str) {
    let Some((want, _)) = baseline(backend).await else {
        return;
    };
    let Some(f) = Fixture::generated(backend, &format!("fault_bf_{signal}")).await else {
        return;
    };
    let mut admin = f.connect().await;
    let mut args = BACKFILL.to_vec();
    args.extend(["--pause-between-batches", "200ms"]);
    let child = f.spawn(&args, &[]);
    until!("a first batch", {
        (scalar(&mut admin, "SELECT COUNT(*) FROM read_watermarks").await > 0).then_some(())
    });
    faults::signal(&child, signal);
    let run = wait(child, LIMIT);
    run.expect_code(4);
    names(&run, "the signal", &["finishing the current batch"]);
    let runs = statuses(&mut admin, "backfill").await;
    assert_eq!(runs, ["interrupted"], "{run:?}");
    let part = watermarks(&mut admin).await;
    assert!(!part.is_empty() && part.len() < want.len(), "stopped early");

    f.run(&BACKFILL).expect_code(0);
    assert_eq!(watermarks(&mut admin).await, want);
    done(f, vec![admin]).await;
}

async fn backfill_sigterm(backend: Backend) {
    backfill_stopped_by(backend, "TERM").await;
}

async fn backfill_sigint(backend: Backend) {
    backfill_stopped_by(backend, "INT").await;
}

/// `signal` during an audit: it finishes the batch, keeps the rows so far in
/// `REPORT.partial` (never under the final name), records the run as incomplete and exits 4;
/// `--resume` finishes it with the uninterrupted report.
async fn audit_stopped_by(backend: Backend, signal: &str) {
    let Some((_, want)) = baseline(backend).await else {
        return;
    };
    let Some(f) = Fixture::generated(backend, &format!("fault_au_{signal}")).await else {
        return;
    };
    f.run(&BACKFILL).expect_code(0);
    let mut admin = f.connect().await;
    let args = [
        "audit",
        "--quiet",
        "--report",
        "drift.csv",
        "--batch-size",
        "5",
        "--lock-timeout",
        "60s",
    ];
    let child = f.spawn(&args, &[]);
    until!("the audit's ledger row", {
        (statuses(&mut admin, "audit").await.len() == 1).then_some(())
    });
    let mut holder = f.connect().await;
    if backend == Backend::Sqlite {
        // Readers are not blocked on SQLite: 1 500 members in batches of 5 take long enough.
        tokio::time::sleep(Duration::from_millis(300)).await;
        faults::signal(&child, signal);
    } else {
        // The signal arrives while a batch statement waits for a lock; the batch then finishes.
        let mine = vec![
            session_id(&mut admin, backend).await,
            session_id(&mut holder, backend).await,
        ];
        exec_all(
            &mut holder,
            &faults::hold_lock_sql(backend, "unread_counters", true),
        )
        .await;
        until!("the audit waiting for the lock", {
            waiting_session(&mut admin, backend, &f.db.name, &mine).await
        });
        faults::signal(&child, signal);
        tokio::time::sleep(Duration::from_millis(200)).await;
        exec_all(
            &mut holder,
            &[faults::release_lock_sql(backend, true).to_string()],
        )
        .await;
    }
    let run = wait(child, LIMIT);
    names(&run, "the signal", &["finishing the current batch"]);
    assert_eq!(
        faults::files(f.path()),
        ["drift.csv.partial", "m.toml"],
        "{run:?}"
    );
    // Exit 4, or 1 when what it covered already drifts above tolerance (the book: docs/src/introduction.md, "Exit codes").
    let part = std::fs::read_to_string(f.path().join("drift.csv.partial")).unwrap();
    run.expect_code(if part.lines().count() > 1 { 1 } else { 4 });
    assert!(
        run.stdout
            .contains("INCOMPLETE: stopped by a signal (Ctrl-C or SIGTERM) after conversation"),
        "the summary says a signal stopped it, not --run-time: {run:?}"
    );
    assert!(
        part.len() < want.len() && want.starts_with(&part),
        "the partial report is the head of the whole one"
    );
    assert_eq!(statuses(&mut admin, "audit").await, ["incomplete"]);

    let mut resume = args.to_vec();
    resume.push("--resume");
    f.run(&resume).expect_code(1);
    assert_eq!(faults::files(f.path()), ["drift.csv", "m.toml"]);
    assert_eq!(
        std::fs::read_to_string(f.path().join("drift.csv")).unwrap(),
        want
    );
    assert_eq!(statuses(&mut admin, "audit").await, ["done"]);
    done(f, vec![admin, holder]).await;
}

async fn audit_sigterm(backend: Backend) {
    audit_stopped_by(backend, "TERM").await;
}

async fn audit_sigint(backend: Backend) {
    audit_stopped_by(backend, "INT").await;
}

// ---- kill -9 during contract --execute ----

/// A generated fleet, expanded and backfilled: its counters drift, so every contract here is
/// forced past the closed gate (`--force --reason`), which runs the same steps.
async fn contract_fixture(backend: Backend, label: &str) -> Option<(Fixture, Vec<String>)> {
    let f = Fixture::generated(backend, label).await?;
    f.run(&BACKFILL).expect_code(0);
    let mut conn = f.connect().await;
    let values = counters(&mut conn).await;
    assert!(values.len() > 100, "many counter rows: {}", values.len());
    let _ = conn.close().await;
    Some((f, values))
}

/// The contract arguments of every run here (several archive batches).
const CONTRACT: [&str; 8] = [
    "contract",
    "--execute",
    "--quiet",
    "--force",
    "--reason",
    "fault test",
    "--batch-size",
    "200",
];

/// kill -9 at each step of `contract --execute` in turn (in the archive after its first
/// batch, before the checksum, before the DDL), each a new run on the same database: after
/// each kill the column is there with every value; the last rerun drops it, with an archive
/// equal to the values.
async fn contract_kill9_at_each_step(backend: Backend) {
    let Some((f, values)) = contract_fixture(backend, "fault_contract9").await else {
        return;
    };
    let mut conn = f.connect().await;
    let signal_file = f.path().join("paused");
    for step in ["archive", "checksum", "ddl"] {
        let child = f.spawn(
            &CONTRACT,
            &[
                ("TIDEMARK_TEST_PAUSE_AT", step),
                ("TIDEMARK_TEST_PAUSE_FILE", signal_file.to_str().unwrap()),
            ],
        );
        until!(&format!("the contract at {step}"), {
            signal_file.exists().then_some(())
        });
        faults::signal(&child, "KILL");
        let run = wait(child, LIMIT);
        assert_eq!(run.code, None, "killed: {run:?}");
        std::fs::remove_file(&signal_file).unwrap();
        assert!(
            counter_column_exists(&mut conn, backend).await,
            "{step}: the column is there"
        );
        assert_eq!(counters(&mut conn).await, values, "{step}: every value");
        let contracts = faults::ledger(&mut conn).await;
        let (id, _, status) = contracts
            .iter()
            .rev()
            .find(|(_, s, _)| s == "contract")
            .unwrap()
            .clone();
        let rows = archived(&mut conn, id).await;
        match step {
            "archive" => assert!(
                !rows.is_empty() && rows.len() < values.len(),
                "archive: part archived ({} of {})",
                rows.len(),
                values.len()
            ),
            _ => assert_eq!(rows, values, "{step}: archived whole"),
        }
        eprintln!(
            "{}: kill -9 at {step}: contract run #{id} left {status:?}, {} archived rows",
            backend.name(),
            rows.len()
        );
        // The killed run stays `running` (nothing could record its end); each earlier killed
        // run was marked `abandoned` by the next run once it held the runner lock.
        let runs = statuses(&mut conn, "contract").await;
        let mut want = vec!["abandoned"; runs.len() - 1];
        want.push("running");
        assert_eq!(runs, want, "{step}: the contract runs in the ledger");
    }
    let run = f.run(&CONTRACT);
    run.expect_code(0);
    assert!(!counter_column_exists(&mut conn, backend).await);
    let contracts = faults::ledger(&mut conn).await;
    let (id, _, status) = contracts
        .iter()
        .rev()
        .find(|(_, s, _)| s == "contract")
        .unwrap()
        .clone();
    assert_eq!(status, "done");
    // The three killed runs are `abandoned`.
    assert_eq!(
        statuses(&mut conn, "contract").await,
        ["abandoned", "abandoned", "abandoned", "done"]
    );
    assert_eq!(archived(&mut conn, id).await, values);
    let again = f.run(&["contract"]);
    again.expect_code(0);
    assert!(again.stdout.contains("nothing left to drop"), "{again:?}");
    done(f, vec![conn]).await;
}

/// kill -9 right after the DDL committed, before the ledger recorded it (issue 25 row 8): the
/// column is gone, the run's verified archive holds every value and its ledger row says
/// `running`. `status` and a dry run name the run that dropped it and say that its end is not
/// recorded; `contract --execute` checks the archive against what the run recorded before
/// its DDL, records the drop in that run's row (done, with the archive and the DDL) and says
/// so; then `status` reads the drop from the ledger and a last run has nothing left to do.
async fn contract_kill9_after_the_drop(backend: Backend) {
    let Some((f, values)) = contract_fixture(backend, "fault_contract_dropped").await else {
        return;
    };
    let mut conn = f.connect().await;
    let signal_file = f.path().join("paused");
    let child = f.spawn(
        &CONTRACT,
        &[
            ("TIDEMARK_TEST_PAUSE_AT", "dropped"),
            ("TIDEMARK_TEST_PAUSE_FILE", signal_file.to_str().unwrap()),
        ],
    );
    until!("the contract after its DDL", {
        signal_file.exists().then_some(())
    });
    faults::signal(&child, "KILL");
    let run = wait(child, LIMIT);
    assert_eq!(run.code, None, "killed: {run:?}");
    std::fs::remove_file(&signal_file).unwrap();
    assert!(!counter_column_exists(&mut conn, backend).await, "dropped");
    let (id, _, _) = faults::ledger(&mut conn)
        .await
        .into_iter()
        .rev()
        .find(|(_, s, _)| s == "contract")
        .unwrap();
    assert_eq!(archived(&mut conn, id).await, values, "the archive");
    assert_eq!(statuses(&mut conn, "contract").await, ["running"]);

    let status = f.run(&["status"]);
    status.expect_code(0);
    assert!(
        status.stdout.contains(&format!(
            "contract:  done: the counter was dropped by run #{id}, whose process ended before the ledger recorded it (its archive verifies): `tidemark contract --execute` records it"
        )),
        "{status:?}"
    );
    assert!(!status.stdout.contains("gate would open"), "{status:?}");
    let dry = f.run(&["contract"]);
    dry.expect_code(0);
    assert!(
        dry.stdout.contains(&format!(
            "nothing left to drop: column unread_counters.unread_count is gone (dropped by contract run #{id}, whose end the ledger does not record: its archive verifies; --execute records it)"
        )),
        "{dry:?}"
    );
    assert_eq!(
        statuses(&mut conn, "contract").await,
        ["running"],
        "a dry run writes nothing"
    );

    let rerun = f.run(&CONTRACT[..2]);
    rerun.expect_code(0);
    assert!(
        rerun.stdout.contains(&format!(
            "recorded: contract run #{id} dropped column unread_counters.unread_count; its process ended before the ledger recorded it, and its archive verifies ({} rows, as recorded before the DDL)",
            values.len()
        )),
        "{rerun:?}"
    );
    assert_eq!(
        statuses(&mut conn, "contract").await,
        ["done"],
        "no other run"
    );
    let row = sqlx::query(&format!(
        "SELECT summary FROM tidemark_ledger WHERE id = {id}"
    ))
    .fetch_one(&mut conn)
    .await
    .unwrap();
    let summary: serde_json::Value =
        serde_json::from_str(&tidemark::values::text(&row, "summary").unwrap().unwrap()).unwrap();
    assert_eq!(summary["executed"], true, "{summary}");
    assert_eq!(
        summary["archive"]["checksum"]["rows"],
        values.len(),
        "{summary}"
    );
    assert!(
        summary["ddl"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l.as_str().unwrap().contains("DROP COLUMN")),
        "{summary}"
    );
    let status = f.run(&["status"]);
    assert!(
        status.stdout.contains(&format!(
            "contract:  done: the counter was dropped by run #{id}\n"
        )),
        "{status:?}"
    );
    let again = f.run(&CONTRACT[..2]);
    again.expect_code(0);
    assert!(
        again.stdout.contains(&format!(
            "nothing left to drop: column unread_counters.unread_count is gone (dropped by contract run #{id})"
        )),
        "{again:?}"
    );
    assert_eq!(statuses(&mut conn, "contract").await, ["done"]);
    done(f, vec![conn]).await;
}

/// The contract's server session is ended while it waits after its first archive batch (the
/// `archive` pause): the next batch meets the lost connection; exit 3, and the message names
/// the step, the batch and what was kept (issue 25, row 14): the counter intact, nothing
/// dropped, the rows archived so far under the run; a rerun drops it with the whole archive.
async fn contract_server_lost_mid_archive(backend: Backend) {
    let Some((f, values)) = contract_fixture(backend, "fault_contract_lost").await else {
        return;
    };
    let mut admin = f.connect().await;
    let mine = vec![session_id(&mut admin, backend).await];
    let signal_file = f.path().join("paused");
    let child = f.spawn(
        &CONTRACT,
        &[
            ("TIDEMARK_TEST_PAUSE_AT", "archive"),
            ("TIDEMARK_TEST_PAUSE_FILE", signal_file.to_str().unwrap()),
        ],
    );
    until!("the contract at the archive", {
        signal_file.exists().then_some(())
    });
    let victim = tidemark_session(&mut admin, backend, &f.db.name, &mine).await;
    kill_session(&mut admin, backend, victim).await;
    std::fs::remove_file(&signal_file).unwrap();
    let run = wait(child, LIMIT);
    run.expect_code(3);
    for said in [
        "archiving column unread_counters.unread_count stopped in batch 2 (conversations after ",
        "column unread_counters.unread_count is intact and nothing was dropped",
        "the 1 batch(es) archived so far stay in tidemark_counter_archive under contract run #",
        "run the same command again",
    ] {
        assert!(run.stderr.contains(said), "says {said:?}: {run:?}");
    }
    eprintln!("{}: {}", backend.name(), run.stderr.trim());
    assert!(counter_column_exists(&mut admin, backend).await);
    assert_eq!(counters(&mut admin).await, values);
    f.run(&CONTRACT).expect_code(0);
    assert!(!counter_column_exists(&mut admin, backend).await);
    done(f, vec![admin]).await;
}

/// The contract's server session is ended while its DDL waits for a lock a second connection
/// holds: exit 3; the message names the drop, says that the lost connection leaves unknown
/// whether the server applied it, and that the verified archive stays (issue 25, row 14);
/// a rerun finishes.
async fn contract_server_lost_while_ddl_waits(backend: Backend) {
    let Some((f, values)) = contract_fixture(backend, "fault_contract_ddl_lost").await else {
        return;
    };
    let mut admin = f.connect().await;
    let mut holder = f.connect().await;
    let mine = vec![
        session_id(&mut admin, backend).await,
        session_id(&mut holder, backend).await,
    ];
    let reader = match backend {
        Backend::Postgres => "BEGIN",
        _ => "START TRANSACTION",
    };
    exec_all(
        &mut holder,
        &[
            reader.to_string(),
            "SELECT COUNT(*) FROM unread_counters".to_string(),
        ],
    )
    .await;
    let mut args = CONTRACT.to_vec();
    args.extend(["--lock-timeout", "60s"]);
    let child = f.spawn(&args, &[]);
    let victim = until!("the DDL waiting for the lock", {
        if statuses(&mut admin, "contract").await.is_empty() {
            None
        } else {
            waiting_session(&mut admin, backend, &f.db.name, &mine).await
        }
    });
    kill_session(&mut admin, backend, victim).await;
    let run = wait(child, LIMIT);
    exec_all(&mut holder, &["ROLLBACK".to_string()]).await;
    run.expect_code(3);
    for said in [
        "dropping column unread_counters.unread_count",
        "the connection to the database was lost while it ran",
        "the verified archive of contract run #",
        "run the same command again",
    ] {
        assert!(run.stderr.contains(said), "says {said:?}: {run:?}");
    }
    eprintln!("{}: {}", backend.name(), run.stderr.trim());
    let id = faults::ledger(&mut admin)
        .await
        .iter()
        .rev()
        .find(|(_, s, _)| s == "contract")
        .unwrap()
        .0;
    assert_eq!(
        archived(&mut admin, id).await,
        values,
        "the verified archive"
    );
    f.run(&CONTRACT).expect_code(0);
    assert!(!counter_column_exists(&mut admin, backend).await);
    done(f, vec![admin, holder]).await;
}

/// tidemark's server session on database `db` (not one of `mine`), found by its
/// `application_name` on PostgreSQL (`tidemark <lease time> …`), as the one other connection on MariaDB/MySQL.
async fn tidemark_session(
    admin: &mut AnyConnection,
    backend: Backend,
    db: &str,
    mine: &[i64],
) -> i64 {
    let not_mine = mine
        .iter()
        .map(|m| m.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let sql = match backend {
        Backend::Postgres => format!(
            "SELECT CAST(pid AS BIGINT) FROM pg_stat_activity WHERE datname = '{db}' \
             AND pid NOT IN ({not_mine}) AND application_name LIKE 'tidemark%' LIMIT 1"
        ),
        _ => format!(
            "SELECT CAST(ID AS SIGNED) FROM information_schema.PROCESSLIST \
             WHERE DB = '{db}' AND ID NOT IN ({not_mine}) LIMIT 1"
        ),
    };
    sqlx::query_scalar(&sql)
        .fetch_one(&mut *admin)
        .await
        .unwrap()
}

/// kill -9 while the DDL waits for a lock a second connection holds on the counter table
/// (an open transaction that read it): the archive is verified before the DDL starts, so
/// whether the server then drops the column or not, the values are kept; a rerun finishes.
async fn contract_kill9_while_ddl_waits(backend: Backend) {
    let Some((f, values)) = contract_fixture(backend, "fault_contract_ddl").await else {
        return;
    };
    let mut admin = f.connect().await;
    let mut holder = f.connect().await;
    let mine = vec![
        session_id(&mut admin, backend).await,
        session_id(&mut holder, backend).await,
    ];
    let reader = match backend {
        Backend::Postgres => vec![
            "BEGIN".to_string(),
            "SELECT COUNT(*) FROM unread_counters".to_string(),
        ],
        _ => vec![
            "START TRANSACTION".to_string(),
            "SELECT COUNT(*) FROM unread_counters".to_string(),
        ],
    };
    exec_all(&mut holder, &reader).await;
    let mut args = CONTRACT.to_vec();
    args.extend(["--lock-timeout", "60s"]);
    let child = f.spawn(&args, &[]);
    // The contract's run in the ledger (the archive follows it) and a session waiting: the DDL.
    until!("the DDL waiting for the lock", {
        if statuses(&mut admin, "contract").await.is_empty() {
            None
        } else {
            waiting_session(&mut admin, backend, &f.db.name, &mine).await
        }
    });
    faults::signal(&child, "KILL");
    let run = wait(child, LIMIT);
    assert_eq!(run.code, None, "killed: {run:?}");
    exec_all(&mut holder, &["ROLLBACK".to_string()]).await;
    let id = faults::ledger(&mut admin)
        .await
        .iter()
        .rev()
        .find(|(_, s, _)| s == "contract")
        .unwrap()
        .0;
    // The server may still run the DDL once the lock is free: wait until it settles.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let column = counter_column_exists(&mut admin, backend).await;
    if column {
        assert_eq!(counters(&mut admin).await, values);
    }
    assert_eq!(
        archived(&mut admin, id).await,
        values,
        "the verified archive"
    );
    eprintln!(
        "{}: kill -9 while the DDL waited: column {}",
        backend.name(),
        if column { "kept" } else { "dropped" }
    );
    let rerun = f.run(&CONTRACT);
    rerun.expect_code(0);
    assert!(!counter_column_exists(&mut admin, backend).await);
    done(f, vec![admin, holder]).await;
}
