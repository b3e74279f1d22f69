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
}
