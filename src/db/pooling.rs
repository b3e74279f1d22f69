//! The shared-session probe (issue 29 row 6): tidemark needs one server session for a whole
//! command (its runner lock, its session settings and the driver's prepared statements live
//! in the session), which a pooler in transaction or statement mode (pgbouncer
//! `pool_mode = transaction`) does not give: it hands the server session to another client
//! after each transaction. Through such a pooler only the first client worked (the next one
//! met `prepared statement "sqlx_s_1" already exists`) and a killed runner's advisory lock
//! stayed on the pooled server session. So every connection is probed once, and a shared
//! session is refused (exit 2) before anything is written, naming the pooling mode and what
//! to use instead: session pooling or a direct URL.
//!
//! The probe, where the dialect has one ([`crate::dialect::traits::Sessions::session_mark_sql`]:
//! PostgreSQL): this connection A marks its server session with a token of its own and reads
//! its server process id; a second connection B then opens a transaction (which holds a
//! server session for B until it ends) and reads its session's process id and mark; A reads
//! its own again while B's transaction is open, and once more after it ended. A session of
//! its own (a direct connection, or session pooling) always shows A the same process id and
//! its token, and B another process and no mark. Anything else (B on A's server process or
//! with any mark, A on another process or without its token) means the server session is
//! shared: a pooler that hands it from client to client. A pooler in transaction mode gives
//! the idle session just released to the next client (pgbouncer's default), so B meets A's.

use anyhow::Result;
use sqlx::{AnyConnection, Connection, Row};

use crate::dialect::Dialect;
use crate::error::input_error;

/// One read of a server session: its process id and its mark (empty when unmarked).
type Seen = (i64, String);

/// Runs `sql` (one row: pid, mark) as a plain-text statement (no prepared statement: a
/// pooler may stand between).
async fn read(conn: &mut AnyConnection, sql: &str) -> Result<Seen> {
    let row = sqlx::raw_sql(sql).fetch_one(&mut *conn).await?;
    let pid: i64 = row.try_get(0)?;
    let mark: Option<String> = row.try_get(1)?;
    Ok((pid, mark.unwrap_or_default()))
}

/// What the probe saw that a session of its own never shows, or None.
fn shared(token: &str, a: &[Seen], b: &Seen) -> Option<String> {
    let pid = a[0].0;
    if b.0 == pid {
        return Some(format!(
            "a second connection was served by the same server process ({pid})"
        ));
    }
    if !b.1.is_empty() {
        return Some(format!(
            "a second connection's server process ({}) carried another client's session setting",
            b.0
        ));
    }
    for (later_pid, mark) in &a[1..] {
        if *later_pid != pid || mark != token {
            return Some(format!(
                "one connection was served by server process {pid}, then by {later_pid}"
            ));
        }
    }
    None
}

/// Whether `dialect` has a probe (then [`refuse_shared_session`] wants a second connection).
pub fn probed(dialect: Dialect) -> bool {
    dialect.sessions().session_mark_read_sql().is_some()
}

/// Refuses a connection `conn` to the database `shown` (the URL as printed) whose server
/// session is shared with other clients (see the module documentation); does nothing for a
/// dialect without a probe. `other` is a second connection of the same URL, opened for the
/// probe and closed by it (an error: the server refused it).
///
/// Errors: exit 2 (input) when the session is shared, naming transaction pooling and what to
/// use instead; exit 3 when the probe's statements fail (a second connection that cannot be
/// opened leaves the probe to this connection's reads).
pub async fn refuse_shared_session(
    dialect: Dialect,
    shown: &str,
    conn: &mut AnyConnection,
    other: Result<AnyConnection>,
) -> Result<()> {
    let sessions = dialect.sessions();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let token = format!("{}-{nanos}", std::process::id());
    let (Some(mark), Some(read_sql)) = (
        sessions.session_mark_sql(&token),
        sessions.session_mark_read_sql(),
    ) else {
        return Ok(());
    };
    let first = read(conn, &mark).await?;
    // A second connection the server or the role's connection limit refuses: the probe goes
    // on with this connection's reads alone (B is then taken to be a session of its own).
    let (b, during) = match other {
        Ok(mut other) => {
            let b = match sqlx::raw_sql("BEGIN").execute(&mut other).await {
                Ok(_) => read(&mut other, read_sql).await,
                Err(e) => Err(e.into()),
            };
            let during = read(conn, read_sql).await;
            let _ = sqlx::raw_sql("COMMIT").execute(&mut other).await;
            let _ = other.close().await;
            (b?, during?)
        }
        Err(_) => ((-1, String::new()), read(conn, read_sql).await?),
    };
    let after = read(conn, read_sql).await?;
    let first = (first.0, token.clone());
    match shared(&token, &[first, during, after], &b) {
        None => Ok(()),
        Some(seen) => Err(input_error(format!(
            "{shown} reaches the server through a pooler that shares one server session among \
             clients (transaction or statement pooling, e.g. pgbouncer pool_mode = transaction): \
             {seen}. tidemark needs one server session for a whole command (its runner lock, \
             session settings and prepared statements live there): use a direct URL to the \
             server, or a session-pooling one (pgbouncer pool_mode = session); nothing was \
             written (the book: docs/src/poolers.md, \"Poolers\")"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(pid: i64, mark: &str) -> Seen {
        (pid, mark.to_string())
    }

    #[test]
    fn own_session_is_not_shared() {
        let a = [s(10, "t"), s(10, "t"), s(10, "t")];
        assert_eq!(shared("t", &a, &s(11, "")), None);
    }

    #[test]
    fn each_sign_of_sharing_is_found() {
        let a = [s(10, "t"), s(10, "t"), s(10, "t")];
        assert!(shared("t", &a, &s(10, "t")).is_some());
        assert!(shared("t", &a, &s(11, "x")).is_some());
        let moved = [s(10, "t"), s(12, ""), s(10, "t")];
        assert!(shared("t", &moved, &s(11, "")).is_some());
        let lost = [s(10, "t"), s(10, "t"), s(10, "")];
        assert!(shared("t", &lost, &s(11, "")).is_some());
    }
}
