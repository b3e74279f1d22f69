//! PostgreSQL's drop of a counter column or table ([`ColumnDrop`]): in one transaction, `LOCK
//! TABLE … IN SHARE MODE` under a bounded `lock_timeout` (writers wait, readers go on), the
//! checksum taken again inside the lock, then `ALTER TABLE … DROP COLUMN` (or `DROP TABLE`)
//! and `COMMIT`; DDL is transactional, so a failed attempt rolls back whole.

use anyhow::Result;
use sqlx::AnyConnection;
use std::time::Duration;

use super::Postgres;
use crate::dialect::traits::{ColumnDrop, Spelling};
use crate::dialect::types::{BoxFuture, DropPlan, DropStep, DropTarget};

impl ColumnDrop for Postgres {
    /// The DETAIL of a PostgreSQL error (e.g. the view that depends on a column).
    fn error_detail(&self, error: &sqlx::Error) -> Option<String> {
        error
            .as_database_error()?
            .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()?
            .detail()
            .map(str::to_string)
    }

    fn plan_drop<'a>(
        &'a self,
        _conn: &'a mut AnyConnection,
        target: &'a DropTarget,
        lock_timeout: Duration,
        _execute: bool,
    ) -> BoxFuture<'a, Result<DropPlan>> {
        Box::pin(async move {
            let table = self.quote(&target.table);
            let ms = lock_timeout.as_millis().max(1);
            let lock = vec![
                "BEGIN".into(),
                format!("SET LOCAL lock_timeout = '{ms}ms'"),
                format!("LOCK TABLE {table} IN SHARE MODE"),
            ];
            if target.drop_table {
                let drop = DropStep::Sql(format!("DROP TABLE {table}"));
                return Ok(DropPlan::locked(lock, drop, "COMMIT", "ROLLBACK"));
            }
            let drop = DropStep::Sql(format!(
                "ALTER TABLE {table} DROP COLUMN {}",
                self.quote(&target.column)
            ));
            let mut plan = DropPlan::locked(lock, drop, "COMMIT", "ROLLBACK");
            plan.notes.push(format!(
                "{}.{}: PostgreSQL drops any index that includes the column with it; a view or constraint that depends on it makes the DROP fail (nothing is dropped)",
                target.table, target.column
            ));
            Ok(plan)
        })
    }
}
