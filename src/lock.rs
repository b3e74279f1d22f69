//! One runner at a time per mapping and stage: a PostgreSQL session advisory lock
//! (`pg_try_advisory_lock`), a MySQL/MariaDB named lock (`GET_LOCK`), or a lock row in
//! `tidemark_lock` on SQLite. A second runner fails at once (exit 3) naming the holder.
//!
//! Also the per-statement lock waits tidemark accepts, so that the tool, not the application,
//! loses a lock wait (PostgreSQL `lock_timeout`, MySQL `innodb_lock_wait_timeout` and
//! `lock_wait_timeout`, SQLite `busy_timeout`), and how a lock-wait failure is recognised.

use anyhow::{anyhow, Result};
use sqlx::{AnyConnection, Row};
use std::time::Duration;

use crate::dialect::Dialect;
use crate::stages::{now_ms, text};

/// A held runner lock; release it with [`RunnerLock::release`] (a crash releases the server
/// locks with the session; a stale SQLite row is taken over).
#[derive(Debug)]
pub struct RunnerLock {
    name: String,
    dialect: Dialect,
}

/// A SQLite lock row whose heartbeat is older than this is stale.
const STALE_MS: i64 = 60_000;

fn advisory_key(name: &str) -> i64 {
    // FNV-1a 64: a stable key for pg_try_advisory_lock(bigint).
    let mut h: u64 = 0xcbf29ce484222325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h as i64
}

impl RunnerLock {
    /// Takes the lock `name` (e.g. `tidemark:backfill:<fingerprint prefix>`).
    ///
    /// Errors (exit 3): another runner holds it; the message names it (PostgreSQL: backend
    /// pid, client and start; MySQL: connection id and host; SQLite: pid and host).
    pub async fn acquire(
        conn: &mut AnyConnection,
        dialect: Dialect,
        name: &str,
    ) -> Result<RunnerLock> {
        let scoped = scoped_name(conn, dialect, name).await?;
        let name = scoped.as_str();
        match dialect {
            Dialect::Postgres => {
                let key = advisory_key(name);
                let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
                    .bind(key)
                    .fetch_one(&mut *conn)
                    .await?;
                if !got {
                    let holder = sqlx::query(
                        "SELECT CAST(a.pid AS BIGINT), COALESCE(a.client_addr::text, 'local'), COALESCE(a.application_name, ''), \
                         COALESCE(to_char(a.backend_start, 'YYYY-MM-DD HH24:MI:SS'), '') \
                         FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
                         WHERE l.locktype = 'advisory' AND l.granted \
                           AND ((CAST(l.classid AS BIGINT) << 32) | CAST(l.objid AS BIGINT)) = $1 LIMIT 1",
                    )
                    .bind(key)
                    .fetch_optional(&mut *conn)
                    .await
                    .ok()
                    .flatten()
                    .map(|r| {
                        format!(
                            "server process {} from {} ({}), connected since {}",
                            r.try_get::<i64, _>(0).unwrap_or_default(),
                            text(&r, 1).ok().flatten().unwrap_or_default(),
                            text(&r, 2).ok().flatten().unwrap_or_default(),
                            text(&r, 3).ok().flatten().unwrap_or_default()
                        )
                    })
                    .unwrap_or_else(|| "another session".to_string());
                    return Err(anyhow!("another tidemark is already running on this mapping ({name}): held by {holder}"));
                }
                sqlx::raw_sql("SET application_name = 'tidemark'")
                    .execute(&mut *conn)
                    .await?;
            }
            Dialect::Mysql => {
                let got: Option<i64> = sqlx::query_scalar("SELECT CAST(GET_LOCK(?, 0) AS SIGNED)")
                    .bind(name.to_string())
                    .fetch_one(&mut *conn)
                    .await?;
                if got != Some(1) {
                    let holder = sqlx::query(
                        "SELECT CAST(p.ID AS SIGNED), CAST(p.HOST AS CHAR(255)), CAST(p.TIME AS SIGNED) \
                         FROM information_schema.PROCESSLIST p WHERE p.ID = IS_USED_LOCK(?)",
                    )
                    .bind(name.to_string())
                    .fetch_optional(&mut *conn)
                    .await
                    .ok()
                    .flatten()
                    .map(|r| {
                        format!(
                            "connection {} from {}, for {} s",
                            r.try_get::<i64, _>(0).unwrap_or_default(),
                            text(&r, 1).ok().flatten().unwrap_or_default(),
                            r.try_get::<i64, _>(2).unwrap_or_default()
                        )
                    })
                    .unwrap_or_else(|| "another connection".to_string());
                    return Err(anyhow!("another tidemark is already running on this mapping ({name}): held by {holder}"));
                }
            }
            Dialect::Sqlite => {
                let host = hostname();
                let pid = i64::from(std::process::id());
                let now = now_ms();
                let existing =
                    sqlx::query("SELECT pid, host, heartbeat_ms FROM tidemark_lock WHERE name = ?")
                        .bind(name.to_string())
                        .fetch_optional(&mut *conn)
                        .await?;
                if let Some(r) = existing {
                    let (hpid, hhost, beat): (i64, String, i64) = (
                        r.try_get(0)?,
                        text(&r, 1)?.unwrap_or_default(),
                        r.try_get(2)?,
                    );
                    let dead =
                        hhost == host && !std::path::Path::new(&format!("/proc/{hpid}")).exists();
                    if !dead && now - beat < STALE_MS && hpid != pid {
                        return Err(anyhow!(
                            "another tidemark is already running on this mapping ({name}): process {hpid} on {hhost}, last seen {} s ago",
                            (now - beat) / 1000
                        ));
                    }
                }
                sqlx::query(
                    "INSERT INTO tidemark_lock (name, pid, host, started_ms, heartbeat_ms) VALUES (?, ?, ?, ?, ?) \
                     ON CONFLICT (name) DO UPDATE SET pid = excluded.pid, host = excluded.host, \
                     started_ms = excluded.started_ms, heartbeat_ms = excluded.heartbeat_ms",
                )
                .bind(name.to_string())
                .bind(pid)
                .bind(host)
                .bind(now)
                .bind(now)
                .execute(&mut *conn)
                .await?;
            }
        }
        Ok(RunnerLock {
            name: name.to_string(),
            dialect,
        })
    }

    /// Refreshes the SQLite lock row's heartbeat (a no-op on the servers).
    pub async fn heartbeat(&self, conn: &mut AnyConnection) -> Result<()> {
        if self.dialect == Dialect::Sqlite {
            sqlx::query("UPDATE tidemark_lock SET heartbeat_ms = ? WHERE name = ?")
                .bind(now_ms())
                .bind(self.name.clone())
                .execute(&mut *conn)
                .await?;
        }
        Ok(())
    }

    /// Releases the lock.
    pub async fn release(self, conn: &mut AnyConnection) -> Result<()> {
        match self.dialect {
            Dialect::Postgres => {
                sqlx::query("SELECT pg_advisory_unlock($1)")
                    .bind(advisory_key(&self.name))
                    .execute(&mut *conn)
                    .await?;
            }
            Dialect::Mysql => {
                sqlx::query("SELECT RELEASE_LOCK(?)")
                    .bind(self.name.clone())
                    .execute(&mut *conn)
                    .await?;
            }
            Dialect::Sqlite => {
                sqlx::query("DELETE FROM tidemark_lock WHERE name = ? AND pid = ?")
                    .bind(self.name.clone())
                    .bind(i64::from(std::process::id()))
                    .execute(&mut *conn)
                    .await?;
            }
        }
        Ok(())
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".to_string())
}

/// The lock's name on the server. GET_LOCK names are server-wide (PostgreSQL advisory locks
/// are per database): on MySQL/MariaDB the database is part of the name, at most 64
/// characters in all.
async fn scoped_name(conn: &mut AnyConnection, dialect: Dialect, name: &str) -> Result<String> {
    Ok(match dialect {
        Dialect::Mysql => {
            let row = sqlx::query("SELECT DATABASE()")
                .fetch_one(&mut *conn)
                .await?;
            let db = text(&row, 0)?;
            format!("{name}:{:016x}", advisory_key(&db.unwrap_or_default()))
        }
        _ => name.to_string(),
    })
}

/// Whether a runner holds the lock `name` now (for `status`: a run recorded as "running" whose
/// lock is free was killed). Takes nothing.
pub async fn is_held(conn: &mut AnyConnection, dialect: Dialect, name: &str) -> Result<bool> {
    Ok(match dialect {
        Dialect::Postgres => {
            let n: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND granted \
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                 AND ((CAST(classid AS BIGINT) << 32) | CAST(objid AS BIGINT)) = $1",
            )
            .bind(advisory_key(name))
            .fetch_one(&mut *conn)
            .await?;
            n > 0
        }
        Dialect::Mysql => {
            let scoped = scoped_name(conn, dialect, name).await?;
            let holder: Option<i64> = sqlx::query_scalar("SELECT CAST(IS_USED_LOCK(?) AS SIGNED)")
                .bind(scoped)
                .fetch_one(&mut *conn)
                .await?;
            holder.is_some()
        }
        Dialect::Sqlite => {
            let row =
                sqlx::query("SELECT pid, host, heartbeat_ms FROM tidemark_lock WHERE name = ?")
                    .bind(name.to_string())
                    .fetch_optional(&mut *conn)
                    .await?;
            match row {
                None => false,
                Some(r) => {
                    let (pid, host, beat): (i64, String, i64) = (
                        r.try_get(0)?,
                        text(&r, 1)?.unwrap_or_default(),
                        r.try_get(2)?,
                    );
                    let gone = host == hostname()
                        && !std::path::Path::new(&format!("/proc/{pid}")).exists();
                    !gone && now_ms() - beat < STALE_MS
                }
            }
        }
    })
}

/// Bounds every lock wait of this session to `timeout` (PostgreSQL `lock_timeout`; MySQL
/// `innodb_lock_wait_timeout` and `lock_wait_timeout`, whole seconds, at least 1; SQLite
/// `busy_timeout`).
pub async fn set_lock_timeout(
    conn: &mut AnyConnection,
    dialect: Dialect,
    timeout: Duration,
) -> Result<()> {
    let ms = timeout.as_millis().max(1);
    let secs = timeout.as_secs().max(1);
    let statements = match dialect {
        Dialect::Postgres => vec![format!("SET lock_timeout = '{ms}ms'")],
        Dialect::Mysql => vec![
            format!("SET SESSION innodb_lock_wait_timeout = {secs}"),
            format!("SET SESSION lock_wait_timeout = {secs}"),
        ],
        Dialect::Sqlite => vec![format!("PRAGMA busy_timeout = {ms}")],
    };
    for s in statements {
        sqlx::raw_sql(&s).execute(&mut *conn).await?;
    }
    Ok(())
}

/// Whether an error is a lock wait that gave up (or a deadlock / serialization failure): worth
/// retrying after a pause. PostgreSQL 55P03, 40001, 40P01; MySQL 1205, 1213; SQLite BUSY and
/// LOCKED.
pub fn is_lock_wait(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        let Some(sqlx::Error::Database(db)) = cause.downcast_ref::<sqlx::Error>() else {
            return false;
        };
        let code = db.code().map(|c| c.to_string()).unwrap_or_default();
        let msg = db.message().to_ascii_lowercase();
        matches!(
            code.as_str(),
            "55P03" | "40001" | "40P01" | "5" | "6" | "261" | "517"
        ) || msg.contains("lock wait timeout")
            || msg.contains("deadlock")
            || msg.contains("database is locked")
            || msg.contains("database table is locked")
            || msg.contains("lock timeout")
    })
}
