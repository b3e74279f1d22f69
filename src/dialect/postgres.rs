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
    // ---- end ledger, gate and contract ----

    // ---- stage SQL spellings ----
    // (values the audit and backfill templates need)

    fn audit_session(&self) -> &'static [&'static str] {
        &[]
    }
    // ---- end stage SQL spellings ----

    // ---- demo and generator ----
    // (what the demo and the generator need)
    // ---- end demo and generator ----
}
