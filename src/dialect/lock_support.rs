//! What the engines' runner locks share: the stable 64-bit key of a lock name, this machine's
//! host name and whether a lock row's process is gone. Each engine's lock itself is in its own
//! folder: a session advisory lock (`postgres/locks.rs`), a named lock or a Galera lock row
//! (`mysql/locks.rs`, `mysql/galera.rs`), a lock row (`sqlite/locks.rs`).

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advisory_keys_are_stable() {
        assert_eq!(advisory_key(""), 0xcbf29ce484222325_u64 as i64);
        assert_eq!(advisory_key("a"), advisory_key("a"));
        assert_ne!(advisory_key("a"), advisory_key("b"));
    }
}
