//! Values as tidemark reads and stores them, on every engine: text columns that may arrive as
//! bytes, and times as milliseconds since the Unix epoch.

use anyhow::Result;
use sqlx::any::AnyRow;
use sqlx::Row;

/// Reads a text column that may be NULL. MySQL/MariaDB send TEXT columns with the BLOB wire
/// type, which sqlx's Any driver decodes only as bytes: those are taken as UTF-8.
///
/// `idx` is a column position or a column name (the alias the query gives it).
///
/// Errors: column `idx` does not exist or is neither text nor bytes.
pub fn text<I>(row: &AnyRow, idx: I) -> Result<Option<String>>
where
    I: sqlx::ColumnIndex<AnyRow> + Copy,
{
    match row.try_get::<Option<String>, _>(idx) {
        Ok(v) => Ok(v),
        Err(_) => Ok(row
            .try_get::<Option<Vec<u8>>, _>(idx)?
            .map(|b| String::from_utf8_lossy(&b).into_owned())),
    }
}

/// Milliseconds since the Unix epoch (0 if the clock is before it): how the ledger, the lock
/// row and the archive store times.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

/// A duration as people read it, to the millisecond (`1s 250ms`, `0s`): how lags and waits
/// are named in messages.
pub fn round_duration(d: std::time::Duration) -> String {
    let ms = std::time::Duration::from_millis(d.as_millis().min(u64::MAX as u128) as u64);
    humantime::format_duration(ms).to_string()
}
