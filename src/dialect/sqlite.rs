//! SQLite 3.35 or later (the bundled library).

use anyhow::Result;
use sqlx::{AnyConnection, Row};
use std::time::Duration;

use super::runner_lock::{hostname, process_gone, BoxFuture, LockAttempt, LockKind};
use super::SqlDialect;
use crate::values::{now_ms, text};

/// A lock row whose heartbeat is older than this is stale: its runner is taken to be gone.
const STALE_MS: i64 = 60_000;

/// SQLite 3.35 or later (the bundled library).
#[derive(Debug, Clone, Copy)]
pub struct Sqlite;

impl SqlDialect for Sqlite {
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

    // ---- transactions, locks and catalog ----
    // (runner lock, lock timeouts, isolation, catalog queries, key types)

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

    /// A row in `tidemark_lock` (created by `expand`) with the holder's pid, host and a
    /// heartbeat: a row whose process is gone (same host) or whose heartbeat is older than a
    /// minute is taken over.
    fn try_runner_lock<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        name: &'a str,
    ) -> BoxFuture<'a, Result<LockAttempt>> {
        Box::pin(async move {
            let host = hostname();
            let pid = i64::from(std::process::id());
            let now = now_ms();
            let existing =
                sqlx::query("SELECT pid, host, heartbeat_ms FROM tidemark_lock WHERE name = ?")
                    .bind(name.to_string())
                    .fetch_optional(&mut *conn)
                    .await?;
            if let Some(r) = existing {
                let (hpid, hhost, beat): (i64, String, i64) = (
                    r.try_get(0)?,
                    text(&r, 1)?.unwrap_or_default(),
                    r.try_get(2)?,
                );
                if !process_gone(&hhost, hpid) && now - beat < STALE_MS && hpid != pid {
                    return Ok(LockAttempt::Held(format!(
                        "process {hpid} on {hhost}, last seen {} s ago",
                        (now - beat) / 1000
                    )));
                }
            }
            sqlx::query(
                "INSERT INTO tidemark_lock (name, pid, host, started_ms, heartbeat_ms) VALUES (?, ?, ?, ?, ?) \
                 ON CONFLICT (name) DO UPDATE SET pid = excluded.pid, host = excluded.host, \
                 started_ms = excluded.started_ms, heartbeat_ms = excluded.heartbeat_ms",
            )
            .bind(name.to_string())
            .bind(pid)
            .bind(host)
            .bind(now)
            .bind(now)
            .execute(&mut *conn)
            .await?;
            Ok(LockAttempt::Taken(LockKind::Row))
        })
    }

    fn refresh_runner_lock<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        name: &'a str,
        _kind: LockKind,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            sqlx::query("UPDATE tidemark_lock SET heartbeat_ms = ? WHERE name = ?")
                .bind(now_ms())
                .bind(name.to_string())
                .execute(&mut *conn)
                .await?;
            Ok(())
        })
    }

    fn release_runner_lock<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        name: &'a str,
        _kind: LockKind,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            sqlx::query("DELETE FROM tidemark_lock WHERE name = ? AND pid = ?")
                .bind(name.to_string())
                .bind(i64::from(std::process::id()))
                .execute(&mut *conn)
                .await?;
            Ok(())
        })
    }

    fn runner_lock_held<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        name: &'a str,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let row =
                sqlx::query("SELECT pid, host, heartbeat_ms FROM tidemark_lock WHERE name = ?")
                    .bind(name.to_string())
                    .fetch_optional(&mut *conn)
                    .await?;
            Ok(match row {
                None => false,
                Some(r) => {
                    let (pid, host, beat): (i64, String, i64) = (
                        r.try_get(0)?,
                        text(&r, 1)?.unwrap_or_default(),
                        r.try_get(2)?,
                    );
                    !process_gone(&host, pid) && now_ms() - beat < STALE_MS
                }
            })
        })
    }

    /// `typeof` of the first value that is not an integer or NULL (`text`, `real`, `blob`):
    /// SQLite declares no type for an expression, and a value's own type is what the stages
    /// would read.
    fn expression_type<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        expr: &'a str,
        from: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>>> {
        Box::pin(async move {
            let sql = format!(
                "SELECT typeof(tm_s.v) AS t FROM (SELECT ({expr}) AS v FROM {from}) tm_s \
                 WHERE typeof(tm_s.v) NOT IN ('integer', 'null') LIMIT 1"
            );
            match sqlx::query(&sql).fetch_optional(&mut *conn).await? {
                Some(row) => text(&row, "t"),
                None => Ok(None),
            }
        })
    }

    /// The schema (`main` when none is named) and the table name.
    fn catalog_table_binds(&self, table: &str) -> Vec<Option<String>> {
        let (schema, name) = match table.split_once('.') {
            Some((s, t)) => (s.to_string(), t.to_string()),
            None => ("main".to_string(), table.to_string()),
        };
        vec![Some(schema), Some(name)]
    }

    /// `sqlite_master` of the table's schema (an attached database has its own).
    fn view_count_query(&self, table: &str) -> (String, Vec<Option<String>>) {
        let (master, name) = match table.split_once('.') {
            Some((s, t)) => (
                format!("{}.sqlite_master", <dyn SqlDialect>::quote(self, s)),
                t,
            ),
            None => ("sqlite_master".to_string(), table),
        };
        (
            format!("SELECT COUNT(*) FROM {master} WHERE type = 'view' AND name = ?"),
            vec![Some(name.to_string())],
        )
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

    fn seconds_ago(&self, secs: u64) -> String {
        format!("datetime('now', '-{secs} seconds')")
    }

    fn migrations(&self) -> &'static [(&'static str, &'static str)] {
        &[
            (
                "V1__watermarks",
                include_str!("../../migrations/sqlite/V1__watermarks.sql"),
            ),
            (
                "V2__ledger",
                include_str!("../../migrations/sqlite/V2__ledger.sql"),
            ),
            (
                "V3__counter_archive",
                include_str!("../../migrations/sqlite/V3__counter_archive.sql"),
            ),
            (
                "V4__drift_rows",
                include_str!("../../migrations/sqlite/V4__drift_rows.sql"),
            ),
        ]
    }

    fn transactional_ddl(&self) -> bool {
        true
    }

    /// `"schema"."index"`: SQLite creates an index in the schema its name gives, which must be
    /// its table's.
    fn index_name(&self, schema: Option<&str>, index: &str) -> String {
        match schema {
            Some(schema) => format!(
                "{}.{}",
                <dyn SqlDialect>::quote(self, schema),
                <dyn SqlDialect>::quote(self, index)
            ),
            None => <dyn SqlDialect>::quote(self, index),
        }
    }
    // ---- end transactions, locks and catalog ----

    // ---- ledger, gate and contract ----
    // (RETURNING, DDL plans, statement statistics, the SQLite rebuild)
    fn table_columns_binds(&self, table: &str) -> Vec<Option<String>> {
        match table.split_once('.') {
            Some((schema, name)) => vec![Some(schema.to_string()), Some(name.to_string())],
            None => vec![Some("main".to_string()), Some(table.to_string())],
        }
    }

    fn ddl_lock(&self, _table: &str, lock_timeout: std::time::Duration) -> Vec<String> {
        let ms = lock_timeout.as_millis().max(1);
        vec![
            format!("PRAGMA busy_timeout = {ms}"),
            "BEGIN IMMEDIATE".into(),
        ]
    }

    fn drop_column_by_rebuild(&self) -> bool {
        true
    }

    fn exact_decimal(&self) -> Option<&'static str> {
        None
    }

    fn statement_statistics<'a>(
        &'a self,
        _conn: &'a mut sqlx::AnyConnection,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<&'static str, String>> + Send + 'a>,
    > {
        Box::pin(async { Err("SQLite keeps no statement statistics".to_string()) })
    }
    // ---- end ledger, gate and contract ----

    // ---- stage SQL spellings ----
    // (values the audit and backfill templates need)

    fn audit_session(&self) -> &'static [&'static str] {
        &["PRAGMA temp_store = MEMORY"]
    }

    fn backfill_write_begin_sql(&self) -> &'static [&'static str] {
        &["BEGIN IMMEDIATE"]
    }

    fn backfill_plan_drop_sql(&self) -> Option<&'static str> {
        Some("DROP TABLE IF EXISTS temp.tm_plan")
    }
    // ---- end stage SQL spellings ----

    // ---- demo and generator ----
    // (what the demo and the generator need)

    fn generator_begin(&self) -> &'static str {
        "BEGIN"
    }

    fn demo_begin_write(&self) -> &'static str {
        "BEGIN IMMEDIATE"
    }

    fn demo_watermark_upsert(&self) -> &'static str {
        "INSERT INTO read_watermarks (user_id, conversation_id, last_read_id) VALUES (?, ?, ?) \
             ON CONFLICT (user_id, conversation_id) DO UPDATE SET last_read_id = MAX(last_read_id, excluded.last_read_id)"
    }

    fn demo_database_is_file(&self) -> bool {
        true
    }
    // ---- end demo and generator ----

    // ---- inspect ----
    // (catalog reading for `tidemark inspect`)

    fn inspect_columns_query(&self) -> &'static str {
        "SELECT '', m.name, m.type, p.name, p.type, p.cid + 1 \
         FROM sqlite_master m JOIN pragma_table_info(m.name) p \
         WHERE m.type IN ('table', 'view') AND m.name NOT LIKE 'sqlite\\_%' ESCAPE '\\' \
         ORDER BY 2, 6"
    }

    fn inspect_indexes_query(&self) -> &'static str {
        // A rowid table's INTEGER PRIMARY KEY has no index of its own: table_info's pk is it.
        "SELECT '', m.name, il.name, il.\"unique\", il.partial, ii.seqno + 1, ii.name \
         FROM sqlite_master m \
         JOIN pragma_index_list(m.name) il \
         JOIN pragma_index_info(il.name) ii \
         WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite\\_%' ESCAPE '\\' \
         UNION ALL \
         SELECT '', m.name, 'PRIMARY KEY', 1, 0, p.pk, p.name \
         FROM sqlite_master m JOIN pragma_table_info(m.name) p \
         WHERE m.type = 'table' AND p.pk > 0 AND m.name NOT LIKE 'sqlite\\_%' ESCAPE '\\' \
           AND NOT EXISTS (SELECT 1 FROM pragma_index_list(m.name) l WHERE l.origin = 'pk') \
         ORDER BY 2, 3, 6"
    }

    fn inspect_type_class(&self, declared: &str) -> crate::inspect::TypeClass {
        crate::inspect::TypeClass::of_sqlite_type(declared)
    }

    fn inspect_integer_fix(&self, table: &str, column: &str) -> String {
        // SQLite cannot change a column's type in place: a new column, filled, mapped instead.
        format!(
            "ALTER TABLE {table} ADD COLUMN {c} INTEGER; UPDATE {table} SET {c} = CAST({column} AS INTEGER);  -- then map {c}",
            c = <dyn SqlDialect>::quote(self, &format!("{}_int", column.trim_matches('\"')))
        )
    }
    // ---- end inspect ----

    // ---- predicate parsing ----
    fn sql_parser_dialect(&self) -> &'static dyn sqlparser::dialect::Dialect {
        &sqlparser::dialect::SQLiteDialect {}
    }
    // ---- end predicate parsing ----
}
