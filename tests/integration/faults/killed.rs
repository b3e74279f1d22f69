//! The backfill and the audit killed mid-run (the server's backend, `kill -9` before a checkpoint), a lock timeout and a full disk: what they leave and how the next run resumes.

use super::*;

on_every_backend!(servers: backend_killed_mid_backfill, backfill_kill9_before_a_checkpoint, backend_killed_mid_audit);

on_every_backend!(multi_thread: backfill_lock_timeout, report_disk_full);

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
