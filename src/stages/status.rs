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
    /// The newest audits, newest first (at most 10).
    pub audits: Vec<Entry>,
    /// Between the two newest complete audits that kept their rows (`--store-rows`):
    /// (newer run, older run, rows drifting now that did not before, rows fixed since).
    pub changes: Option<(i64, i64, i64, i64)>,
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
                ledger::recent(conn, "audit", 10, dialect).await?,
            )
        } else {
            (None, Vec::new())
        };
    let stored: Vec<i64> = audits
        .iter()
        .filter(|a| a.status == "done")
        .filter(|a| {
            a.options
                .as_deref()
                .and_then(|o| serde_json::from_str::<serde_json::Value>(o).ok())
                .is_some_and(|o| o["store_rows"] == serde_json::Value::Bool(true))
        })
        .map(|a| a.id)
        .take(2)
        .collect();
    let changes = match stored[..] {
        [newer, older] => {
            let (new, fixed) = ledger::drift_changes(conn, newer, older).await?;
            Some((newer, older, new, fixed))
        }
        _ => None,
    };
    Ok(Status {
        migrations,
        watermarks,
        last_backfill,
        audits,
        changes,
    })
}
