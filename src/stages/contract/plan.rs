//! The statements that drop the counter: the engine's own plan
//! ([`crate::dialect::ColumnDrop::plan_drop`]) for the contract's target.

use anyhow::Result;
use sqlx::AnyConnection;

use super::{ContractOptions, Target};
use crate::dialect::{DropPlan, DropTarget, SqlContext};

impl Target {
    /// What the engine needs to know of the target to drop it.
    pub fn drop_target(&self) -> DropTarget {
        DropTarget {
            table: self.table.clone(),
            column: self.column.clone(),
            drop_table: self.drop_table,
        }
    }
}

/// The statements that drop `target` on `ctx`'s engine.
///
/// Errors: as [`crate::dialect::ColumnDrop::plan_drop`] (exit 2 for a SQLite trigger or view
/// that still uses the column, exit 3 for a catalog that cannot be read).
pub async fn plan(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    target: &Target,
    opts: &ContractOptions,
) -> Result<DropPlan> {
    ctx.dialect
        .ddl()
        .plan_drop(conn, &target.drop_target(), opts.lock_timeout, opts.execute)
        .await
}
