//! What the demo and the tests need of Postgres ([`Admin`]).

use super::Postgres;
use crate::dialect::traits::Admin;

impl Admin for Postgres {
    fn generator_begin(&self) -> &'static str {
        "BEGIN"
    }

    fn demo_begin_write(&self) -> &'static str {
        "BEGIN"
    }

    fn demo_database_is_file(&self) -> bool {
        false
    }

    /// `WITH (FORCE)` (PostgreSQL 13 and later) drops it even while connections remain open.
    fn drop_database_sql(&self, quoted: &str) -> Option<String> {
        Some(format!("DROP DATABASE IF EXISTS {quoted} WITH (FORCE)"))
    }

    fn create_database_sql(&self, quoted: &str) -> Option<String> {
        Some(format!("CREATE DATABASE {quoted}"))
    }

    fn test_server(&self) -> Option<(&'static str, &'static str)> {
        Some((
            "TIDEMARK_TEST_POSTGRES_URL",
            "postgres://postgres@127.0.0.1:5432/test",
        ))
    }
}
