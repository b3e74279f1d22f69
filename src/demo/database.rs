//! The demo's databases: a server database made fresh for each run, the copy for the
//! destructive part, and the repair of its counters from the audit's report.

use anyhow::Result;
use sqlx::{AnyConnection, Executor};
use std::io::Write;
use std::path::Path;

use crate::db::Dsn;
use crate::dialect::Dialect;
use crate::error::input_error;

/// The tables the demo creates (dropped again when the demo runs on its own database twice).
const DEMO_TABLES: &[&str] = &[
    "tidemark_drift_rows",
    "tidemark_counter_archive",
    "tidemark_lock",
    "tidemark_ledger",
    "tidemark_schema_history",
    "read_watermarks",
    "read_receipts",
    "unread_counters",
    "members",
    "messages",
    "tidemark_demo",
];

/// On a server, the demo only runs on an empty database or one a demo made (it has the
/// `tidemark_demo` table); a demo's tables are dropped so the run starts fresh.
pub(super) async fn reset_server_database(
    conn: &mut AnyConnection,
    dialect: Dialect,
) -> Result<()> {
    let is_demo = crate::db::catalog::table_exists(conn, dialect, "tidemark_demo").await?;
    for table in DEMO_TABLES {
        if crate::db::catalog::table_exists(conn, dialect, table).await? {
            if !is_demo {
                return Err(input_error(format!(
                    "the database already has a table {table:?} and was not made by `tidemark demo`: give the demo an empty database"
                )));
            }
            conn.execute(format!("DROP TABLE {}", dialect.quote(table)).as_str())
                .await?;
        }
    }
    Ok(())
}

/// The demo's own copy for the destructive part: a SQLite file copy (`VACUUM INTO`); on a
/// server, the demo database itself (it belongs to the demo).
pub(super) async fn own_copy(
    out: &mut dyn Write,
    conn: &mut AnyConnection,
    dsn: &Dsn,
    dir: &Path,
    stem: &str,
) -> Result<(AnyConnection, Dsn)> {
    if !dsn.dialect.admin().demo_database_is_file() {
        writeln!(
            out,
            "(on a server the demo's database is its own: the contract runs on it)"
        )?;
        return Ok((dsn.connect().await?, dsn.clone()));
    }
    let copy = dir.join(format!("{stem}-copy.db"));
    let _ = std::fs::remove_file(&copy);
    conn.execute(
        format!(
            "VACUUM INTO '{}'",
            copy.display().to_string().replace('\'', "''")
        )
        .as_str(),
    )
    .await?;
    writeln!(out, "copied the demo database to {}", copy.display())?;
    let copy_dsn = Dsn::sqlite_file(&copy, false);
    Ok((copy_dsn.connect().await?, copy_dsn))
}

/// Sets every drifting counter of the report to its recomputed value; returns how many.
pub(super) async fn repair_from_report(conn: &mut AnyConnection, report: &Path) -> Result<u64> {
    let mut reader = csv::Reader::from_path(report)?;
    let mut n = 0;
    for rec in reader.records() {
        let rec = rec?;
        let (conv, user, recomputed) = (&rec[0], &rec[1], &rec[3]);
        let conv: i64 = conv.parse()?;
        let recomputed: i64 = recomputed.parse()?;
        conn.execute(
            format!(
                "UPDATE unread_counters SET unread_count = {recomputed} WHERE conv_id = {conv} AND user_id = '{}'",
                user.replace('\'', "''")
            )
            .as_str(),
        )
        .await?;
        n += 1;
    }
    Ok(n)
}
