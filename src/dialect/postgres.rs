//! PostgreSQL 12 or later.

use anyhow::Result;
use sqlx::{AnyConnection, Row};
use std::time::Duration;

use super::runner_lock::{advisory_key, BoxFuture, LockAttempt, LockKind};
use super::SqlDialect;
use crate::values::text;

/// PostgreSQL 12 or later.
#[derive(Debug, Clone, Copy)]
pub struct Postgres;

impl SqlDialect for Postgres {
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

    fn cte_materialized(&self) -> &'static str {
        "MATERIALIZED"
    }

    // ---- transactions, locks and catalog ----
    // (runner lock, lock timeouts, isolation, catalog queries, key types)

    fn session_setup_sql(&self) -> &'static [&'static str] {
        // tidemark's batch statements are costly enough to cross the JIT thresholds, and
        // compiling each batch took longer than running it (measured at 1M members: a capped
        // audit 127 s with JIT, 8 s without). Servers before 11 have no `jit`: ignored.
        &["SET jit = off"]
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

    /// A session advisory lock (`pg_try_advisory_lock`) on the name's [`advisory_key`]; the
    /// holder is named from `pg_locks` and `pg_stat_activity`. The session that takes it is
    /// named `tidemark` (`application_name`), so that a second runner can say who holds it.
    fn try_runner_lock<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        name: &'a str,
    ) -> BoxFuture<'a, Result<LockAttempt>> {
        Box::pin(async move {
            let key = advisory_key(name);
            let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
                .bind(key)
                .fetch_one(&mut *conn)
                .await?;
            if !got {
                let holder = sqlx::query(
                    "SELECT CAST(a.pid AS BIGINT), COALESCE(a.client_addr::text, 'local'), COALESCE(a.application_name, ''), \
                     COALESCE(to_char(a.backend_start, 'YYYY-MM-DD HH24:MI:SS'), '') \
                     FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
                     WHERE l.locktype = 'advisory' AND l.granted \
                       AND ((CAST(l.classid AS BIGINT) << 32) | CAST(l.objid AS BIGINT)) = $1 LIMIT 1",
                )
                .bind(key)
                .fetch_optional(&mut *conn)
                .await
                .ok()
                .flatten()
                .map(|r| {
                    format!(
                        "server process {} from {} ({}), connected since {}",
                        r.try_get::<i64, _>(0).unwrap_or_default(),
                        text(&r, 1).ok().flatten().unwrap_or_default(),
                        text(&r, 2).ok().flatten().unwrap_or_default(),
                        text(&r, 3).ok().flatten().unwrap_or_default()
                    )
                })
                .unwrap_or_else(|| "another session".to_string());
                return Ok(LockAttempt::Held(format!("held by {holder}")));
            }
            // `Executor::execute` with plain text, as `raw_sql` would run it: `raw_sql` inside
            // this boxed `Send` future trips the "Executor is not general enough" limitation.
            sqlx::Executor::execute(&mut *conn, "SET application_name = 'tidemark'").await?;
            Ok(LockAttempt::Taken(LockKind::Session))
        })
    }

    fn release_runner_lock<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        name: &'a str,
        _kind: LockKind,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            sqlx::query("SELECT pg_advisory_unlock($1)")
                .bind(advisory_key(name))
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
            let n: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND granted \
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                 AND ((CAST(classid AS BIGINT) << 32) | CAST(objid AS BIGINT)) = $1",
            )
            .bind(advisory_key(name))
            .fetch_one(&mut *conn)
            .await?;
            Ok(n > 0)
        })
    }

    /// `pg_typeof` of the expression in a zero-row subquery, outer-joined to one row: the
    /// NULL it yields still has the expression's type (`integer`, `text`, `numeric`…).
    fn expression_type<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        expr: &'a str,
        from: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>>> {
        Box::pin(async move {
            let sql = format!(
                "SELECT CAST(pg_typeof(tm_s.v) AS TEXT) AS t FROM (SELECT 1 AS one) tm_one \
                 LEFT JOIN (SELECT ({expr}) AS v FROM {from} AND 1 = 0) tm_s ON TRUE"
            );
            let row = sqlx::query(&sql).fetch_one(&mut *conn).await?;
            Ok(text(&row, "t")?.filter(|t| t != "unknown"))
        })
    }

    /// The quoted table name, resolved by `to_regclass` (which follows the search path).
    fn catalog_table_binds(&self, table: &str) -> Vec<Option<String>> {
        vec![Some(<dyn SqlDialect>::quote(self, table))]
    }

    fn view_count_query(&self, table: &str) -> (String, Vec<Option<String>>) {
        (
            "SELECT COUNT(*) FROM pg_class WHERE oid = to_regclass($1) AND relkind IN ('v', 'm')"
                .to_string(),
            self.catalog_table_binds(table),
        )
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
                include_str!("../../migrations/postgres/V1__watermarks.sql"),
            ),
            (
                "V2__ledger",
                include_str!("../../migrations/postgres/V2__ledger.sql"),
            ),
            (
                "V3__counter_archive",
                include_str!("../../migrations/postgres/V3__counter_archive.sql"),
            ),
            (
                "V4__drift_rows",
                include_str!("../../migrations/postgres/V4__drift_rows.sql"),
            ),
        ]
    }

    fn transactional_ddl(&self) -> bool {
        true
    }

    fn index_name(&self, _schema: Option<&str>, index: &str) -> String {
        <dyn SqlDialect>::quote(self, index)
    }
    fn current_user_sql(&self) -> Option<&'static str> {
        Some("SELECT CAST(current_user AS TEXT)")
    }

    /// The role's name, quoted.
    fn grantee(&self, user: &str) -> String {
        <dyn SqlDialect>::quote(self, user)
    }

    /// PostgreSQL has no ALTER privilege: ALTER TABLE and DROP TABLE need the owner's rights
    /// (`pg_has_role(…, 'USAGE')`: the owner, a member inheriting from the owning role, or a
    /// superuser).
    fn ddl_privilege_probe(&self, table: &str, _drop_table: bool) -> Option<super::DdlProbe> {
        Some(super::DdlProbe::Owner {
            sql: "SELECT CAST(CASE WHEN pg_has_role(current_user, c.relowner, 'USAGE') THEN 1 ELSE 0 END AS BIGINT) AS allowed, \
                  CAST(pg_get_userbyid(c.relowner) AS TEXT) AS owner \
                  FROM pg_class c WHERE c.oid = to_regclass($1)"
                .to_string(),
            binds: self.catalog_table_binds(table),
        })
    }
    // ---- end transactions, locks and catalog ----

    // ---- ledger, gate and contract ----
    // (RETURNING, DDL plans, statement statistics, the SQLite rebuild)
    fn table_columns_binds(&self, table: &str) -> Vec<Option<String>> {
        vec![Some((self as &dyn SqlDialect).quote(table))]
    }

    fn ddl_lock(&self, table: &str, lock_timeout: std::time::Duration) -> Vec<String> {
        let ms = lock_timeout.as_millis().max(1);
        vec![
            "BEGIN".into(),
            format!("SET LOCAL lock_timeout = '{ms}ms'"),
            format!("LOCK TABLE {table} IN SHARE MODE"),
        ]
    }

    fn drop_column_note(&self) -> Option<&'static str> {
        Some("PostgreSQL drops any index that includes the column with it; a view or constraint that depends on it makes the DROP fail (nothing is dropped)")
    }

    fn exact_decimal(&self) -> Option<&'static str> {
        Some("NUMERIC")
    }

    fn statement_statistics<'a>(
        &'a self,
        _conn: &'a mut sqlx::AnyConnection,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<&'static str, String>> + Send + 'a>,
    > {
        Box::pin(async { Ok("pg_stat_statements") })
    }

    fn error_detail(&self, error: &sqlx::Error) -> Option<String> {
        error
            .as_database_error()?
            .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()?
            .detail()
            .map(str::to_string)
    }

    fn statement_statistics_error(&self, source: &str, message: &str) -> String {
        if message.contains("does not exist") {
            "pg_stat_statements is not installed in this database (shared_preload_libraries and CREATE EXTENSION pg_stat_statements)".to_string()
        } else {
            format!("cannot read {source}: {message}")
        }
    }
    // ---- end ledger, gate and contract ----

    // ---- stage SQL spellings ----
    // (values the audit and backfill templates need)

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
    // ---- end stage SQL spellings ----

    // ---- demo and generator ----
    // (what the demo and the generator need)

    fn generator_begin(&self) -> &'static str {
        "BEGIN"
    }

    fn demo_begin_write(&self) -> &'static str {
        "BEGIN"
    }

    fn demo_watermark_upsert(&self) -> &'static str {
        "INSERT INTO read_watermarks (user_id, conversation_id, last_read_id) VALUES ($1, $2, $3) \
             ON CONFLICT (user_id, conversation_id) DO UPDATE SET last_read_id = GREATEST(read_watermarks.last_read_id, EXCLUDED.last_read_id)"
    }

    fn demo_database_is_file(&self) -> bool {
        false
    }
    // ---- end demo and generator ----

    // ---- inspect ----
    // (catalog reading for `tidemark inspect`)

    fn inspect_columns_query(&self) -> &'static str {
        "SELECT CASE WHEN n.nspname = current_schema() THEN '' ELSE n.nspname::text END, \
                c.relname::text, \
                CASE WHEN c.relkind IN ('v', 'm') THEN 'view' ELSE 'table' END, \
                a.attname::text, format_type(a.atttypid, a.atttypmod), CAST(a.attnum AS BIGINT) \
         FROM pg_class c \
         JOIN pg_namespace n ON n.oid = c.relnamespace \
         JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped \
         WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') \
           AND n.nspname NOT IN ('pg_catalog', 'information_schema') \
           AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE 'pg\\_temp%' \
         ORDER BY 1, 2, 6"
    }

    fn inspect_indexes_query(&self) -> &'static str {
        "SELECT CASE WHEN n.nspname = current_schema() THEN '' ELSE n.nspname::text END, \
                t.relname::text, i.relname::text, \
                CAST(CASE WHEN x.indisunique THEN 1 ELSE 0 END AS BIGINT), \
                CAST(CASE WHEN x.indpred IS NULL THEN 0 ELSE 1 END AS BIGINT), \
                CAST(k.ord AS BIGINT), a.attname::text \
         FROM pg_index x \
         JOIN pg_class i ON i.oid = x.indexrelid \
         JOIN pg_class t ON t.oid = x.indrelid \
         JOIN pg_namespace n ON n.oid = t.relnamespace \
         CROSS JOIN LATERAL unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord) \
         LEFT JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum AND k.attnum > 0 \
         WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') \
           AND n.nspname NOT LIKE 'pg\\_toast%' AND k.ord <= x.indnkeyatts \
         ORDER BY 1, 2, 3, 6"
    }

    fn inspect_integer_fix(&self, table: &str, column: &str) -> String {
        format!(
            "ALTER TABLE {table} ALTER COLUMN {column} TYPE BIGINT USING CAST({column} AS BIGINT);"
        )
    }
    // ---- end inspect ----

    // ---- test support ----
    /// `WITH (FORCE)` (PostgreSQL 13 and later) drops it even while connections remain open.
    fn drop_database_sql(&self, quoted: &str) -> Option<String> {
        Some(format!("DROP DATABASE IF EXISTS {quoted} WITH (FORCE)"))
    }

    fn create_database_sql(&self, quoted: &str) -> Option<String> {
        Some(format!("CREATE DATABASE {quoted}"))
    }
    // ---- end test support ----

    // ---- predicate parsing ----
    fn sql_parser_dialect(&self) -> &'static dyn sqlparser::dialect::Dialect {
        &sqlparser::dialect::PostgreSqlDialect {}
    }
    // ---- end predicate parsing ----
}

#[cfg(test)]
mod tests {
    use crate::dialect::Dialect;
    use crate::schema::key_type;

    /// Moved from `schema.rs` (`key_types_keep_the_collation`), the PostgreSQL part.
    #[test]
    fn key_types_keep_the_declared_type() {
        assert_eq!(
            key_type(Dialect::Postgres, "character varying(64)", "x")
                .unwrap()
                .ddl,
            "character varying(64)"
        );
        assert!(key_type(Dialect::Postgres, "uuid", "x").is_err());
    }
}
