//! PostgreSQL 12 or later: its operations, one file per job ([`crate::dialect::traits`]): SQL spelling
//! and sessions here, `catalog.rs`, `locks.rs`, `ddl.rs` (the contract's drop), `citus.rs`
//! (tables spread over nodes), `replica.rs` (a streaming replica's lag, issue 31) and `admin.rs`.

use anyhow::Result;
use std::time::Duration;

use crate::dialect::collation::{Collation, KeyCompare};
use crate::dialect::traits::{Sessions, Spelling};

mod admin;
mod catalog;
mod citus;
mod ddl;
mod locks;
mod replica;
mod zone;

/// PostgreSQL 12 or later.
#[derive(Debug, Clone, Copy)]
pub struct Postgres;

impl Spelling for Postgres {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn quote_part(&self, part: &str) -> String {
        format!("\"{part}\"")
    }

    fn placeholder(&self, n: usize) -> String {
        format!("${n}")
    }

    fn int_cast(&self) -> &'static str {
        "BIGINT"
    }

    fn greatest(&self) -> &'static str {
        "GREATEST"
    }

    /// PostgreSQL reads the index by range, but `auto` keeps to the one-pass form here: Citus
    /// (a PostgreSQL the dialect cannot tell apart at planning time) refuses the probe form's
    /// correlated subqueries over a CTE, and on plain PostgreSQL the two forms measured nearly
    /// even (a whole default-like audit: one-pass 2.8 s, probe 2.6 s; src/stages/audit/form.rs).
    /// `--audit-form probe` still runs it on plain PostgreSQL.
    fn probes_by_range(&self) -> bool {
        false
    }

    fn cte_materialized(&self) -> &'static str {
        "MATERIALIZED"
    }

    /// The declared type as it is (`character varying(64)`, `text`…).
    fn text_key_ddl(&self, declared: &str) -> String {
        declared.to_string()
    }

    fn text_key_hash(&self) -> Result<&'static str> {
        Ok("ABS(CAST(hashtext(CAST({col} AS TEXT)) AS BIGINT))")
    }

    fn seconds_ago(&self, secs: u64) -> String {
        format!("(CURRENT_TIMESTAMP - INTERVAL '{secs} seconds')")
    }

    fn migrations(&self) -> &'static [(&'static str, &'static str)] {
        &[
            (
                "V1__watermarks",
                include_str!("../../../migrations/postgres/V1__watermarks.sql"),
            ),
            (
                "V2__ledger",
                include_str!("../../../migrations/postgres/V2__ledger.sql"),
            ),
            (
                "V3__counter_archive",
                include_str!("../../../migrations/postgres/V3__counter_archive.sql"),
            ),
            (
                "V4__drift_rows",
                include_str!("../../../migrations/postgres/V4__drift_rows.sql"),
            ),
            (
                "V5__provenance",
                include_str!("../../../migrations/postgres/V5__provenance.sql"),
            ),
            (
                "V6__archive_row_index",
                include_str!("../../../migrations/postgres/V6__archive_row_index.sql"),
            ),
        ]
    }

    fn index_name(&self, _schema: Option<&str>, index: &str) -> String {
        self.quote(index)
    }

    fn exact_decimal(&self) -> Option<&'static str> {
        Some("NUMERIC")
    }

    /// Compared as `numeric` (exact for every integer and decimal type; `NaN` and the
    /// infinities fall outside the range).
    fn not_int64(&self) -> &'static str {
        "NOT (CAST({x} AS NUMERIC) = TRUNC(CAST({x} AS NUMERIC)) AND CAST({x} AS NUMERIC) BETWEEN -9223372036854775808 AND 9223372036854775807)"
    }

    fn inspect_integer_fix(&self, table: &str, column: &str) -> String {
        format!(
            "ALTER TABLE {table} ALTER COLUMN {column} TYPE BIGINT USING CAST({column} AS BIGINT);"
        )
    }

    fn sql_parser_dialect(&self) -> &'static dyn sqlparser::dialect::Dialect {
        &sqlparser::dialect::PostgreSqlDialect {}
    }

    /// Keys passed on in `"C"` (byte order; a column in `"C"` as it is). A deterministic collation (every one but an ICU
    /// collation created `deterministic = false`) is equal only on equal bytes, so a column in
    /// one is looked up as it is, the value collated into the column's own collation: the
    /// comparison then uses the column's index (an equality in another collation cannot: a
    /// sequential scan, EXPLAIN on PostgreSQL 15), and a value passed on in `"C"` does not
    /// meet the column's collation as a conflict ("could not determine which collation to
    /// use"). A nondeterministic column is compared in `"C"` on its side (its index does not
    /// serve that comparison).
    /// A `uuid` key is passed on and ordered as its text in `"C"` (byte order: the order of
    /// its lower-case hexadecimal form, the same for every table) and a bound key, text, is
    /// cast to `uuid` to meet the column (which keeps its index for that equality). The
    /// driver tidemark uses cannot decode the `uuid` type itself, and PostgreSQL compares
    /// `uuid` with `text` only after an explicit cast.
    fn uuid_key_compare(&self) -> KeyCompare {
        let text = "CAST({v} AS TEXT) COLLATE \"C\"".to_string();
        KeyCompare {
            out: text.clone(),
            order: text,
            col: "{v}".into(),
            val: "CAST({v} AS uuid)".into(),
        }
    }

    fn key_compare(&self, c: &Collation) -> KeyCompare {
        let bytewise = "{v} COLLATE \"C\"".to_string();
        let in_c = c.sql_name == "\"pg_catalog\".\"C\"";
        KeyCompare {
            out: if in_c { "{v}".into() } else { bytewise.clone() },
            order: if c.exact {
                "{v}".into()
            } else {
                bytewise.clone()
            },
            col: if c.exact { "{v}".into() } else { bytewise },
            val: if c.exact {
                format!("{{v}} COLLATE {}", c.sql_name)
            } else {
                "{v}".into()
            },
        }
    }

    fn bytewise_collation(&self) -> &'static str {
        "COLLATE \"C\""
    }
}

impl Sessions for Postgres {
    fn session_time_zone<'a>(
        &'a self,
        conn: &'a mut sqlx::AnyConnection,
        zone: Option<&'a str>,
    ) -> crate::dialect::types::BoxFuture<'a, Result<()>> {
        zone::apply(conn, zone)
    }

    fn session_setup_sql(&self) -> &'static [&'static str] {
        // tidemark's batch statements are costly enough to cross the JIT thresholds, and
        // compiling each batch took longer than running it (measured at 1M members: a capped
        // audit 127 s with JIT, 8 s without). Servers before 11 have no `jit`: ignored.
        &["SET jit = off"]
    }

    /// A custom setting (`tidemark.session_mark`), session-wide (`set_config(…, false)`): a
    /// pooler in transaction mode hands the server session, mark and all, to its next client.
    fn session_mark_sql(&self, token: &str) -> Option<String> {
        Some(format!(
            "SELECT CAST(pg_backend_pid() AS BIGINT), set_config('tidemark.session_mark', '{token}', false)"
        ))
    }

    fn session_mark_read_sql(&self) -> Option<&'static str> {
        Some(
            "SELECT CAST(pg_backend_pid() AS BIGINT), \
             COALESCE(current_setting('tidemark.session_mark', true), '')",
        )
    }

    fn begin_snapshot_sql(&self) -> &'static [&'static str] {
        &["BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"]
    }

    fn begin_write_sql(&self) -> &'static str {
        "BEGIN"
    }

    fn lock_timeout_sql(&self, timeout: Duration) -> Vec<String> {
        let ms = timeout.as_millis().max(1);
        vec![format!("SET lock_timeout = '{ms}ms'")]
    }

    fn lock_wait_codes(&self) -> &'static [&'static str] {
        // lock_not_available, serialization_failure, deadlock_detected.
        &["55P03", "40001", "40P01"]
    }

    fn lock_wait_messages(&self) -> &'static [&'static str] {
        &["deadlock", "lock timeout"]
    }

    fn session_ended_codes(&self) -> &'static [&'static str] {
        // admin_shutdown (pg_terminate_backend), crash_shutdown, cannot_connect_now.
        &["57P01", "57P02", "57P03"]
    }

    fn transactional_ddl(&self) -> bool {
        true
    }

    fn audit_session(&self) -> &'static [&'static str] {
        &[]
    }

    /// `BEGIN`, then no nested-loop joins for this transaction: the counter rank's joins on
    /// computed ranks (`r_all = k + 1 + q`) make the planner estimate one row for them, and it
    /// then joined the batch's members to the rank by a nested loop, |members| × |ranked| row
    /// pairs (8.1 M for a batch of 4 783 members at 400 000 members: 650 ms of a 690 ms batch,
    /// auto_explain). Every join of the batch statement is an equality join that a hash join
    /// serves in one pass; the timestamp lookups are subplans, which this does not touch.
    fn backfill_write_begin_sql(&self) -> &'static [&'static str] {
        &["BEGIN", "SET LOCAL enable_nestloop = off"]
    }

    fn backfill_plan_drop_sql(&self) -> Option<&'static str> {
        None
    }
}
