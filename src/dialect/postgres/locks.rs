//! Postgres's runner lock ([`RunnerLocks`]): a session advisory lock with a lease.
//!
//! The lease (issue 29 row 6): a runner names its session `tidemark <unix seconds> <pid>`
//! (`application_name`) before it takes the lock, and renames it with the time at each
//! heartbeat ([`LEASE`]). A lock held by a session whose lease and last statement are older
//! than the lease, or by a session that is no tidemark runner's at all (a pooler handed the
//! server session of a runner killed with `kill -9` to another client, and the advisory lock
//! with it), is an orphan: the next runner ends that session (`pg_terminate_backend`) and
//! takes the lock. A session running a statement or inside a transaction now is never taken
//! to be an orphan.

use anyhow::Result;
use sqlx::{AnyConnection, Row};
use std::time::Duration;

use super::Postgres;
use crate::dialect::lock_support::{advisory_key, hostname};
use crate::dialect::traits::RunnerLocks;
use crate::dialect::types::{BoxFuture, LockAttempt, LockKind};
use crate::values::text;

/// A runner whose session's lease is older than this (60 s: twelve of the stages' 5 s
/// heartbeats, and longer than a pause, which beats too) is taken to be gone.
pub const LEASE: Duration = Duration::from_secs(60);

/// How long a runner waits for an orphan's lock after ending the orphan's session.
const TAKEOVER_WAIT: Duration = Duration::from_secs(5);

/// Seconds since the Unix epoch, by this machine's clock.
fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default()
}

/// The session name that carries the lease: `tidemark <unix seconds> <pid>@<host>` (cut to
/// PostgreSQL's 63 bytes: the host's end may go).
fn lease_name() -> String {
    let mut name = format!("tidemark {} {}@{}", now_s(), std::process::id(), hostname());
    name.retain(|c| c.is_ascii_alphanumeric() || " @.-_".contains(c));
    name.truncate(63);
    name
}

/// The lease time of a session named `name`: Some(seconds) for a lease, None for any other
/// name.
fn lease_time(name: &str) -> Option<i64> {
    let rest = name.strip_prefix("tidemark ")?;
    rest.split(' ').next()?.parse().ok()
}

/// Whether the holder of a lock, a session named `name` in `state`, whose last statement
/// started or ended at `changed_s` (Unix seconds), is a live runner at `now` (Unix seconds):
/// a session running a statement or inside a transaction now; or a tidemark session whose
/// lease, or last statement, is younger than [`LEASE`] (a batch longer than the lease beats
/// only after it, but runs statements all along). A session of any other name is no runner's.
fn holder_alive(name: &str, state: &str, changed_s: i64, now: i64) -> bool {
    let lease = LEASE.as_secs() as i64;
    if state == "active" || state.starts_with("idle in transaction") {
        return true;
    }
    // An earlier tidemark named its session `tidemark`, with no time.
    let runner = lease_time(name).or((name == "tidemark").then_some(i64::MIN));
    match runner {
        Some(t) => now.saturating_sub(t) < lease || now - changed_s < lease,
        None => false,
    }
}

/// The holder of the advisory lock `key`: (pid, client, session name, state, last change in
/// Unix seconds, connected since), or None when no session holds it now.
type Holder = (i64, String, String, String, i64, String);

async fn holder(conn: &mut AnyConnection, key: i64) -> Result<Option<Holder>> {
    let row = sqlx::query(
        "SELECT CAST(a.pid AS BIGINT), COALESCE(a.client_addr::text, 'local'), \
         COALESCE(a.application_name, ''), COALESCE(a.state, ''), \
         CAST(COALESCE(EXTRACT(EPOCH FROM a.state_change), 0) AS BIGINT), \
         COALESCE(to_char(a.backend_start, 'YYYY-MM-DD HH24:MI:SS'), '') \
         FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
         WHERE l.locktype = 'advisory' AND l.granted \
           AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
           AND ((CAST(l.classid AS BIGINT) << 32) | CAST(l.objid AS BIGINT)) = $1 LIMIT 1",
    )
    .bind(key)
    .fetch_optional(&mut *conn)
    .await?;
    row.map(|r| {
        Ok((
            r.try_get(0)?,
            text(&r, 1)?.unwrap_or_default(),
            text(&r, 2)?.unwrap_or_default(),
            text(&r, 3)?.unwrap_or_default(),
            r.try_get(4)?,
            text(&r, 5)?.unwrap_or_default(),
        ))
    })
    .transpose()
}

async fn try_take(conn: &mut AnyConnection, key: i64) -> Result<bool> {
    Ok(sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(key)
        .fetch_one(&mut *conn)
        .await?)
}

/// Ends the orphan session `pid` and waits up to [`TAKEOVER_WAIT`] for the lock `key`:
/// whether this session took it. Ok(false) when the orphan's session could not be ended
/// (not allowed: another role's session, without `pg_signal_backend`).
async fn take_over(conn: &mut AnyConnection, key: i64, pid: i64) -> Result<bool> {
    let ended: bool = sqlx::query_scalar("SELECT pg_terminate_backend(CAST($1 AS INTEGER))")
        .bind(pid)
        .fetch_one(&mut *conn)
        .await
        .unwrap_or(false);
    if !ended {
        return Ok(false);
    }
    let until = std::time::Instant::now() + TAKEOVER_WAIT;
    while std::time::Instant::now() < until {
        if try_take(conn, key).await? {
            return Ok(true);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(false)
}

impl RunnerLocks for Postgres {
    /// A session advisory lock (`pg_try_advisory_lock`) on the name's [`advisory_key`], with
    /// the lease of the module documentation: the session is named with the lease first, and
    /// an orphan's lock is taken over. The holder is named from `pg_locks` and
    /// `pg_stat_activity`.
    fn try_runner_lock<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        name: &'a str,
    ) -> BoxFuture<'a, Result<LockAttempt>> {
        Box::pin(async move {
            let key = advisory_key(name);
            // `Executor::execute` with plain text, as `raw_sql` would run it: `raw_sql` inside
            // this boxed `Send` future trips the "Executor is not general enough" limitation.
            let set = format!("SET application_name = '{}'", lease_name());
            sqlx::Executor::execute(&mut *conn, set.as_str()).await?;
            if try_take(conn, key).await? {
                return Ok(LockAttempt::Taken(LockKind::Session));
            }
            let Some((pid, client, app, state, changed, since)) = holder(conn, key).await? else {
                // Released between the two statements: one more try.
                return Ok(if try_take(conn, key).await? {
                    LockAttempt::Taken(LockKind::Session)
                } else {
                    LockAttempt::Held("held by another session".to_string())
                });
            };
            let now = now_s();
            let who =
                format!("server process {pid} from {client} ({app}), connected since {since}");
            if holder_alive(&app, &state, changed, now) {
                return Ok(LockAttempt::Held(format!("held by {who}")));
            }
            if take_over(conn, key, pid).await? {
                return Ok(LockAttempt::Taken(LockKind::Session));
            }
            Ok(LockAttempt::Held(format!(
                "held by {who}, whose runner is gone (no tidemark lease of the last {} s on that \
                 session: a killed runner's session, perhaps kept by a pooler); it could not be \
                 ended from here: end it with SELECT pg_terminate_backend({pid}) as its owner or \
                 a superuser",
                LEASE.as_secs()
            )))
        })
    }

    /// Renews the lease: renames the session with the time now (one `SET`).
    fn refresh_runner_lock<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        _name: &'a str,
        _kind: LockKind,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let set = format!("SET application_name = '{}'", lease_name());
            sqlx::Executor::execute(&mut *conn, set.as_str()).await?;
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
            sqlx::query("SELECT pg_advisory_unlock($1)")
                .bind(advisory_key(name))
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
            let n: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND granted \
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                 AND ((CAST(classid AS BIGINT) << 32) | CAST(objid AS BIGINT)) = $1",
            )
            .bind(advisory_key(name))
            .fetch_one(&mut *conn)
            .await?;
            Ok(n > 0)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_names_and_their_time() {
        let name = lease_name();
        assert!(name.len() <= 63);
        assert!(lease_time(&name).is_some_and(|t| (t - now_s()).abs() <= 1));
        assert_eq!(lease_time("tidemark 12 34@h"), Some(12));
        assert_eq!(lease_time("psql"), None);
    }

    #[test]
    fn who_is_alive() {
        let now = 1_000_000;
        assert!(holder_alive("tidemark 999990 1@h", "idle", 0, now));
        assert!(!holder_alive("tidemark 999900 1@h", "idle", 0, now));
        assert!(holder_alive("tidemark 999900 1@h", "idle", now - 5, now));
        assert!(holder_alive("tidemark 999900 1@h", "active", 0, now));
        assert!(holder_alive(
            "tidemark 999900 1@h",
            "idle in transaction",
            0,
            now
        ));
        assert!(!holder_alive("psql", "idle", now, now));
        assert!(holder_alive("tidemark", "idle", now - 5, now));
        assert!(!holder_alive("tidemark", "idle", now - 600, now));
    }
}
