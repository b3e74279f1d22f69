//! MySQL's and MariaDB's drop of a counter column or table ([`ColumnDrop`]): under `LOCK TABLES
//! … WRITE` (with the archive readable) and bounded lock waits, the checksum taken again inside
//! the lock, then `ALTER TABLE … DROP COLUMN, ALGORITHM=INSTANT` where the server has it
//! (MySQL 8.0.29+, MariaDB 10.4+; the default algorithm when it refuses INSTANT for this
//! table), and `UNLOCK TABLES`. DDL commits implicitly here: nothing to roll back.

use anyhow::Result;
use sqlx::AnyConnection;
use std::time::Duration;

use super::Mysql;
use crate::dialect::traits::{ColumnDrop, Spelling};
use crate::dialect::types::{BoxFuture, DropPlan, DropStep, DropTarget};
use crate::tables::ARCHIVE_TABLE;
use crate::values::text;

impl ColumnDrop for Mysql {
    fn plan_drop<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        target: &'a DropTarget,
        lock_timeout: Duration,
        _execute: bool,
    ) -> BoxFuture<'a, Result<DropPlan>> {
        Box::pin(async move {
            let table = self.quote(&target.table);
            let secs = lock_timeout.as_secs_f64().ceil().max(1.0) as u64;
            let lock = vec![
                format!("SET SESSION lock_wait_timeout = {secs}"),
                format!("SET SESSION innodb_lock_wait_timeout = {secs}"),
                format!("LOCK TABLES {table} WRITE, {ARCHIVE_TABLE} READ"),
            ];
            if target.drop_table {
                let drop = DropStep::Sql(format!("DROP TABLE {table}"));
                return Ok(DropPlan::locked(
                    lock,
                    drop,
                    "UNLOCK TABLES",
                    "UNLOCK TABLES",
                ));
            }
            let default = format!(
                "ALTER TABLE {table} DROP COLUMN {}",
                self.quote(&target.column)
            );
            let row = sqlx::query("SELECT VERSION() AS version")
                .fetch_one(&mut *conn)
                .await?;
            let version = text(&row, "version")?.unwrap_or_default();
            let mut notes = Vec::new();
            let drop = if instant_drop_supported(&version) {
                DropStep::InstantOrDefault {
                    instant: format!("{default}, ALGORITHM=INSTANT"),
                    default,
                }
            } else {
                notes.push(format!(
                    "server {version} has no instant DROP COLUMN (MySQL 8.0.29+, MariaDB 10.4+): the default algorithm rebuilds the table"
                ));
                DropStep::Sql(default)
            };
            let mut plan = DropPlan::locked(lock, drop, "UNLOCK TABLES", "UNLOCK TABLES");
            plan.notes = notes;
            Ok(plan)
        })
    }

    /// Error 1845 or 1846 (`ALGORITHM=INSTANT is not supported for this operation`).
    fn instant_refused(&self, error: &sqlx::Error) -> bool {
        let db = error.as_database_error();
        db.and_then(|d| d.code())
            .is_some_and(|c| c == "1845" || c == "1846")
            || db
                .map(|d| d.message().to_string())
                .unwrap_or_else(|| error.to_string())
                .contains("ALGORITHM=INSTANT is not supported")
    }
}

/// Whether a MySQL/MariaDB version string names a server with instant DROP COLUMN (MySQL
/// 8.0.29+, "ALTER TABLE Statement"; MariaDB 10.4+, "InnoDB Online DDL Operations with the
/// INSTANT Alter Algorithm").
fn instant_drop_supported(version: &str) -> bool {
    let nums: Vec<u32> = version
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .take(3)
        .map(|s| s.parse().unwrap_or(0))
        .collect();
    let v = (
        nums.first().copied().unwrap_or(0),
        nums.get(1).copied().unwrap_or(0),
        nums.get(2).copied().unwrap_or(0),
    );
    if version.to_ascii_lowercase().contains("mariadb") {
        v >= (10, 4, 0)
    } else {
        v >= (8, 0, 29)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instant_versions() {
        assert!(instant_drop_supported("10.11.19-MariaDB-0+deb12u1"));
        assert!(!instant_drop_supported("10.3.39-MariaDB"));
        assert!(instant_drop_supported("8.0.29"));
        assert!(instant_drop_supported("8.4.3"));
        assert!(!instant_drop_supported("8.0.28-log"));
        assert!(!instant_drop_supported("5.7.44"));
    }
}
