//! Transactions as the stages open them: a consistent read snapshot per batch and short write
//! transactions. The statements that open them are the dialect's ([`crate::dialect::Sessions::begin_snapshot_sql`]
//! and [`crate::dialect::Sessions::begin_write_sql`]).

use anyhow::Result;
use sqlx::AnyConnection;

use crate::dialect::Dialect;

/// Opens a read transaction whose statements all see one consistent snapshot: REPEATABLE READ
/// on PostgreSQL and MySQL/MariaDB (seed 000 §2: a message that arrives during the batch is
/// never marked read by it), a deferred transaction on SQLite (serializable by design).
///
/// Errors (exit 3): the database refuses to open the transaction.
pub async fn begin_snapshot(conn: &mut AnyConnection, dialect: Dialect) -> Result<()> {
    for sql in dialect.sessions().begin_snapshot_sql() {
        sqlx::raw_sql(sql).execute(&mut *conn).await?;
    }
    Ok(())
}

/// Opens a short write transaction (SQLite: `BEGIN IMMEDIATE`, taking the write lock at once
/// rather than failing to upgrade a read lock later).
///
/// Errors (exit 3): the database refuses, e.g. a lock wait that gave up.
pub async fn begin_write(conn: &mut AnyConnection, dialect: Dialect) -> Result<()> {
    sqlx::raw_sql(dialect.sessions().begin_write_sql())
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Commits the open transaction. A COMMIT that fails (SQLite answers BUSY and leaves the
/// transaction open) is rolled back, so a retry starts clean.
///
/// Errors (exit 3): the commit failed (the transaction was rolled back).
pub async fn commit(conn: &mut AnyConnection) -> Result<()> {
    if let Err(e) = sqlx::raw_sql("COMMIT").execute(&mut *conn).await {
        rollback(conn).await;
        return Err(e.into());
    }
    Ok(())
}

/// Rolls back the open transaction, ignoring a failure (the connection may be gone).
pub async fn rollback(conn: &mut AnyConnection) {
    let _ = sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await;
}
