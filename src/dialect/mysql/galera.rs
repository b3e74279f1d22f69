//! The runner lock on a MariaDB Galera cluster: `GET_LOCK` is per node there (two runners on
//! two nodes would both take it), so the lock is a row in `tidemark_lock`, a replicated InnoDB
//! table in the mapping's database (created on first use: `CREATE TABLE IF NOT EXISTS`), with
//! the holder's pid, host and a heartbeat, like SQLite's lock row
//! (`src/dialect/sqlite/locks.rs`). A row whose process is gone (same host) or whose heartbeat is older
//! than [`STALE_MS`] is taken over.
//!
//! The row is read `FOR UPDATE` and written in one transaction: two runners on two nodes both
//! pass their local check, and Galera's certification lets one COMMIT win; the other gets
//! error 1213 (deadlock), rolls back and tries again, then finds the row held.

use anyhow::Result;
use sqlx::{AnyConnection, Row};

use crate::dialect::lock_support::{hostname, process_gone};
use crate::dialect::types::{BoxFuture, LockAttempt, LockKind};
use crate::values::{now_ms, text};

/// A lock row whose heartbeat is older than this is stale: its runner is taken to be gone.
pub const STALE_MS: i64 = 60_000;

/// How many times a take, heartbeat or release that loses a certification conflict (1213) is
/// tried in all.
const ATTEMPTS: u32 = 20;

/// The lock table (InnoDB, with a primary key, as Galera replicates it).
const CREATE_SQL: &str = "CREATE TABLE IF NOT EXISTS tidemark_lock (\
     name VARCHAR(255) NOT NULL PRIMARY KEY, pid BIGINT NOT NULL, host VARCHAR(255) NOT NULL, \
     node VARCHAR(255) NOT NULL, started_ms BIGINT NOT NULL, heartbeat_ms BIGINT NOT NULL\
     ) ENGINE=InnoDB";

/// Whether the session's server is a Galera node with replication on (`wsrep_on = ON`; MySQL
/// and a MariaDB without Galera have no such variable, or have it OFF). Asked when a runner
/// lock is taken (and by `status`), not at each heartbeat: the lock remembers its
/// [`LockKind`].
///
/// Errors: the server cannot be asked.
pub fn is_galera<'a>(conn: &'a mut AnyConnection) -> BoxFuture<'a, Result<bool>> {
    Box::pin(async move {
        let row = sqlx::query("SHOW VARIABLES LIKE 'wsrep_on'")
            .fetch_optional(&mut *conn)
            .await?;
        Ok(match row {
            Some(r) => text(&r, 1)?.is_some_and(|v| v.eq_ignore_ascii_case("ON")),
            None => false,
        })
    })
}

/// One write to the lock row, run in a transaction by [`retried`].
enum Op<'a> {
    /// Take the row `name` for this process through Galera node `node`.
    Take { name: &'a str, node: &'a str },
    /// Refresh the heartbeat of the row `name`.
    Refresh { name: &'a str },
    /// Delete the row `name`.
    Release { name: &'a str },
}

/// Runs `op` in a transaction, again after a certification conflict or lock wait (up to
/// [`ATTEMPTS`] in all, with a short growing pause).
fn retried<'a>(conn: &'a mut AnyConnection, op: Op<'a>) -> BoxFuture<'a, Result<LockAttempt>> {
    Box::pin(async move {
        let mut attempt = 0;
        loop {
            attempt += 1;
            raw(&mut *conn, "START TRANSACTION").await?;
            let result = match once(conn, &op).await {
                Ok(v) => raw(&mut *conn, "COMMIT").await.map(|_| v),
                Err(e) => Err(e),
            };
            match result {
                Ok(v) => return Ok(v),
                Err(e) => {
                    let _ = raw(&mut *conn, "ROLLBACK").await;
                    if attempt >= ATTEMPTS
                        || !crate::dialect::handle::Dialect::error_is_lock_wait(&e)
                    {
                        return Err(e);
                    }
                    let pause = 20 * u64::from(attempt) + u64::from(std::process::id() % 20);
                    tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
                }
            }
        }
    })
}

/// The statements of `op` inside its transaction.
fn once<'a>(conn: &'a mut AnyConnection, op: &'a Op<'a>) -> BoxFuture<'a, Result<LockAttempt>> {
    Box::pin(async move {
        let pid = i64::from(std::process::id());
        match *op {
            Op::Take { name, node } => {
                let now = now_ms();
                if let Some((hpid, host, hnode, beat)) = read_row(conn, name, true).await? {
                    if let Some(holder) = live_holder(hpid, &host, &hnode, beat, now) {
                        return Ok(LockAttempt::Held(format!("held by {holder}")));
                    }
                }
                sqlx::query(
                    "INSERT INTO tidemark_lock (name, pid, host, node, started_ms, heartbeat_ms) \
                 VALUES (?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE pid = VALUES(pid), \
                 host = VALUES(host), node = VALUES(node), started_ms = VALUES(started_ms), \
                 heartbeat_ms = VALUES(heartbeat_ms)",
                )
                .bind(name.to_string())
                .bind(pid)
                .bind(hostname())
                .bind(node.to_string())
                .bind(now)
                .bind(now)
                .execute(&mut *conn)
                .await?;
            }
            Op::Refresh { name } => {
                sqlx::query("UPDATE tidemark_lock SET heartbeat_ms = ? WHERE name = ? AND pid = ?")
                    .bind(now_ms())
                    .bind(name.to_string())
                    .bind(pid)
                    .execute(&mut *conn)
                    .await?;
            }
            Op::Release { name } => {
                sqlx::query("DELETE FROM tidemark_lock WHERE name = ? AND pid = ? AND host = ?")
                    .bind(name.to_string())
                    .bind(pid)
                    .bind(hostname())
                    .execute(&mut *conn)
                    .await?;
            }
        }
        Ok(LockAttempt::Taken(LockKind::Row))
    })
}

/// Who holds the row `(pid, host, node, heartbeat_ms)` if it is alive and not this process:
/// the text after "held by".
fn live_holder(pid: i64, host: &str, node: &str, beat: i64, now: i64) -> Option<String> {
    if process_gone(host, pid) || now - beat >= STALE_MS || pid == i64::from(std::process::id()) {
        return None;
    }
    Some(format!(
        "process {pid} on {host} (through Galera node {node}), last seen {} s ago",
        (now - beat) / 1000
    ))
}

/// A lock row's holder: (pid, host, Galera node, heartbeat in ms since the epoch).
type Holder = (i64, String, String, i64);

/// Reads the lock row `name` as `(pid, host, node, heartbeat_ms)`; `for_update` locks it.
fn read_row<'a>(
    conn: &'a mut AnyConnection,
    name: &'a str,
    for_update: bool,
) -> BoxFuture<'a, Result<Option<Holder>>> {
    Box::pin(async move {
        let sql = format!(
            "SELECT pid, host, node, heartbeat_ms FROM tidemark_lock WHERE name = ?{}",
            if for_update { " FOR UPDATE" } else { "" }
        );
        let row = sqlx::query(&sql)
            .bind(name.to_string())
            .fetch_optional(&mut *conn)
            .await?;
        row.map(|r| {
            Ok((
                r.try_get(0)?,
                text(&r, 1)?.unwrap_or_default(),
                text(&r, 2)?.unwrap_or_default(),
                r.try_get(3)?,
            ))
        })
        .transpose()
    })
}

/// Tries to take the lock row `name` (see the module documentation).
///
/// Errors: the table is missing and cannot be created, or cannot be written (e.g. no CREATE
/// or INSERT privilege), or
/// certification conflicts go on past [`ATTEMPTS`].
pub fn try_lock<'a>(
    conn: &'a mut AnyConnection,
    name: &'a str,
) -> BoxFuture<'a, Result<LockAttempt>> {
    Box::pin(async move {
        // Created on first use only: `CREATE TABLE IF NOT EXISTS` needs the CREATE privilege
        // even when the table is there, which a least-privilege user has not.
        let exists: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'tidemark_lock'",
        )
        .fetch_one(&mut *conn)
        .await?;
        if exists == 0 {
            raw(&mut *conn, CREATE_SQL).await.map_err(|e| {
                e.context(
                    "creating tidemark_lock, the runner lock's table on a Galera cluster (created on first use: run tidemark once as a user with CREATE on this database, then SELECT, INSERT, UPDATE, DELETE on it suffice)",
                )
            })?;
        }
        let node_row = sqlx::query("SELECT CAST(@@wsrep_node_name AS CHAR(255))")
            .fetch_one(&mut *conn)
            .await?;
        let node = text(&node_row, 0)?.unwrap_or_default();
        retried(conn, Op::Take { name, node: &node }).await
    })
}

/// Refreshes the heartbeat of the lock row `name` this process holds.
///
/// Errors: the row cannot be written.
pub fn refresh<'a>(conn: &'a mut AnyConnection, name: &'a str) -> BoxFuture<'a, Result<()>> {
    Box::pin(async move { retried(conn, Op::Refresh { name }).await.map(|_| ()) })
}

/// Deletes the lock row `name` if this process holds it.
///
/// Errors: the row cannot be deleted.
pub fn release<'a>(conn: &'a mut AnyConnection, name: &'a str) -> BoxFuture<'a, Result<()>> {
    Box::pin(async move { retried(conn, Op::Release { name }).await.map(|_| ()) })
}

/// Whether a live runner (any process, this one included) holds the lock row `name`; a
/// missing table means nobody ever took it.
///
/// Errors: the server fails other than with a missing table.
pub fn held<'a>(conn: &'a mut AnyConnection, name: &'a str) -> BoxFuture<'a, Result<bool>> {
    Box::pin(async move {
        let exists: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'tidemark_lock'",
        )
        .fetch_one(&mut *conn)
        .await?;
        if exists == 0 {
            return Ok(false);
        }
        Ok(match read_row(conn, name, false).await? {
            None => false,
            Some((pid, host, _, beat)) => !process_gone(&host, pid) && now_ms() - beat < STALE_MS,
        })
    })
}

/// Runs one statement as text (the transaction statements cannot all be prepared).
fn raw<'a>(conn: &'a mut AnyConnection, sql: &'static str) -> BoxFuture<'a, Result<()>> {
    Box::pin(async move {
        sqlx::Executor::execute(conn, sql).await?;
        Ok(())
    })
}
