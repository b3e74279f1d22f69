//! The statements that drop the counter: the same steps on every engine (take the lock,
//! verify the checksum inside it, drop, commit), spelled by [`crate::dialect::SqlDialect`];
//! SQLite's column drop, which may need the table rebuilt, is in [`super::sqlite_rebuild`].

use anyhow::Result;
use sqlx::AnyConnection;

use super::{ContractOptions, Target};
use crate::dialect::SqlContext;
use crate::values::text;

/// One step of the drop, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// A statement, run as is.
    Sql(String),
    /// Inside the lock: the counter's checksum taken again must equal the archive's.
    Verify,
    /// SQLite rebuild: `PRAGMA foreign_key_check`, which must return no row.
    ForeignKeyCheck(String),
    /// MySQL/MariaDB: `ALGORITHM=INSTANT`, and the default algorithm if the server refuses
    /// INSTANT for this table.
    InstantOrDefault {
        /// The statement with `ALGORITHM=INSTANT`.
        instant: String,
        /// The same without it.
        default: String,
    },
}

impl Step {
    /// The step as printed (statements end with `;`, tidemark's own checks are comments).
    pub fn lines(&self, target: &Target) -> Vec<String> {
        match self {
            Step::Sql(s) => vec![format!("{s};")],
            Step::Verify => vec![format!(
                "-- tidemark: {}.{} must still equal the archive (rows, non-NULL values, sum, sum of squares), else stop",
                target.table, target.column
            )],
            Step::ForeignKeyCheck(s) => vec![format!("{s}; -- must return no row")],
            Step::InstantOrDefault { instant, default } => vec![
                format!("{instant};"),
                format!("-- if the server refuses INSTANT for this table: {default};"),
            ],
        }
    }
}

/// The statements that drop the counter, for one dialect.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// What undoes a failed attempt (ROLLBACK, UNLOCK TABLES, pragmas back on).
    pub on_failure: Vec<String>,
    /// Remarks for the person reading the plan.
    pub notes: Vec<String>,
}

impl Plan {
    /// Every line as printed.
    pub fn lines(&self, target: &Target) -> Vec<String> {
        self.steps.iter().flat_map(|s| s.lines(target)).collect()
    }
}

/// The statements that drop the counter on this dialect.
///
/// Errors (exit 2): on SQLite, a trigger or view that still uses the column (or the table, with
/// `--drop-table`), a counter column that is part of the primary key or that another column's
/// definition uses.
pub async fn plan(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    target: &Target,
    opts: &ContractOptions,
) -> Result<Plan> {
    let d = ctx.dialect;
    if d.drop_column_by_rebuild() {
        return super::sqlite_rebuild::plan(conn, ctx, target, opts.lock_timeout, opts.execute)
            .await;
    }
    let table = d.quote(&target.table);
    let mut notes = Vec::new();
    let drop = if target.drop_table {
        Step::Sql(format!("DROP TABLE {table}"))
    } else {
        let default = format!(
            "ALTER TABLE {table} DROP COLUMN {}",
            d.quote(&target.column)
        );
        notes.extend(
            d.drop_column_note()
                .map(|n| format!("{}.{}: {n}", target.table, target.column)),
        );
        match d.instant_drop_version_query() {
            Some(query) => {
                let row = sqlx::query(query).fetch_one(&mut *conn).await?;
                let version = text(&row, "version")?.unwrap_or_default();
                if instant_drop_supported(&version) {
                    Step::InstantOrDefault {
                        instant: format!("{default}, ALGORITHM=INSTANT"),
                        default,
                    }
                } else {
                    notes.push(format!(
                        "server {version} has no instant DROP COLUMN (MySQL 8.0.29+, MariaDB 10.4+): the default algorithm rebuilds the table"
                    ));
                    Step::Sql(default)
                }
            }
            None => Step::Sql(default),
        }
    };
    let mut steps: Vec<Step> = d
        .ddl_lock(&table, opts.lock_timeout)
        .into_iter()
        .map(Step::Sql)
        .collect();
    steps.push(Step::Verify);
    steps.push(drop);
    steps.push(Step::Sql(d.ddl_commit().into()));
    Ok(Plan {
        steps,
        on_failure: vec![d.ddl_on_failure().into()],
        notes,
    })
}

/// Whether a MySQL/MariaDB version string names a server with instant DROP COLUMN.
pub fn instant_drop_supported(version: &str) -> bool {
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
