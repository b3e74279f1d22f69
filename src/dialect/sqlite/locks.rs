//! Sqlite's runner lock ([`RunnerLocks`]).

use anyhow::Result;
use sqlx::{AnyConnection, Row};

use super::Sqlite;
use crate::dialect::lock_support::{hostname, process_gone};
use crate::dialect::traits::RunnerLocks;
use crate::dialect::types::{BoxFuture, LockAttempt, LockKind};
use crate::values::{now_ms, text};

/// A lock row whose heartbeat is older than this is stale: its runner is taken to be gone.
const STALE_MS: i64 = 60_000;

impl RunnerLocks for Sqlite {
    /// A row in `tidemark_lock` (created by `expand`) with the holder's pid, host and a
    /// heartbeat: a row whose process is gone (same host) or whose heartbeat is older than a
    /// minute is taken over.
    fn try_runner_lock<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        name: &'a str,
    ) -> BoxFuture<'a, Result<LockAttempt>> {
        Box::pin(async move {
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
                if !process_gone(&hhost, hpid) && now - beat < STALE_MS && hpid != pid {
                    return Ok(LockAttempt::Held(format!(
                        "process {hpid} on {hhost}, last seen {} s ago",
                        (now - beat) / 1000
                    )));
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
            Ok(LockAttempt::Taken(LockKind::Row))
        })
    }

    fn refresh_runner_lock<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        name: &'a str,
        _kind: LockKind,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            sqlx::query("UPDATE tidemark_lock SET heartbeat_ms = ? WHERE name = ?")
                .bind(now_ms())
                .bind(name.to_string())
                .execute(&mut *conn)
                .await?;
            Ok(())
        })
    }

    fn release_runner_lock<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        name: &'a str,
        _kind: LockKind,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            sqlx::query("DELETE FROM tidemark_lock WHERE name = ? AND pid = ?")
                .bind(name.to_string())
                .bind(i64::from(std::process::id()))
                .execute(&mut *conn)
                .await?;
            Ok(())
        })
    }

    fn runner_lock_held<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        name: &'a str,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let row =
                sqlx::query("SELECT pid, host, heartbeat_ms FROM tidemark_lock WHERE name = ?")
                    .bind(name.to_string())
                    .fetch_optional(&mut *conn)
                    .await?;
            Ok(match row {
                None => false,
                Some(r) => {
                    let (pid, host, beat): (i64, String, i64) = (
                        r.try_get(0)?,
                        text(&r, 1)?.unwrap_or_default(),
                        r.try_get(2)?,
                    );
                    !process_gone(&host, pid) && now_ms() - beat < STALE_MS
                }
            })
        })
    }
}
