//! What the demo and the tests need of Sqlite ([`Admin`]).

use super::Sqlite;
use crate::dialect::traits::Admin;

impl Admin for Sqlite {
    fn generator_begin(&self) -> &'static str {
        "BEGIN"
    }

    fn demo_begin_write(&self) -> &'static str {
        "BEGIN IMMEDIATE"
    }

    fn demo_database_is_file(&self) -> bool {
        true
    }
}
