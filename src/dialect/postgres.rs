//! PostgreSQL 12 or later.

use super::SqlDialect;

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
    // ---- end stage SQL spellings ----

    // ---- demo and generator ----
    // (what the demo and the generator need)
    // ---- end demo and generator ----
}
