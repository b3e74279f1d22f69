//! MySQL 8 and MariaDB 10.6 or later (one server or a Galera cluster).

use super::SqlDialect;

/// MySQL 8 and MariaDB 10.6 or later (one server or a Galera cluster).
#[derive(Debug, Clone, Copy)]
pub struct Mysql;

impl SqlDialect for Mysql {
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

    // ---- transactions, locks and catalog ----
    // (runner lock, lock timeouts, isolation, catalog queries, key types)
    // ---- end transactions, locks and catalog ----

    // ---- ledger, gate and contract ----
    // (RETURNING, DDL plans, statement statistics, the SQLite rebuild)
    fn returning_id(&self) -> Option<&'static str> {
        None
    }

    fn last_insert_id(&self) -> Option<&'static str> {
        Some("SELECT CAST(LAST_INSERT_ID() AS SIGNED)")
    }

    fn table_columns_binds(&self, table: &str) -> Vec<Option<String>> {
        match table.split_once('.') {
            Some((schema, name)) => vec![Some(schema.to_string()), Some(name.to_string())],
            None => vec![None, Some(table.to_string())],
        }
    }

    fn lock_namespace_query(&self) -> Option<&'static str> {
        Some("SELECT DATABASE() AS name")
    }

    fn ddl_lock(&self, table: &str, lock_timeout: std::time::Duration) -> Vec<String> {
        let secs = lock_timeout.as_secs_f64().ceil().max(1.0) as u64;
        vec![
            format!("SET SESSION lock_wait_timeout = {secs}"),
            format!("SET SESSION innodb_lock_wait_timeout = {secs}"),
            format!("LOCK TABLES {table} WRITE, tidemark_counter_archive READ"),
        ]
    }

    fn ddl_commit(&self) -> &'static str {
        "UNLOCK TABLES"
    }

    fn ddl_on_failure(&self) -> &'static str {
        "UNLOCK TABLES"
    }

    fn instant_drop_version_query(&self) -> Option<&'static str> {
        Some("SELECT VERSION() AS version")
    }

    fn exact_decimal(&self) -> Option<&'static str> {
        Some("DECIMAL(65,0)")
    }

    fn text_type(&self) -> &'static str {
        "CHAR"
    }

    fn statement_statistics<'a>(
        &'a self,
        conn: &'a mut sqlx::AnyConnection,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<&'static str, String>> + Send + 'a>,
    > {
        Box::pin(async move {
            let on: Result<i64, _> =
                sqlx::query_scalar("SELECT CAST(@@performance_schema AS SIGNED)")
                    .fetch_one(&mut *conn)
                    .await;
            match on {
                Ok(0) => return Err("performance_schema is OFF on this server".into()),
                Ok(_) => {}
                Err(e) => {
                    let msg = e
                        .as_database_error()
                        .map(|d| d.message().to_string())
                        .unwrap_or_else(|| e.to_string());
                    return Err(format!("cannot read @@performance_schema: {msg}"));
                }
            }
            let consumer: Result<Option<String>, _> = sqlx::query_scalar(
                "SELECT CONVERT(ENABLED USING utf8mb4) FROM performance_schema.setup_consumers WHERE NAME = 'statements_digest'",
            )
            .fetch_optional(&mut *conn)
            .await;
            if let Ok(Some(enabled)) = consumer {
                if enabled != "YES" {
                    return Err(
                        "the performance_schema consumer statements_digest is disabled".into(),
                    );
                }
            }
            Ok("performance_schema.events_statements_summary_by_digest")
        })
    }
    // ---- end ledger, gate and contract ----

    // ---- stage SQL spellings ----
    // (values the audit and backfill templates need)
    // ---- end stage SQL spellings ----

    // ---- demo and generator ----
    // (what the demo and the generator need)
    // ---- end demo and generator ----
}
