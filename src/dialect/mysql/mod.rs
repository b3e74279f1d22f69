//! MySQL 8.0 or later and MariaDB 10.6 or later (one server or a Galera cluster: the runner lock is then a lock row, [`galera`]): its operations, one file per job ([`crate::dialect::traits`]): SQL spelling
//! and sessions here, `catalog.rs`, `locks.rs`, `ddl.rs` (the contract's drop), `replica.rs` (a binlog replica's lag, issue
//! 31) and `admin.rs`.

use anyhow::Result;
use std::time::Duration;

use crate::dialect::collation::{Collation, KeyCompare};
use crate::dialect::traits::{Catalog, Sessions, Spelling};

mod admin;
mod catalog;
mod ddl;
pub mod galera;
mod locks;
mod replica;
mod zone;

/// MySQL 8.0 or later and MariaDB 10.6 or later (one server or a Galera cluster: the runner lock is then a lock row, [`galera`]).
#[derive(Debug, Clone, Copy)]
pub struct Mysql;

impl Spelling for Mysql {
    fn name(&self) -> &'static str {
        "mysql"
    }

    fn quote_part(&self, part: &str) -> String {
        format!("`{part}`")
    }

    fn placeholder(&self, _n: usize) -> String {
        "?".to_string()
    }

    fn int_cast(&self) -> &'static str {
        "SIGNED"
    }

    fn greatest(&self) -> &'static str {
        "GREATEST"
    }

    fn cte_materialized(&self) -> &'static str {
        ""
    }

    fn probes_by_range(&self) -> bool {
        false
    }

    /// A CHAR or VARCHAR as declared, with its character set and collation; any other text
    /// type as `VARCHAR(255)` with the same attributes: a TEXT column cannot be part of a
    /// MySQL primary key without a prefix length.
    fn text_key_ddl(&self, declared: &str) -> String {
        let (base, attributes) = self.split_type_attributes(declared);
        let t = base.to_ascii_lowercase();
        if t.starts_with("varchar") || t.starts_with("char") {
            declared.to_string()
        } else {
            format!("VARCHAR(255){attributes}")
        }
    }

    fn text_key_hash(&self) -> Result<&'static str> {
        Ok("CRC32({col})")
    }

    fn time_value(&self, evidence: bool) -> &'static str {
        // Issue 29 row 5: a zero date ('0000-00-00') or one with a zero month or day
        // ('2024-06-00'), which MariaDB keeps where the SQL mode allows it and orders before
        // every real date, is no "read at" time. Messages' own times are compared as they are
        // (their index stays usable).
        if evidence {
            "(CASE WHEN CAST({v} AS CHAR) REGEXP '^[0-9]{4}-(00-|[0-9]{2}-00)' THEN NULL ELSE {v} END)"
        } else {
            "{v}"
        }
    }

    fn seconds_ago(&self, secs: u64) -> String {
        format!("(CURRENT_TIMESTAMP(6) - INTERVAL {secs} SECOND)")
    }

    fn migrations(&self) -> &'static [(&'static str, &'static str)] {
        &[
            (
                "V1__watermarks",
                include_str!("../../../migrations/mysql/V1__watermarks.sql"),
            ),
            (
                "V2__ledger",
                include_str!("../../../migrations/mysql/V2__ledger.sql"),
            ),
            (
                "V3__counter_archive",
                include_str!("../../../migrations/mysql/V3__counter_archive.sql"),
            ),
            (
                "V4__drift_rows",
                include_str!("../../../migrations/mysql/V4__drift_rows.sql"),
            ),
            (
                "V5__provenance",
                include_str!("../../../migrations/mysql/V5__provenance.sql"),
            ),
            (
                "V6__archive_row_index",
                include_str!("../../../migrations/mysql/V6__archive_row_index.sql"),
            ),
        ]
    }

    fn index_name(&self, _schema: Option<&str>, index: &str) -> String {
        self.quote(index)
    }

    fn returning_id(&self) -> Option<&'static str> {
        None
    }

    fn last_insert_id(&self) -> Option<&'static str> {
        Some("SELECT CAST(LAST_INSERT_ID() AS SIGNED)")
    }

    fn exact_decimal(&self) -> Option<&'static str> {
        Some("DECIMAL(65,0)")
    }

    /// Compared as the value is: a `BIGINT UNSIGNED` or a `DECIMAL` above the range compares
    /// as such (`CAST(18446744073709551615 AS SIGNED)` is -1, a `DECIMAL` beyond the range
    /// casts to the nearest bound with a warning, 2.7 casts to 3).
    fn not_int64(&self) -> &'static str {
        "({x} <> FLOOR({x}) OR {x} > 9223372036854775807 OR {x} < -9223372036854775808)"
    }

    fn text_type(&self) -> &'static str {
        "CHAR"
    }

    fn inspect_integer_fix(&self, table: &str, column: &str) -> String {
        format!("ALTER TABLE {table} MODIFY COLUMN {column} BIGINT;  -- keep its NULL / NOT NULL")
    }

    fn sql_parser_dialect(&self) -> &'static dyn sqlparser::dialect::Dialect {
        &sqlparser::dialect::MySqlDialect {}
    }

    /// Keys passed on in `utf8mb4_bin` (converted to utf8mb4 first when the column has another
    /// character set: two `_bin` collations of different sets do not compare; a column in
    /// it already as it is). The column is
    /// looked up as it is, the value converted to its character set and collated in that
    /// set's `_bin` (its own collation when that is already exact): a `_bin` value against a
    /// `_ci` column compares bytes, and MariaDB still reads the column's index for it (a range
    /// or ref access on the primary key, EXPLAIN on MariaDB 10.11), where `col COLLATE …_bin`
    /// on the column side is a full scan. Where a batch's keys are found in order, a `_ci`
    /// column is ordered in its set's `_bin` (case variants are distinct conversations).
    fn key_compare(&self, c: &Collation) -> KeyCompare {
        let cs = if c.charset.is_empty() {
            "utf8mb4"
        } else {
            c.charset.as_str()
        };
        let bin = format!("{cs}_bin");
        KeyCompare {
            // A column already in utf8mb4_bin is passed on as it is: a COLLATE on it, even to
            // its own collation, hides it from the optimizer (a block nested loop join where an
            // eq_ref on the primary key served, EXPLAIN on MariaDB 10.11).
            out: if c.sql_name == "utf8mb4_bin" {
                "{v}".into()
            } else if cs == "utf8mb4" {
                "{v} COLLATE utf8mb4_bin".into()
            } else {
                "CONVERT({v} USING utf8mb4) COLLATE utf8mb4_bin".into()
            },
            order: if c.exact {
                "{v}".into()
            } else {
                format!("{{v}} COLLATE {bin}")
            },
            col: "{v}".into(),
            val: format!(
                "CONVERT({{v}} USING {cs}) COLLATE {}",
                if c.exact { c.sql_name.as_str() } else { &bin }
            ),
        }
    }

    fn bytewise_collation(&self) -> &'static str {
        "utf8mb4_bin"
    }
}

impl Sessions for Mysql {
    fn session_time_zone<'a>(
        &'a self,
        conn: &'a mut sqlx::AnyConnection,
        zone: Option<&'a str>,
    ) -> crate::dialect::types::BoxFuture<'a, Result<()>> {
        zone::apply(conn, zone)
    }

    fn begin_snapshot_sql(&self) -> &'static [&'static str] {
        &[
            "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",
            "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY",
        ]
    }

    fn begin_write_sql(&self) -> &'static str {
        "START TRANSACTION"
    }

    /// `innodb_lock_wait_timeout` (row locks) and `lock_wait_timeout` (metadata locks), in
    /// whole seconds, at least 1.
    fn lock_timeout_sql(&self, timeout: Duration) -> Vec<String> {
        let secs = timeout.as_secs().max(1);
        vec![
            format!("SET SESSION innodb_lock_wait_timeout = {secs}"),
            format!("SET SESSION lock_wait_timeout = {secs}"),
        ]
    }

    fn lock_wait_codes(&self) -> &'static [&'static str] {
        // The driver reports SQLSTATEs, not MySQL's error numbers: 1205 (lock wait timeout)
        // and 1213 (deadlock) are recognised by their messages.
        &[]
    }

    fn lock_wait_messages(&self) -> &'static [&'static str] {
        &["lock wait timeout", "deadlock"]
    }

    fn session_ended_codes(&self) -> &'static [&'static str] {
        // The SQLSTATE of ER_CONNECTION_KILLED / ER_QUERY_INTERRUPTED (KILL), and of a
        // network error the server reports.
        &["70100", "08S01"]
    }

    fn transactional_ddl(&self) -> bool {
        false
    }

    fn audit_session(&self) -> &'static [&'static str] {
        // MariaDB (>= 10.3, in an executable comment MySQL skips) may otherwise compute the
        // per-conversation lowest threshold as a LATERAL DERIVED table once per message.
        &["SET @tidemark_audit = 1 /*M!100300 , SESSION optimizer_switch = 'split_materialized=off' */"]
    }

    fn backfill_write_begin_sql(&self) -> &'static [&'static str] {
        &[
            "SET TRANSACTION ISOLATION LEVEL READ COMMITTED",
            "START TRANSACTION",
        ]
    }

    fn backfill_plan_drop_sql(&self) -> Option<&'static str> {
        Some("DROP TEMPORARY TABLE IF EXISTS tm_plan")
    }
}

/// One server (or a Galera cluster, every node holding every row): no table is spread, so
/// `expand` has nothing to colocate.
impl crate::dialect::traits::Distribution for Mysql {}
