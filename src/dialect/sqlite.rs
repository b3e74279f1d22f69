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
    // ---- end ledger, gate and contract ----

    // ---- stage SQL spellings ----
    // (values the audit and backfill templates need)

    fn audit_session(&self) -> &'static [&'static str] {
        &["PRAGMA temp_store = MEMORY"]
    }
    // ---- end stage SQL spellings ----

    // ---- demo and generator ----
    // (what the demo and the generator need)
    // ---- end demo and generator ----
}
