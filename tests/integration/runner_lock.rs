//! The runner lock remembers which kind it took (issue 13): a session lock (PostgreSQL
//! advisory lock, `GET_LOCK`) or a lock row (SQLite, a Galera cluster), decided once when it is
//! taken. On MariaDB/MySQL the per-batch heartbeat then asks the server nothing: before, every
//! runner-lock call (the heartbeat after each batch included) ran `SHOW VARIABLES LIKE
//! 'wsrep_on'`, counted here by the server's own `Com_show_variables`.

use sqlx::{AnyConnection, Connection, Row};
use tidemark::db::Dsn;
use tidemark::dialect::LockKind;
use tidemark::lock::RunnerLock;

use crate::common::{on_every_backend, Backend, TestDb};

on_every_backend!(lock_kind_and_heartbeat);

/// The session's `SHOW VARIABLES` statements so far (MariaDB/MySQL).
async fn show_variables(conn: &mut AnyConnection) -> i64 {
    let row = sqlx::query("SHOW SESSION STATUS LIKE 'Com_show_variables'")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    let v: String = row.try_get(1).unwrap();
    v.parse().unwrap()
}

/// Takes the lock, checks its kind, beats five times and releases it; on MariaDB/MySQL (one
/// server or a Galera node) counts the `SHOW VARIABLES` statements of the heartbeats.
async fn take_and_beat(url: &str, want: LockKind, count_show: bool) {
    let dsn = Dsn::parse(url).unwrap();
    let mut conn = dsn.connect().await.unwrap();
    if dsn.dialect == tidemark::dialect::Dialect::Sqlite {
        // The lock row's table, as `expand` creates it on SQLite (migration V2).
        sqlx::raw_sql(
            "CREATE TABLE IF NOT EXISTS tidemark_lock (name TEXT PRIMARY KEY, pid INTEGER NOT NULL, \
             host TEXT NOT NULL, started_ms INTEGER NOT NULL, heartbeat_ms INTEGER NOT NULL)",
        )
        .execute(&mut conn)
        .await
        .unwrap();
    }
    let lock = RunnerLock::acquire(&mut conn, dsn.dialect, "tidemark:test:kind")
        .await
        .unwrap();
    assert_eq!(lock.kind(), want);
    let before = if count_show {
        show_variables(&mut conn).await
    } else {
        0
    };
    for _ in 0..5 {
        lock.heartbeat(&mut conn).await.unwrap();
    }
    if count_show {
        // The count itself is one SHOW STATUS, not a SHOW VARIABLES.
        assert_eq!(
            show_variables(&mut conn).await,
            before,
            "the heartbeats asked the server no SHOW VARIABLES"
        );
    }
    lock.release(&mut conn).await.unwrap();
    let _ = conn.close().await;
}

async fn lock_kind_and_heartbeat(backend: Backend) {
    let Some(db) = TestDb::create(backend, "lock_kind").await else {
        return;
    };
    let want = match backend {
        Backend::Sqlite => LockKind::Row,
        Backend::Postgres => LockKind::Session,
        // A Galera node (TIDEMARK_TEST_MYSQL_URL may name one) takes a lock row.
        Backend::Mysql => {
            let mut conn = db.connect().await;
            let galera = tidemark::dialect::mysql::galera::is_galera(&mut conn)
                .await
                .unwrap();
            let _ = conn.close().await;
            if galera {
                LockKind::Row
            } else {
                LockKind::Session
            }
        }
    };
    take_and_beat(&db.url, want, backend == Backend::Mysql).await;
    db.cleanup().await;
}

/// On a Galera node the lock is a row, and its heartbeat (an UPDATE) still asks no
/// `SHOW VARIABLES`. Gated on `TIDEMARK_TEST_GALERA_URLS` (see `galera.rs`).
#[tokio::test]
async fn galera_lock_is_a_row() {
    let Ok(list) = std::env::var("TIDEMARK_TEST_GALERA_URLS") else {
        eprintln!("skipping galera: TIDEMARK_TEST_GALERA_URLS is not set");
        return;
    };
    let admin_url = list.split(',').next().unwrap().trim().to_string();
    let name = crate::common::unique_name("lock_kind_galera");
    let mut admin = crate::common::connect(&admin_url).await;
    sqlx::raw_sql(&format!("CREATE DATABASE `{name}`"))
        .execute(&mut admin)
        .await
        .unwrap();
    let mut url = url::Url::parse(&admin_url).unwrap();
    url.set_path(&format!("/{name}"));
    take_and_beat(url.as_str(), LockKind::Row, true).await;
    sqlx::raw_sql(&format!("DROP DATABASE `{name}`"))
        .execute(&mut admin)
        .await
        .unwrap();
    let _ = admin.close().await;
}
