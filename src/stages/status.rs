//! `status`: where each stage stands: applied migrations, watermarks, the last backfill and the
//! last audits. Reads only.

use anyhow::Result;
use sqlx::AnyConnection;

use crate::dialect::Dialect;
use crate::ledger::{self, Entry};
use crate::mapping::Mapping;
use crate::schema;
use crate::stages::expand;

/// What `status` found.
#[derive(Debug, Clone)]
pub struct Status {
    /// Applied migrations, by name.
    pub migrations: Vec<String>,
    /// Rows in the watermark table (None when it does not exist).
    pub watermarks: Option<i64>,
    /// The newest backfill run.
    pub last_backfill: Option<Entry>,
    /// The newest audits, newest first (at most 5).
    pub audits: Vec<Entry>,
}

/// Reads the state of the stages.
pub async fn run(conn: &mut AnyConnection, mapping: &Mapping, dialect: Dialect) -> Result<Status> {
    let migrations = expand::applied(conn, dialect)
        .await?
        .iter()
        .map(|m| m.to_string())
        .collect();
    let watermarks = if schema::table_exists(conn, dialect, &mapping.watermarks.table).await? {
        let sql = format!(
            "SELECT COUNT(*) FROM {}",
            dialect.quote(&mapping.watermarks.table)
        );
        Some(
            sqlx::query_scalar::<_, i64>(&sql)
                .fetch_one(&mut *conn)
                .await?,
        )
    } else {
        None
    };
    let (last_backfill, audits) =
        if schema::table_exists(conn, dialect, ledger::LEDGER_TABLE).await? {
            (
                ledger::recent(conn, "backfill", 1, dialect)
                    .await?
                    .into_iter()
                    .next(),
                ledger::recent(conn, "audit", 5, dialect).await?,
            )
        } else {
            (None, Vec::new())
        };
    Ok(Status {
        migrations,
        watermarks,
        last_backfill,
        audits,
    })
}
