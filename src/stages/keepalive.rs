//! The waits of a stage that runs in batches (backfill, audit) with the session kept alive
//! (issue 29 row 17; the audit's throttles, issue 30): a server setting that
//! ends idle sessions (PostgreSQL's `idle_session_timeout`, e.g. `ALTER DATABASE … SET
//! idle_session_timeout = '1s'`; MySQL/MariaDB's `wait_timeout`) shorter than
//! `--pause-between-batches`, a pause file, a throttle or a lock-wait backoff used to end the
//! backfill's session while it waited (exit 3 at the next batch). Every wait now runs
//! `SELECT 1` every [`KEEPALIVE_EVERY`] and beats the runner lock every [`HEARTBEAT_EVERY`]
//! (a paused runner keeps its lock row or lease). A session that ends all the same is named
//! with the settings that end idle sessions.

use anyhow::{Context, Result};
use sqlx::AnyConnection;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::lock::RunnerLock;
use crate::progress::Progress;

/// How often a waiting backfill runs `SELECT 1`: well under a one-second idle timeout (the
/// shortest PostgreSQL's `idle_session_timeout` a DBA sets in practice, and MySQL's smallest
/// `wait_timeout`), and four plain statements a second while paused cost the server nothing.
pub const KEEPALIVE_EVERY: Duration = Duration::from_millis(250);

/// How often the runner lock's heartbeat is refreshed (SQLite, Galera: a row whose heartbeat
/// is a minute old is taken to be a dead runner's; PostgreSQL: the lease): at most once in
/// this time, not after every batch, which cost one more commit per batch.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);

/// A batched stage's session between batches (backfill, audit): its runner lock (None in a dry run) and when the
/// lock last beat.
pub struct Session<'a> {
    lock: Option<&'a RunnerLock>,
    last_heartbeat: Instant,
}

impl<'a> Session<'a> {
    /// A session holding `lock` (None: a dry run, which holds none).
    pub fn new(lock: Option<&'a RunnerLock>) -> Session<'a> {
        Session {
            lock,
            last_heartbeat: Instant::now(),
        }
    }

    /// Beats the runner lock if [`HEARTBEAT_EVERY`] has passed since the last beat (best
    /// effort: a missed heartbeat only matters after a minute of them).
    pub async fn heartbeat(&mut self, conn: &mut AnyConnection) {
        if let Some(lock) = self
            .lock
            .filter(|_| self.last_heartbeat.elapsed() >= HEARTBEAT_EVERY)
        {
            let _ = lock.heartbeat(conn).await;
            self.last_heartbeat = Instant::now();
        }
    }

    /// One keep-alive statement (`SELECT 1`, plain text) and the lock's heartbeat when due.
    ///
    /// Errors (exit 3): the session ended (named with the settings that end idle sessions).
    pub async fn keep_alive(&mut self, conn: &mut AnyConnection) -> Result<()> {
        sqlx::raw_sql("SELECT 1")
            .execute(&mut *conn)
            .await
            .context(
                "the database session ended while tidemark waited (a pause, a throttle or a \
                 lock-wait backoff): a server setting that ends idle sessions may be shorter than \
                 the keep-alive (PostgreSQL idle_session_timeout, MySQL/MariaDB wait_timeout); a \
                 rerun resumes after the last finished batch",
            )?;
        self.heartbeat(conn).await;
        Ok(())
    }

    /// Waits `total`, keeping the session alive ([`Self::keep_alive`] every
    /// [`KEEPALIVE_EVERY`]).
    ///
    /// Errors: as [`Self::keep_alive`].
    pub async fn wait(&mut self, conn: &mut AnyConnection, total: Duration) -> Result<()> {
        let until = Instant::now() + total;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            tokio::time::sleep(left.min(KEEPALIVE_EVERY)).await;
            self.keep_alive(conn).await?;
        }
    }

    /// Waits while `path` exists (`--pause-file`; None: no wait) or until `stop` is set
    /// (Ctrl-C, SIGTERM), saying so on the progress line and keeping the session alive
    /// ([`Self::wait`] in steps of 500 ms). Returns the time waited, milliseconds precise (not
    /// active time: see `--max-rows-per-second`).
    ///
    /// Errors (exit 3): the session ended while paused.
    pub async fn wait_while_file(
        &mut self,
        conn: &mut AnyConnection,
        path: Option<&Path>,
        stop: Option<&AtomicBool>,
        progress: &mut Progress,
    ) -> Result<Duration> {
        let Some(path) = path else {
            return Ok(Duration::ZERO);
        };
        let started = Instant::now();
        while path.exists() {
            progress.message(&format!("paused: {} exists", path.display()));
            if stop.is_some_and(|s| s.load(Ordering::SeqCst)) {
                break;
            }
            self.wait(conn, Duration::from_millis(500)).await?;
        }
        progress.message("");
        Ok(started.elapsed())
    }
}
