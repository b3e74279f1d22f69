//! SQLite 3.35 or later (the bundled library): its operations, one file per job ([`crate::dialect::traits`]): SQL spelling
//! and sessions here, `catalog.rs`, `locks.rs`, `ddl.rs` (the contract's drop) and `admin.rs`.

use anyhow::Result;
use std::time::Duration;

use crate::dialect::collation::{Collation, KeyCompare};
use crate::dialect::traits::{Sessions, Spelling};

mod admin;
mod catalog;
mod ddl;
mod locks;

/// SQLite 3.35 or later (the bundled library).
#[derive(Debug, Clone, Copy)]
pub struct Sqlite;

impl Spelling for Sqlite {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn quote_part(&self, part: &str) -> String {
        format!("\"{part}\"")
    }

    fn placeholder(&self, _n: usize) -> String {
        "?".to_string()
    }

    fn int_cast(&self) -> &'static str {
        "INTEGER"
    }

    fn greatest(&self) -> &'static str {
        "MAX"
    }

    fn cte_materialized(&self) -> &'static str {
        "MATERIALIZED"
    }

    /// `TEXT`: SQLite's type affinity, whatever the declared length.
    fn text_key_ddl(&self, _declared: &str) -> String {
        "TEXT".into()
    }

    fn text_key_hash(&self) -> Result<&'static str> {
        Err(crate::error::input_error(
            "--sample needs integer conversation keys on SQLite (SQLite has no built-in hash for text keys)",
        ))
    }

    fn time_value(&self, _evidence: bool) -> &'static str {
        // Issue 29 row 3: SQLite keeps times as text (ISO 8601 with or without `T`, `Z` or an
        // offset) or numbers (Unix seconds); as text '2024-06-01T00:00:00Z' sorted after
        // '2024-06-01 00:01:00'. Read as Unix seconds (with milliseconds); a text that does
        // not parse is NULL.
        "(CASE WHEN typeof({v}) IN ('integer', 'real') THEN {v} ELSE unixepoch({v}, 'subsec') END)"
    }

    fn seconds_ago(&self, secs: u64) -> String {
        // Unix seconds, as `time_value` reads a message's time (issue 29 row 3).
        format!("(unixepoch('now', 'subsec') - {secs})")
    }

    fn migrations(&self) -> &'static [(&'static str, &'static str)] {
        &[
            (
                "V1__watermarks",
                include_str!("../../../migrations/sqlite/V1__watermarks.sql"),
            ),
            (
                "V2__ledger",
                include_str!("../../../migrations/sqlite/V2__ledger.sql"),
            ),
            (
                "V3__counter_archive",
                include_str!("../../../migrations/sqlite/V3__counter_archive.sql"),
            ),
            (
                "V4__drift_rows",
                include_str!("../../../migrations/sqlite/V4__drift_rows.sql"),
            ),
            (
                "V5__provenance",
                include_str!("../../../migrations/sqlite/V5__provenance.sql"),
            ),
            (
                "V6__archive_row_index",
                include_str!("../../../migrations/sqlite/V6__archive_row_index.sql"),
            ),
        ]
    }

    /// `"schema"."index"`: SQLite creates an index in the schema its name gives, which must be
    /// its table's.
    fn index_name(&self, schema: Option<&str>, index: &str) -> String {
        match schema {
            Some(schema) => format!("{}.{}", self.quote(schema), self.quote(index)),
            None => self.quote(index),
        }
    }

    fn exact_decimal(&self) -> Option<&'static str> {
        None
    }

    /// By storage class: an integer is one; a REAL only when whole and within the range
    /// (what an INTEGER column keeps of 2.7 or 1e20: `CAST` would truncate or saturate it);
    /// text and blobs never (`CAST('7abc' AS INTEGER)` is 7).
    fn not_int64(&self) -> &'static str {
        "(typeof({x}) <> 'integer' AND NOT (typeof({x}) = 'real' AND {x} = CAST({x} AS INTEGER) AND {x} >= -9223372036854775808.0 AND {x} < 9223372036854775808.0))"
    }

    /// `TOTAL`: SQLite's `SUM` of integers fails on an overflow.
    fn wide_sum(&self) -> &'static str {
        "TOTAL"
    }

    fn inspect_integer_fix(&self, table: &str, column: &str) -> String {
        // SQLite cannot change a column's type in place: a new column, filled, mapped instead.
        format!(
            "ALTER TABLE {table} ADD COLUMN {c} INTEGER; UPDATE {table} SET {c} = CAST({column} AS INTEGER);  -- then map {c}",
            c = self.quote(&format!("{}_int", column.trim_matches('\"')))
        )
    }

    fn sql_parser_dialect(&self) -> &'static dyn sqlparser::dialect::Dialect {
        &sqlparser::dialect::SQLiteDialect {}
    }

    /// Keys passed on in `BINARY` (a `BINARY` column as it is). SQLite compares `x IN (…)` and `x = y` in the collation of
    /// the left column ("Datatypes In SQLite", 7.1), so a column of another collation (`NOCASE`,
    /// `RTRIM`) is compared in `BINARY` on its own side: its index, in its own collation, does
    /// not serve that comparison (an index `(col COLLATE BINARY, …)` does).
    fn key_compare(&self, c: &Collation) -> KeyCompare {
        let own = if c.exact {
            "{v}".to_string()
        } else {
            "{v} COLLATE BINARY".to_string()
        };
        KeyCompare {
            out: own.clone(),
            order: own.clone(),
            col: own,
            val: "{v}".into(),
        }
    }

    fn bytewise_collation(&self) -> &'static str {
        "BINARY"
    }
}

impl Sessions for Sqlite {
    /// SQLite has no session time zone: a named `--time-zone` would change nothing, so it is
    /// refused rather than ignored (the book's "Time zones and zero dates" (docs/src/time-zones.md): text times are read
    /// with their own offset, a time without one as UTC).
    ///
    /// Errors (exit 2): `zone` is given.
    fn session_time_zone<'a>(
        &'a self,
        _conn: &'a mut sqlx::AnyConnection,
        zone: Option<&'a str>,
    ) -> crate::dialect::types::BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            match zone {
                Some(zone) => Err(crate::error::input_error(format!(
                    "--time-zone {zone:?}: SQLite has no session time zone (a text time is read \
                     with its own offset, Z or +hh:mm, and a time without one as UTC): leave \
                     the option out on SQLite"
                ))),
                None => Ok(()),
            }
        })
    }

    /// A deferred transaction: SQLite is serializable by design.
    fn begin_snapshot_sql(&self) -> &'static [&'static str] {
        &["BEGIN"]
    }

    /// `BEGIN IMMEDIATE`: takes the write lock at once rather than failing to upgrade a read
    /// lock later.
    fn begin_write_sql(&self) -> &'static str {
        "BEGIN IMMEDIATE"
    }

    fn lock_timeout_sql(&self, timeout: Duration) -> Vec<String> {
        let ms = timeout.as_millis().max(1);
        vec![format!("PRAGMA busy_timeout = {ms}")]
    }

    fn lock_wait_codes(&self) -> &'static [&'static str] {
        // SQLITE_BUSY, SQLITE_LOCKED and their extended codes BUSY_RECOVERY, LOCKED_SHAREDCACHE.
        &["5", "6", "261", "517"]
    }

    fn lock_wait_messages(&self) -> &'static [&'static str] {
        &["database is locked", "database table is locked"]
    }

    fn transactional_ddl(&self) -> bool {
        true
    }

    fn audit_session(&self) -> &'static [&'static str] {
        &["PRAGMA temp_store = MEMORY"]
    }

    fn backfill_write_begin_sql(&self) -> &'static [&'static str] {
        &["BEGIN IMMEDIATE"]
    }

    fn backfill_plan_drop_sql(&self) -> Option<&'static str> {
        Some("DROP TABLE IF EXISTS temp.tm_plan")
    }

    /// One writer per database file: a backfill's batches on several connections would take
    /// turns at the write lock (each waiting on the others within `busy_timeout`), not run at
    /// once. An audit only reads, but N overlapping read transactions leave the application's
    /// writer no gap to commit in (rollback journal: a commit waits for every reader) or hold
    /// the WAL back from its checkpoint; SQLite serves a single-file application, not the
    /// "one big server" `--jobs` is for. Refused for both stages rather than capped in
    /// silence.
    fn parallel_batches_refused(&self) -> Option<&'static str> {
        Some(
            "SQLite has one writer per database file: batches on several connections would \
             take turns at its lock, not run at once, and overlapping reads hold back the \
             application's commits",
        )
    }
}

/// One file: no table is spread, so `expand` has nothing to colocate.
impl crate::dialect::traits::Distribution for Sqlite {}
