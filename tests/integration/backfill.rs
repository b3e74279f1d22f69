//! Backfill on a live database (issue "Backfill that a DBA can run on a live database"): a
//! SIGKILL in the middle of a multi-batch run and a resume give the same watermarks as one
//! uninterrupted run; concurrent application writes are never moved back nor overtaken; a lock
//! held by another connection ends in exit 3 with the checkpoint kept; a second runner is
//! refused. On every backend.

use crate::common::{bin, on_every_backend, Backend, TestDb};
use crate::scenario;
use sqlx::{AnyConnection, Executor, Row};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tidemark::db::Dsn;
use tidemark::mapping::Mapping;
use tidemark::stages::{backfill, expand};

on_every_backend!(kill_and_resume, concurrent_application, lock_held);
on_every_backend!(servers: one_runner);

/// Copies of the per-member scenarios loaded side by side: 14 scenarios × `copies`
/// conversations, about 30 members each copy.
async fn load_fleet(conn: &mut AnyConnection, copies: i64) -> Mapping {
    crate::common::exec_all(conn, &scenario::schema_sql()).await;
    let scenarios: Vec<_> = scenario::load_all()
        .unwrap()
        .into_iter()
        .filter(|s| !s.is_per_message() && s.options.cap.is_none())
        .collect();
    for copy in 0..copies {
        for (j, s) in scenarios.iter().enumerate() {
            let offset = (copy * 20 + j as i64 + 1) * 100;
            crate::common::exec_all(conn, &scenario::data_sql(s, offset)).await;
        }
    }
    Mapping::parse(&scenario::mapping_toml("per_member", false), "fleet").unwrap()
}

async fn prepare(db: &TestDb, copies: i64) -> (AnyConnection, Mapping, Dsn) {
    let dsn = Dsn::parse(&db.url).unwrap();
    let mut conn = db.connect().await;
    let mapping = load_fleet(&mut conn, copies).await;
    expand::run(&mut conn, &mapping, dsn.dialect, false)
        .await
        .unwrap();
    (conn, mapping, dsn)
}

/// The watermark table as sorted (user, conversation, last_read_id, source) rows.
async fn watermarks(conn: &mut AnyConnection) -> Vec<(String, i64, i64, String)> {
    let rows = sqlx::query(
        "SELECT user_id, conversation_id, last_read_id, source FROM read_watermarks ORDER BY conversation_id, user_id",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    rows.iter()
        .map(|r| {
            (
                tidemark::values::text(r, 0).unwrap().unwrap(),
                r.try_get(1).unwrap(),
                r.try_get(2).unwrap(),
                tidemark::values::text(r, 3).unwrap().unwrap_or_default(),
            )
        })
        .collect()
}

/// The newest backfill ledger row: (status, batches in its checkpoint, resumed_after_batches).
async fn last_backfill(conn: &mut AnyConnection) -> Option<(String, u64, Option<u64>)> {
    let row = sqlx::query("SELECT status, checkpoint FROM tidemark_ledger WHERE stage = 'backfill' ORDER BY id DESC LIMIT 1")
        .fetch_optional(&mut *conn)
        .await
        .ok()??;
    let status = tidemark::values::text(&row, 0).unwrap().unwrap();
    let cp: serde_json::Value = tidemark::values::text(&row, 1)
        .unwrap()
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap_or_default();
    Some((
        status,
        cp["summary"]["batches"].as_u64().unwrap_or(0),
        cp["summary"]["resumed_after_batches"].as_u64(),
    ))
}

fn tidemark_cmd(db: &TestDb, mapping_path: &std::path::Path) -> Command {
    let mut cmd = bin::command();
    cmd.env_remove("DATABASE_URL")
        .arg("backfill")
        .arg("--database")
        .arg(&db.url)
        .arg("--mapping")
        .arg(mapping_path)
        .arg("--quiet");
    cmd
}

async fn kill_and_resume(backend: Backend) {
    let Some(killed) = TestDb::create(backend, "bf_kill").await else {
        return;
    };
    let Some(straight) = TestDb::create(backend, "bf_straight").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mapping_path = dir.path().join("tidemark.toml");
    std::fs::write(&mapping_path, scenario::mapping_toml("per_member", false)).unwrap();

    let (mut c1, mapping, dsn) = prepare(&killed, 6).await;
    let (mut c2, _, _) = prepare(&straight, 6).await;

    // The uninterrupted run.
    let opts = backfill::BackfillOptions {
        batch_size: 3,
        chunk_time: Duration::ZERO,
        ..Default::default()
    };
    let full = backfill::run(&mut c2, &mapping, dsn.dialect, &opts)
        .await
        .unwrap();
    assert!(
        full.batches > 20,
        "a multi-batch run: {} batches",
        full.batches
    );

    // The same run as a process, killed with SIGKILL after a few batches.
    let mut child = tidemark_cmd(&killed, &mapping_path)
        .args([
            "--batch-size",
            "3",
            "--chunk-time",
            "0s",
            "--pause-between-batches",
            "100ms",
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let done_before_kill = loop {
        if let Some((_, batches, _)) = last_backfill(&mut c1).await {
            if batches >= 4 {
                break batches;
            }
        }
        assert!(Instant::now() < deadline, "the backfill made no progress");
        assert!(
            child.try_wait().unwrap().is_none(),
            "the backfill ended before it was killed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let (status, at_kill, _) = last_backfill(&mut c1).await.unwrap();
    assert_eq!(status, "running", "a killed run is left unfinished");
    assert!(
        at_kill >= done_before_kill && at_kill < full.batches,
        "killed mid-way: {at_kill} of {}",
        full.batches
    );

    // status tells a killed run from a running one: its runner lock is free.
    let st = bin::command()
        .args(["status", "--database", &killed.url, "--mapping"])
        .arg(&mapping_path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&st.stdout);
    assert!(text.contains("stopped unfinished"), "{text}");

    // Resume: the same command continues after the last finished batch.
    let out = tidemark_cmd(&killed, &mapping_path)
        .args(["--batch-size", "3", "--chunk-time", "0s"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (status, batches, resumed) = last_backfill(&mut c1).await.unwrap();
    assert_eq!(status, "done");
    assert_eq!(
        resumed,
        Some(at_kill),
        "resumed after the batches the killed run finished"
    );
    assert_eq!(
        batches, full.batches,
        "together the two parts ran every batch once"
    );
    eprintln!(
        "{}: killed after {at_kill} of {} batches, resumed the rest",
        backend.name(),
        full.batches
    );

    assert_eq!(
        watermarks(&mut c1).await,
        watermarks(&mut c2).await,
        "identical watermark tables"
    );
    // What the model change loses: the members whose unread number changes are the rows the
    // audit finds drifting, whether the backfill ran in one go or in two parts.
    let audited = tidemark::stages::audit::run(
        &mut c2,
        &mapping,
        dsn.dialect,
        &tidemark::stages::audit::AuditOptions {
            report: dir.path().join("a.csv"),
            ledger: false,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(full.unread_changes > 0);
    assert_eq!(full.unread_changes, audited.summary.drifting_rows);
    let row = sqlx::query(
        "SELECT summary FROM tidemark_ledger WHERE stage = 'backfill' ORDER BY id DESC LIMIT 1",
    )
    .fetch_one(&mut c1)
    .await
    .unwrap();
    let resumed: serde_json::Value =
        serde_json::from_str(&tidemark::values::text(&row, 0).unwrap().unwrap()).unwrap();
    assert_eq!(
        resumed["unread_changes"].as_u64(),
        Some(full.unread_changes)
    );
    drop((c1, c2));
    killed.cleanup().await;
    straight.cleanup().await;
}

/// The application's own upsert, as interface.md describes it.
fn app_upsert(backend: Backend) -> &'static str {
    match backend {
        Backend::Postgres => {
            "INSERT INTO read_watermarks (user_id, conversation_id, last_read_id) VALUES ($1, $2, $3) \
             ON CONFLICT (user_id, conversation_id) DO UPDATE SET last_read_id = GREATEST(read_watermarks.last_read_id, EXCLUDED.last_read_id)"
        }
        Backend::Mysql => {
            "INSERT INTO read_watermarks (user_id, conversation_id, last_read_id) VALUES (?, ?, ?) \
             ON DUPLICATE KEY UPDATE last_read_id = GREATEST(last_read_id, VALUES(last_read_id))"
        }
        Backend::Sqlite => {
            "INSERT INTO read_watermarks (user_id, conversation_id, last_read_id) VALUES (?, ?, ?) \
             ON CONFLICT (user_id, conversation_id) DO UPDATE SET last_read_id = MAX(last_read_id, excluded.last_read_id)"
        }
    }
}

async fn concurrent_application(backend: Backend) {
    let Some(db) = TestDb::create(backend, "bf_live").await else {
        return;
    };
    let (mut conn, mapping, dsn) = prepare(&db, 4).await;
    let mut app = db.connect().await;
    let members: Vec<(i64, String)> = sqlx::query(
        "SELECT conv_id, user_id FROM members WHERE active = 1 ORDER BY conv_id, user_id",
    )
    .fetch_all(&mut app)
    .await
    .unwrap()
    .iter()
    .map(|r| {
        (
            r.try_get(0).unwrap(),
            tidemark::values::text(r, 1).unwrap().unwrap(),
        )
    })
    .collect();

    let stop = Arc::new(AtomicBool::new(false));
    let writer_stop = stop.clone();
    let upsert = app_upsert(backend);
    let begin = match backend {
        Backend::Sqlite => "BEGIN IMMEDIATE",
        _ => "BEGIN",
    };
    // The application: new messages in every conversation (ids from 100 000 on), and a read by
    // every second member up to the message it just sent.
    let writer = tokio::spawn(async move {
        let mut advanced = Vec::new();
        let mut inserted = Vec::new();
        let mut next_id = 100_000i64;
        while !writer_stop.load(Ordering::SeqCst) {
            for i in (0..members.len()).step_by(7) {
                let (conv, user) = (&members[i].0, members[i].1.clone());
                next_id += 1;
                // Dual writes, each event in one transaction: the message and the counters
                // of the other members; a read moves the watermark and clears the counter.
                app.execute(begin).await.unwrap();
                app.execute(format!(
                    "INSERT INTO messages (conv_id, id, sender_id) VALUES ({conv}, {next_id}, 'zed')"
                ).as_str())
                .await
                .unwrap();
                app.execute(format!(
                    "UPDATE unread_counters SET unread_count = unread_count + 1 WHERE conv_id = {conv} AND user_id <> 'zed'"
                ).as_str())
                .await
                .unwrap();
                if i % 2 == 0 {
                    sqlx::query(upsert)
                        .bind(user.clone())
                        .bind(*conv)
                        .bind(next_id)
                        .execute(&mut app)
                        .await
                        .unwrap();
                    app.execute(format!(
                        "UPDATE unread_counters SET unread_count = 0 WHERE conv_id = {conv} AND user_id = '{user}'"
                    ).as_str())
                    .await
                    .unwrap();
                    advanced.push((user.clone(), *conv, next_id));
                }
                app.execute("COMMIT").await.unwrap();
                inserted.push((*conv, next_id));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        (advanced, inserted)
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let opts = backfill::BackfillOptions {
        batch_size: 4,
        chunk_time: Duration::ZERO,
        pause_between_batches: Duration::from_millis(10),
        ..Default::default()
    };
    let summary = backfill::run(&mut conn, &mapping, dsn.dialect, &opts)
        .await
        .unwrap();
    stop.store(true, Ordering::SeqCst);
    let (advanced, inserted) = writer.await.unwrap();
    assert!(
        summary.batches > 10 && !advanced.is_empty(),
        "{} batches, {} app reads",
        summary.batches,
        advanced.len()
    );

    let wm = watermarks(&mut conn).await;
    let get = |user: &str, conv: i64| wm.iter().find(|w| w.0 == user && w.1 == conv).map(|w| w.2);
    // No watermark is lower than what the application wrote.
    for (user, conv, id) in &advanced {
        let v = get(user, *conv).expect("the application's row is there");
        assert!(
            v >= *id,
            "{user}@{conv}: watermark {v} moved below the application's {id}"
        );
    }
    // No message inserted during the run is marked read unless the application read it.
    let app_max = |user: &str, conv: i64| {
        advanced
            .iter()
            .filter(|a| a.0 == user && a.1 == conv)
            .map(|a| a.2)
            .max()
    };
    for (user, conv, v, _) in &wm {
        let newest_inserted = inserted
            .iter()
            .filter(|m| m.0 == *conv)
            .map(|m| m.1)
            .filter(|id| *id <= *v)
            .max();
        if let Some(id) = newest_inserted {
            assert!(
                app_max(user, *conv).is_some_and(|a| a >= id),
                "{user}@{conv}: watermark {v} covers message {id} that arrived during the backfill and was never read"
            );
        }
    }
    drop(conn);
    db.cleanup().await;
}

/// Another connection holds the watermark table: the backfill retries, then fails with exit 3;
/// the checkpoint of the batches finished before stays, and a later run resumes from it.
async fn lock_held(backend: Backend) {
    let Some(db) = TestDb::create(backend, "bf_lock").await else {
        return;
    };
    let (mut conn, mapping, dsn) = prepare(&db, 2).await;
    let stop = Arc::new(AtomicBool::new(false));

    // Part 1: stopped (as by Ctrl-C) after some batches.
    let mut watcher = db.connect().await;
    let flag = stop.clone();
    let watch = tokio::spawn(async move {
        loop {
            if let Some((_, batches, _)) = last_backfill(&mut watcher).await {
                if batches >= 3 {
                    flag.store(true, Ordering::SeqCst);
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    let opts = backfill::BackfillOptions {
        batch_size: 2,
        chunk_time: Duration::ZERO,
        pause_between_batches: Duration::from_millis(30),
        lock_timeout: Duration::from_millis(300),
        retries: 2,
        stop: Some(stop.clone()),
        ..Default::default()
    };
    let first = backfill::run(&mut conn, &mapping, dsn.dialect, &opts)
        .await
        .unwrap();
    watch.await.unwrap();
    assert!(first.interrupted);
    let (status, at_stop, _) = last_backfill(&mut conn).await.unwrap();
    assert_eq!(status, "interrupted");

    // Part 2: another connection holds the table.
    let mut holder = db.connect().await;
    let hold: &[&str] = match backend {
        Backend::Postgres => &[
            "BEGIN",
            "LOCK TABLE read_watermarks IN ACCESS EXCLUSIVE MODE",
        ],
        Backend::Mysql => &["LOCK TABLES read_watermarks WRITE"],
        Backend::Sqlite => &["BEGIN IMMEDIATE"],
    };
    for s in hold {
        sqlx::raw_sql(s).execute(&mut holder).await.unwrap();
    }
    stop.store(false, Ordering::SeqCst);
    let err = backfill::run(&mut conn, &mapping, dsn.dialect, &opts)
        .await
        .unwrap_err();
    assert_eq!(tidemark::cli::Outcome::code_of(&err), 3, "{err:#}");
    assert!(tidemark::lock::is_lock_wait(&err), "a lock wait: {err:#}");
    let release = match backend {
        Backend::Mysql => "UNLOCK TABLES",
        _ => "ROLLBACK",
    };
    sqlx::raw_sql(release).execute(&mut holder).await.unwrap();
    let (status, batches, _) = last_backfill(&mut conn).await.unwrap();
    // "failed" when a batch gave up; "interrupted" when the run could not even take its lock row.
    assert!(
        matches!(status.as_str(), "failed" | "interrupted"),
        "{status}"
    );
    assert_eq!(batches, at_stop, "the checkpoint is intact");

    // Part 3: the next run resumes from that checkpoint and finishes.
    let done = backfill::run(
        &mut conn,
        &mapping,
        dsn.dialect,
        &backfill::BackfillOptions { stop: None, ..opts },
    )
    .await
    .unwrap();
    assert_eq!(done.resumed_after_batches, Some(at_stop));
    assert!(!done.interrupted);
    drop((conn, holder));
    db.cleanup().await;
}

/// A second backfill on the same mapping fails at once with exit 3 and names the first.
async fn one_runner(backend: Backend) {
    let Some(db) = TestDb::create(backend, "bf_one").await else {
        return;
    };
    let (mut conn, mapping, dsn) = prepare(&db, 1).await;
    let lock_name = format!("tidemark:backfill:{}", &mapping.fingerprint[..16]);
    let held = tidemark::lock::RunnerLock::acquire(&mut conn, dsn.dialect, &lock_name)
        .await
        .unwrap();
    let mut second = db.connect().await;
    let started = Instant::now();
    let err = backfill::run(
        &mut second,
        &mapping,
        dsn.dialect,
        &backfill::BackfillOptions::default(),
    )
    .await
    .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused at once"
    );
    assert_eq!(tidemark::cli::Outcome::code_of(&err), 3);
    let msg = format!("{err:#}");
    assert!(
        msg.contains("already running") && msg.contains("held by") || msg.contains("process"),
        "{msg}"
    );
    held.release(&mut conn).await.unwrap();
    backfill::run(
        &mut second,
        &mapping,
        dsn.dialect,
        &backfill::BackfillOptions::default(),
    )
    .await
    .unwrap();
    drop((conn, second));
    db.cleanup().await;
}

#[tokio::test]
async fn one_runner_sqlite() {
    // On SQLite the lock row names the holder; the same process taking it twice is allowed
    // (pid match), so hold it under another pid.
    let Some(db) = TestDb::create(Backend::Sqlite, "bf_one").await else {
        return;
    };
    let (mut conn, mapping, dsn) = prepare(&db, 1).await;
    let lock_name = format!("tidemark:backfill:{}", &mapping.fingerprint[..16]);
    sqlx::query("INSERT INTO tidemark_lock (name, pid, host, started_ms, heartbeat_ms) VALUES (?, 1, 'elsewhere', ?, ?)")
        .bind(lock_name)
        .bind(tidemark::values::now_ms())
        .bind(tidemark::values::now_ms())
        .execute(&mut conn)
        .await
        .unwrap();
    let err = backfill::run(
        &mut conn,
        &mapping,
        dsn.dialect,
        &backfill::BackfillOptions::default(),
    )
    .await
    .unwrap_err();
    assert_eq!(tidemark::cli::Outcome::code_of(&err), 3);
    assert!(
        format!("{err:#}").contains("process 1 on elsewhere"),
        "{err:#}"
    );
    drop(conn);
    db.cleanup().await;
}

/// A counter never advances a watermark that exists: the application's watermark 3 with a
/// counter wrongly cleared to 0 stays 3 (a "mark all read" race must not mark messages read).
#[tokio::test]
async fn counter_never_advances_an_existing_watermark() {
    let Some(db) = TestDb::create(Backend::Sqlite, "bf_counter").await else {
        return;
    };
    let dsn = Dsn::parse(&db.url).unwrap();
    let mut conn = db.connect().await;
    crate::common::exec_all(&mut conn, &scenario::schema_sql()).await;
    crate::common::exec_all(
        &mut conn,
        &[
            "INSERT INTO messages (conv_id, id, sender_id) VALUES (1, 1, 'a'), (1, 2, 'a'), (1, 3, 'a'), (1, 4, 'a'), (1, 5, 'a')".into(),
            "INSERT INTO members (conv_id, user_id) VALUES (1, 'a'), (1, 'b'), (1, 'c')".into(),
            "INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES (1, 'b', 0), (1, 'c', 0)".into(),
        ],
    )
    .await;
    let mapping = Mapping::parse(&scenario::mapping_toml("per_member", false), "m").unwrap();
    expand::run(&mut conn, &mapping, dsn.dialect, false)
        .await
        .unwrap();
    sqlx::raw_sql(
        "INSERT INTO read_watermarks (user_id, conversation_id, last_read_id) VALUES ('b', 1, 3)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let s = backfill::run(
        &mut conn,
        &mapping,
        dsn.dialect,
        &backfill::BackfillOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(s.kept_over_counter, 1);
    let wm = watermarks(&mut conn).await;
    assert_eq!(
        wm.iter().find(|w| w.0 == "b").map(|w| w.2),
        Some(3),
        "{wm:?}"
    );
    // c had no watermark: the counter fills it (k = 0: read up to the newest message).
    assert_eq!(
        wm.iter().find(|w| w.0 == "c").map(|w| (w.2, w.3.as_str())),
        Some((5, "counter")),
        "{wm:?}"
    );
    drop(conn);
    db.cleanup().await;
}
