//! PostgreSQL behind a pooler and with idle-session timeouts (issue 29 rows 6 and 17).
//!
//! Row 6, through a real pgbouncer in transaction pooling mode (`.ci/pgbouncer.sh`, started by
//! `.ci/run`; its URL in `TIDEMARK_TEST_PGBOUNCER_URL`, the database name replaced by each
//! test's own): tidemark refuses the shared server session with exit 2 before anything is
//! written (before: the first backfill ran, the next ones met `prepared statement "sqlx_s_1"
//! already exists`); the session-pooling alias `tidemark_session` is accepted; a killed
//! runner's advisory lock left on a pooled server session is taken over once its lease ran out
//! (before: every later backfill, even on 5432, exited 3 "another tidemark is already running"
//! until pgbouncer recycled the server session), and a live runner's lease is still respected.
//! Without the URL these tests skip; with `CI` set they fail.
//!
//! Row 17, on the PostgreSQL server: `ALTER DATABASE … SET idle_session_timeout = '1s'` no
//! longer ends a backfill that pauses between batches or on a pause file (before: exit 3).

use sqlx::Connection;
use std::path::Path;
use std::time::{Duration, Instant};
use tidemark::db::Dsn;
use tidemark::dialect::lock_support::advisory_key;
use tidemark::mapping::Mapping;

use crate::common::{bin, Backend, TestDb};
use crate::scenario;

/// The pgbouncer URL (transaction mode), or None when it is not set (a note; a failure when
/// `CI` is set: CI starts pgbouncer).
fn pgbouncer_url() -> Option<String> {
    match std::env::var("TIDEMARK_TEST_PGBOUNCER_URL") {
        Ok(url) if !url.trim().is_empty() => Some(url.trim().to_string()),
        _ if std::env::var_os("CI").is_some() => {
            panic!("TIDEMARK_TEST_PGBOUNCER_URL is not set and CI is set: .ci/run starts pgbouncer (.ci/pgbouncer.sh)")
        }
        _ => {
            eprintln!("skipping: TIDEMARK_TEST_PGBOUNCER_URL is not set (.ci/pgbouncer.sh start)");
            None
        }
    }
}

/// `url` with the database `name` in its path.
fn on_database(url: &str, name: &str) -> String {
    let mut url = url::Url::parse(url).unwrap();
    url.set_path(&format!("/{name}"));
    url.to_string()
}

/// A PostgreSQL test database with four copies of the per-member scenarios, expanded (on the
/// server directly), and the mapping saved in `dir`: (database, mapping, mapping file).
async fn fixture(label: &str, dir: &Path) -> Option<(TestDb, Mapping, std::path::PathBuf)> {
    let db = TestDb::create(Backend::Postgres, label).await?;
    let mut conn = db.connect().await;
    crate::common::exec_all(&mut conn, &scenario::schema_sql()).await;
    let scenarios: Vec<_> = scenario::load_all()
        .unwrap()
        .into_iter()
        .filter(|s| !s.is_per_message() && s.options.cap.is_none())
        .collect();
    for copy in 0..4 {
        for (j, s) in scenarios.iter().enumerate() {
            let offset = (copy * 20 + j as i64 + 1) * 100;
            crate::common::exec_all(&mut conn, &scenario::data_sql(s, offset)).await;
        }
    }
    let text = scenario::mapping_toml("per_member", false);
    let mapping = Mapping::parse(&text, "poolers").unwrap();
    let dsn = Dsn::parse(&db.url).unwrap();
    tidemark::stages::expand::run(&mut conn, &mapping, dsn.dialect, false)
        .await
        .unwrap();
    let _ = conn.close().await;
    let path = dir.join("tidemark.toml");
    std::fs::write(&path, text).unwrap();
    Some((db, mapping, path))
}

/// (watermark rows, backfill ledger rows) of the test database.
async fn written(db: &TestDb) -> (i64, i64) {
    let mut conn = db.connect().await;
    let marks: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM read_watermarks")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    let runs: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM tidemark_ledger WHERE stage = 'backfill'")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    let _ = conn.close().await;
    (marks, runs)
}

/// `tidemark backfill --quiet` on `url` with `extra` arguments.
fn backfill(dir: &Path, url: &str, mapping: &Path, extra: &[&str]) -> bin::Run {
    let mut args = vec![
        "backfill",
        "--database",
        url,
        "--mapping",
        mapping.to_str().unwrap(),
        "--quiet",
    ];
    args.extend_from_slice(extra);
    bin::run(dir, &args)
}

/// Row 6: through transaction pooling every command is refused with exit 2, naming
/// transaction pooling and what to use instead, and nothing is written; the same backfill on
/// the server directly then runs. Three clients in a row, as in the issue (before: the first
/// ran, the second and third exited 3 on `sqlx_s_1`).
#[tokio::test]
async fn transaction_pooling_is_refused() {
    let Some(pooler) = pgbouncer_url() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let Some((db, _, mapping)) = fixture("pool_refused", dir.path()).await else {
        return;
    };
    let url = on_database(&pooler, &db.name);
    for _ in 0..3 {
        let run = backfill(dir.path(), &url, &mapping, &[]);
        run.expect_code(2);
        for part in [
            "transaction or statement pooling",
            "pool_mode = session",
            "direct URL",
        ] {
            assert!(run.stderr.contains(part), "{part:?} in: {}", run.stderr);
        }
        assert!(!run.stderr.contains("sqlx_s_"), "{}", run.stderr);
    }
    let status = bin::run(
        dir.path(),
        &[
            "status",
            "--database",
            &url,
            "--mapping",
            mapping.to_str().unwrap(),
        ],
    );
    status.expect_code(2);
    assert_eq!(written(&db).await, (0, 0), "nothing written");
    backfill(dir.path(), &db.url, &mapping, &[]).expect_code(0);
    let (marks, runs) = written(&db).await;
    assert!(marks > 50, "{marks} watermarks");
    assert_eq!(runs, 1);
    db.cleanup().await;
}

/// Row 6: session pooling (pgbouncer's `tidemark_session` alias of the database `test`) and
/// a direct URL are accepted, also with a second connection of the same URL open.
#[tokio::test]
async fn session_pooling_and_direct_are_accepted() {
    let Some(pooler) = pgbouncer_url() else {
        return;
    };
    let direct = Backend::Postgres.admin_url().unwrap();
    for url in [on_database(&pooler, "tidemark_session"), direct] {
        let dsn = Dsn::parse(&url).unwrap();
        let mut a = dsn
            .connect()
            .await
            .unwrap_or_else(|e| panic!("{url}: {e:#}"));
        let mut b = dsn
            .connect()
            .await
            .unwrap_or_else(|e| panic!("{url}: {e:#}"));
        let mut pids = Vec::new();
        for conn in [&mut a, &mut b] {
            let pid: i64 = sqlx::query_scalar("SELECT CAST(pg_backend_pid() AS BIGINT)")
                .fetch_one(&mut *conn)
                .await
                .unwrap();
            pids.push(pid);
        }
        assert_ne!(pids[0], pids[1], "{url}: a server session each");
        let _ = b.close().await;
        let _ = a.close().await;
    }
    let refused = Dsn::parse(&pooler).unwrap().connect().await.unwrap_err();
    assert_eq!(
        tidemark::error::kind(&refused),
        tidemark::error::ErrorKind::BadInput,
        "{refused:#}"
    );
}

/// The backfill lock's advisory key of `mapping`.
fn backfill_key(mapping: &Mapping) -> i64 {
    advisory_key(&tidemark::stages::backfill::lock_name(mapping))
}

/// Row 6: a killed runner's lock on a pooled server session. A client of pgbouncer takes the
/// backfill's advisory lock under a tidemark lease (as a runner did before tidemark refused
/// transaction pooling) and is killed: the lock stays on the pooled server session, which
/// pgbouncer then hands to the application's next client (`chat-app`). A backfill on the
/// server directly takes the lock over at once and runs (before: exit 3, "already running",
/// until pgbouncer recycled the server session). A live runner's lease (a session on the
/// server, its lease renewed now) is still respected: exit 3 naming its process. (A lease
/// that ran out on an idle session: `src/dialect/postgres/locks.rs`'s unit tests.)
#[tokio::test]
async fn killed_runner_lock_ends_with_its_lease() {
    let Some(pooler) = pgbouncer_url() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let Some((db, mapping, path)) = fixture("pool_lease", dir.path()).await else {
        return;
    };
    let key = backfill_key(&mapping);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();

    // A live runner: its lease renewed now; the second one is refused.
    let mut live = db.connect().await;
    let lease = format!("SET application_name = 'tidemark {now} 1@elsewhere'");
    sqlx::raw_sql(&lease).execute(&mut live).await.unwrap();
    sqlx::raw_sql(&format!("SELECT pg_advisory_lock({key})"))
        .execute(&mut live)
        .await
        .unwrap();
    let run = backfill(dir.path(), &db.url, &path, &[]);
    run.expect_code(3);
    assert!(
        run.stderr.contains("already running") && run.stderr.contains("tidemark "),
        "{}",
        run.stderr
    );
    let _ = live.close().await;

    // The killed runner, through pgbouncer: the lock stays on the pooled server session.
    let mut killed = crate::common::connect(&on_database(&pooler, &db.name)).await;
    let old = format!(
        "SET application_name = 'tidemark {} 2@elsewhere'",
        now - 120
    );
    sqlx::raw_sql(&old).execute(&mut killed).await.unwrap();
    sqlx::raw_sql(&format!("SELECT pg_advisory_lock({key})"))
        .fetch_all(&mut killed)
        .await
        .unwrap();
    let mut admin = db.connect().await;
    let holders = format!(
        "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND granted \
         AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
         AND ((CAST(classid AS BIGINT) << 32) | CAST(objid AS BIGINT)) = {key}"
    );
    let held: i64 = sqlx::query_scalar(&holders)
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert_eq!(held, 1, "the pooler's server session took the lock");
    let holder_pid: i64 = sqlx::query_scalar(&format!(
        "SELECT CAST(pid AS BIGINT) FROM pg_locks WHERE locktype = 'advisory' AND granted \
         AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
         AND ((CAST(classid AS BIGINT) << 32) | CAST(objid AS BIGINT)) = {key}"
    ))
    .fetch_one(&mut admin)
    .await
    .unwrap();
    // The runner is killed: its socket closes without a goodbye.
    drop(killed);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let held: i64 = sqlx::query_scalar(&holders)
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert_eq!(held, 1, "the pooled server session keeps the lock");
    // The pooler hands that server session to the application's next client.
    let mut app = crate::common::connect(&on_database(&pooler, &db.name)).await;
    sqlx::raw_sql("SET application_name = 'chat-app'")
        .execute(&mut app)
        .await
        .unwrap();
    let row = sqlx::raw_sql("SELECT CAST(pg_backend_pid() AS BIGINT)")
        .fetch_one(&mut app)
        .await
        .unwrap();
    let served_by: i64 = sqlx::Row::try_get(&row, 0).unwrap();
    assert_eq!(
        served_by, holder_pid,
        "the next client got the orphan's session"
    );
    let _ = app.close().await;

    let started = Instant::now();
    let run = backfill(dir.path(), &db.url, &path, &[]);
    run.expect_code(0);
    let took = started.elapsed();
    let (marks, runs) = written(&db).await;
    assert!(marks > 50, "{marks} watermarks");
    assert_eq!(runs, 1);
    eprintln!("the orphan's lock was taken over; the backfill took {took:?}");
    assert!(took < Duration::from_secs(30), "{took:?}");
    let _ = admin.close().await;
    db.cleanup().await;
}

/// Row 17: `idle_session_timeout = '1s'` on the database, a backfill of several batches with
/// `--pause-between-batches 1500ms`, then one paused 2.5 s on a pause file: both finish
/// (before: exit 3 with the session ended after the first pause).
#[tokio::test]
async fn idle_session_timeout_does_not_end_a_paused_backfill() {
    let dir = tempfile::tempdir().unwrap();
    let Some((db, _, path)) = fixture("pool_idle", dir.path()).await else {
        return;
    };
    let mut admin = db.connect().await;
    sqlx::raw_sql(&format!(
        "ALTER DATABASE \"{}\" SET idle_session_timeout = '1s'",
        db.name
    ))
    .execute(&mut admin)
    .await
    .unwrap();
    let _ = admin.close().await;
    // A new session has the setting.
    let mut check = db.connect().await;
    let timeout: String = sqlx::query_scalar("SELECT current_setting('idle_session_timeout')")
        .fetch_one(&mut check)
        .await
        .unwrap();
    assert_eq!(timeout, "1s");
    let _ = check.close().await;

    let started = Instant::now();
    let run = backfill(
        dir.path(),
        &db.url,
        &path,
        &[
            "--batch-size",
            "40",
            "--chunk-time",
            "0s",
            "--pause-between-batches",
            "1500ms",
        ],
    );
    run.expect_code(0);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1500),
        "paused at least once: {took:?}"
    );
    let (marks, runs) = written(&db).await;
    assert!(marks > 50, "{marks} watermarks");
    assert_eq!(runs, 1);

    // The pause file: 2.5 s paused before the first batch of a second (forced) run.
    let pause = dir.path().join("pause");
    std::fs::write(&pause, "").unwrap();
    let child = bin::command()
        .args([
            "backfill",
            "--database",
            &db.url,
            "--mapping",
            path.to_str().unwrap(),
            "--quiet",
            "--pause-file",
            pause.to_str().unwrap(),
        ])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    std::fs::remove_file(&pause).unwrap();
    let out = child.wait_with_output().unwrap();
    let run = bin::Run::from(out);
    run.expect_code(0);
    assert_eq!(written(&db).await.1, 2, "a second backfill run recorded");
    db.cleanup().await;
}
