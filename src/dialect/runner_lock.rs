//! What the engines' runner locks share: the answer of a lock attempt, the stable 64-bit key
//! of a lock name, and the boxed future the trait's asynchronous methods return (the trait is
//! used as `dyn SqlDialect`, so its async methods cannot be `async fn`).
//!
//! Each engine's lock itself is in its own file: a session advisory lock
//! ([`super::postgres`]), a named lock ([`super::mysql`]), a lock row ([`super::sqlite`]).
//! [`crate::lock::RunnerLock`] is the handle the stages hold.

/// A boxed, sendable future, as the [`super::SqlDialect`] methods that talk to the database
/// return it.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// Which kind of runner lock a session took: what keeping it alive and releasing it take.
/// Decided once, when the lock is taken ([`super::SqlDialect::try_runner_lock`]), and kept by
/// [`crate::lock::RunnerLock`], so that the per-batch heartbeat asks the server nothing it
/// already answered (a MySQL-dialect server is asked `wsrep_on` once, not once per batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// A lock the server ties to the session (`pg_try_advisory_lock`, `GET_LOCK`): it lives
    /// as long as the connection; no heartbeat; released by the server's unlock call.
    Session,
    /// A row in `tidemark_lock` (SQLite; a MariaDB Galera cluster, where `GET_LOCK` is per
    /// node): kept alive by a heartbeat, released by deleting the row.
    Row,
}

/// The answer of one attempt to take a runner lock without waiting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockAttempt {
    /// This session holds the lock now, of this kind.
    Taken(LockKind),
    /// Another runner holds it: who, as the engine can tell (e.g. `held by server process 42
    /// from local (tidemark), connected since …`, or `process 42 on host, last seen 3 s ago`).
    /// [`crate::lock::RunnerLock::acquire`] puts it after the lock's name in its error.
    Held(String),
}

/// A stable 64-bit key for a lock name (FNV-1a 64): the key of `pg_try_advisory_lock(bigint)`,
/// and the database's part of a MySQL lock name.
pub fn advisory_key(name: &str) -> i64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h as i64
}

/// This machine's host name (`localhost` when it cannot be read), recorded with a SQLite lock
/// row so that a runner on the same host can tell a dead holder.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".to_string())
}

/// Whether process `pid` on `host` is known to be gone: only a holder on this host can be
/// checked (through `/proc`); one elsewhere is assumed alive until its heartbeat is stale.
pub fn process_gone(host: &str, pid: i64) -> bool {
    host == hostname() && !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Whether a database error with `code` (as the driver reports it, empty when none) and
/// `message` is a lock wait that gave up, a deadlock or a serialization failure, by the codes
/// and messages of every dialect ([`super::SqlDialect::lock_wait_codes`],
/// [`super::SqlDialect::lock_wait_messages`]): an error does not say which engine sent it.
pub fn is_lock_wait(code: &str, message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    super::Dialect::ALL.iter().any(|d| {
        d.lock_wait_codes().contains(&code)
            || d.lock_wait_messages().iter().any(|m| message.contains(m))
    })
}

/// Whether any cause in `error`'s chain is a database error that [`is_lock_wait`] recognises
/// (what [`crate::lock::is_lock_wait`] answers; here so that the dialects need not import the
/// module that uses them).
pub fn error_is_lock_wait(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        let Some(sqlx::Error::Database(db)) = cause.downcast_ref::<sqlx::Error>() else {
            return false;
        };
        let code = db.code().map(|c| c.to_string()).unwrap_or_default();
        is_lock_wait(&code, db.message())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advisory_keys_are_stable() {
        assert_eq!(advisory_key(""), 0xcbf29ce484222325_u64 as i64);
        assert_eq!(advisory_key("a"), advisory_key("a"));
        assert_ne!(advisory_key("a"), advisory_key("b"));
    }

    #[test]
    fn lock_waits_of_every_engine_are_recognised() {
        assert!(is_lock_wait(
            "55P03",
            "canceling statement due to lock timeout"
        ));
        assert!(is_lock_wait("40P01", ""));
        assert!(is_lock_wait(
            "HY000",
            "Lock wait timeout exceeded; try restarting"
        ));
        assert!(is_lock_wait("5", ""));
        assert!(is_lock_wait("", "database is locked"));
        assert!(!is_lock_wait(
            "23505",
            "duplicate key value violates unique constraint"
        ));
        assert!(!is_lock_wait("", ""));
    }
}
