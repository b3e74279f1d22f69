//! The session's time zone on MySQL/MariaDB (issue 29 row 2; semantics.md "Backfill",
//! timestamp evidence). sqlx sets `time_zone = '+00:00'` on every connection, so a
//! `TIMESTAMP` (kept in UTC, shown in the session's zone) compared with a `DATETIME` (wall
//! time, no zone) and `CURRENT_TIMESTAMP` (the settle time's clock) were read in UTC, not as the
//! server's own sessions read them. This file puts the session back in `@@global.time_zone`,
//! or in the zone the DBA names with `--time-zone`.

use anyhow::Result;
use sqlx::AnyConnection;

use crate::dialect::types::BoxFuture;
use crate::error::input_error;

/// Sets the session's `time_zone` to `zone` (named by the DBA: a name the server's time zone
/// tables know, `SYSTEM`, or an offset such as `-04:00`) or to `@@global.time_zone`. See
/// [`crate::dialect::Sessions::session_time_zone`].
///
/// Errors (exit 2): the server refuses the named zone (`Unknown or incorrect time zone`: a
/// name needs the time zone tables, `mariadb-tzinfo-to-sql`), with its message.
pub(super) fn apply<'a>(
    conn: &'a mut AnyConnection,
    zone: Option<&'a str>,
) -> BoxFuture<'a, Result<()>> {
    Box::pin(async move {
        let Some(zone) = zone else {
            // The server's own zone: never fails the connection.
            let _ = sqlx::query("SET time_zone = @@global.time_zone")
                .execute(&mut *conn)
                .await;
            return Ok(());
        };
        let value = zone.trim().to_string();
        sqlx::query("SET time_zone = ?")
            .bind(value.clone())
            .execute(&mut *conn)
            .await
            .map_err(|e| {
                input_error(format!(
                    "--time-zone {value:?}: the server does not accept this time zone (a zone name needs the server's time zone tables; an offset such as -04:00 always works): {}",
                    crate::error::describe(&anyhow::Error::from(e))
                ))
            })?;
        Ok(())
    })
}
