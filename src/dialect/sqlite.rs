//! SQLite 3.35 or later (the bundled library).

use super::SqlDialect;

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
    // ---- end stage SQL spellings ----

    // ---- demo and generator ----
    // (what the demo and the generator need)
    // ---- end demo and generator ----
}
