//! SIGTERM and SIGINT during the backfill and the audit: a clean stop at a batch boundary and the documented exit code.

use super::*;

on_every_backend!(multi_thread: backfill_sigterm, backfill_sigint, audit_sigterm, audit_sigint);

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
    // Exit 4, or 1 when what it covered already drifts above tolerance (README "Exit codes").
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
