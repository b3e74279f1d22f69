//! One runner at a time per mapping and stage: a PostgreSQL session advisory lock
//! (`pg_try_advisory_lock`), a MySQL/MariaDB named lock (`GET_LOCK`), or a lock row in
//! `tidemark_lock` on SQLite and on a MariaDB Galera cluster, where `GET_LOCK` is per node
//! (`src/dialect/mysql/galera.rs`) (each engine's [`crate::dialect::RunnerLocks`], in its
//! folder). A second runner fails at once (exit 3) naming the holder, unless the holder's
//! heartbeat or lease is older than 60 s (a killed runner's lock left on a pooled PostgreSQL
//! session: `src/dialect/postgres/locks.rs`, issue 29 row 6), when it takes the lock over.
//!
//! Also the per-statement lock waits tidemark accepts, so that the tool, not the application,
//! loses a lock wait (PostgreSQL `lock_timeout`, MySQL `innodb_lock_wait_timeout` and
//! `lock_wait_timeout`, SQLite `busy_timeout`), and how a lock-wait failure is recognised.

use anyhow::{anyhow, Result};
use sqlx::AnyConnection;
use std::time::Duration;

use crate::dialect::{Dialect, LockAttempt, LockKind};

/// The runner lock of `stage`'s runs (a `crate::ledger::Stage`, or its stored text) of the
/// mapping with this fingerprint (SHA-256 hex):
/// `tidemark:<stage>:<its first 16 hex digits>` (the engine adds the database where its named
/// locks are server-wide: [`crate::dialect::RunnerLocks::runner_lock_name`]). The one
/// spelling: each stage takes its lock by it, and `status` and the audit ask by it whether a
/// run recorded as `running` is alive.
pub fn runner_name(stage: impl AsRef<str>, fingerprint: &str) -> String {
    format!(
        "tidemark:{}:{}",
        stage.as_ref(),
        &fingerprint[..16.min(fingerprint.len())]
    )
}

/// A held runner lock; release it with [`RunnerLock::release`] (a crash releases the server
/// locks with the session; a stale SQLite row is taken over).
#[derive(Debug)]
pub struct RunnerLock {
    /// The lock's name on the server.
    name: String,
    dialect: Dialect,
    /// Which kind the dialect took (decided once, at [`RunnerLock::acquire`]).
    kind: LockKind,
}

impl RunnerLock {
    /// Takes the lock `name` (e.g. `tidemark:backfill:<fingerprint prefix>`).
    ///
    /// Errors (exit 3): another runner holds it; the message names it (PostgreSQL: backend
    /// pid, client and start; MySQL: connection id and host; SQLite: pid and host); a lock
    /// wait that still gives up after four retries.
    pub async fn acquire(
        conn: &mut AnyConnection,
        dialect: Dialect,
        name: &str,
    ) -> Result<RunnerLock> {
        let name = dialect.locks().runner_lock_name(conn, name).await?;
        // Taking a lock row is a write: on SQLite a busy application can outlast the busy
        // timeout once. A lock wait is retried (200, 400, 800, 1600 ms), as a batch's is.
        let mut attempt = 0;
        let taken = loop {
            match dialect.locks().try_runner_lock(conn, &name).await {
                Err(e) if is_lock_wait(&e) && attempt < 4 => {
                    tokio::time::sleep(std::time::Duration::from_millis(200 << attempt)).await;
                    attempt += 1;
                }
                other => break other?,
            }
        };
        match taken {
            LockAttempt::Taken(kind) => Ok(RunnerLock {
                name,
                dialect,
                kind,
            }),
            LockAttempt::Held(holder) => Err(anyhow!(
                "another tidemark is already running on this mapping ({name}): {holder}"
            )),
        }
    }

    /// Which kind of lock this is: [`LockKind::Session`] (PostgreSQL advisory lock,
    /// `GET_LOCK`) or [`LockKind::Row`] (SQLite, a Galera cluster).
    pub fn kind(&self) -> LockKind {
        self.kind
    }

    /// Refreshes the lock row's heartbeat (SQLite, Galera: [`LockKind::Row`]) or PostgreSQL's
    /// lease; for MySQL's [`LockKind::Session`] lock nothing, without a statement.
    pub async fn heartbeat(&self, conn: &mut AnyConnection) -> Result<()> {
        self.dialect
            .locks()
            .refresh_runner_lock(conn, &self.name, self.kind)
            .await
    }

    /// Releases the lock.
    pub async fn release(self, conn: &mut AnyConnection) -> Result<()> {
        self.dialect
            .locks()
            .release_runner_lock(conn, &self.name, self.kind)
            .await
    }
}

/// Whether a runner holds the lock `name` now (for `status`: a run recorded as "running" whose
/// lock is free was killed). Takes nothing.
pub async fn is_held(conn: &mut AnyConnection, dialect: Dialect, name: &str) -> Result<bool> {
    let name = dialect.locks().runner_lock_name(conn, name).await?;
    dialect.locks().runner_lock_held(conn, &name).await
}

/// Bounds every lock wait of this session to `timeout` (PostgreSQL `lock_timeout`; MySQL
/// `innodb_lock_wait_timeout` and `lock_wait_timeout`, whole seconds, at least 1; SQLite
/// `busy_timeout`).
pub async fn set_lock_timeout(
    conn: &mut AnyConnection,
    dialect: Dialect,
    timeout: Duration,
) -> Result<()> {
    for s in dialect.sessions().lock_timeout_sql(timeout) {
        sqlx::raw_sql(&s).execute(&mut *conn).await?;
    }
    Ok(())
}

/// Whether an error is a lock wait that gave up (or a deadlock / serialization failure): worth
/// retrying after a pause. PostgreSQL 55P03, 40001, 40P01; MySQL 1205, 1213 (also a Galera
/// certification conflict at COMMIT); SQLite BUSY and
/// LOCKED. The codes and messages of every dialect are recognised (an error does not say which
/// engine sent it).
pub fn is_lock_wait(error: &anyhow::Error) -> bool {
    Dialect::error_is_lock_wait(error)
}
