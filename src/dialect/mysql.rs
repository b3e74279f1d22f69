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
    // ---- end ledger, gate and contract ----

    // ---- stage SQL spellings ----
    // (values the audit and backfill templates need)

    fn audit_session(&self) -> &'static [&'static str] {
        // MariaDB (>= 10.3, in an executable comment MySQL skips) may otherwise compute the
        // per-conversation lowest threshold as a LATERAL DERIVED table once per message.
        &["SET @tidemark_audit = 1 /*M!100300 , SESSION optimizer_switch = 'split_materialized=off' */"]
    }
    // ---- end stage SQL spellings ----

    // ---- demo and generator ----
    // (what the demo and the generator need)
    // ---- end demo and generator ----
}
