//! What the demo and the tests need of Mysql ([`Admin`]).

use super::Mysql;
use crate::dialect::traits::Admin;

impl Admin for Mysql {
    fn generator_begin(&self) -> &'static str {
        "START TRANSACTION"
    }

    fn demo_begin_write(&self) -> &'static str {
        "BEGIN"
    }

    fn demo_database_is_file(&self) -> bool {
        false
    }

    fn drop_database_sql(&self, quoted: &str) -> Option<String> {
        Some(format!("DROP DATABASE IF EXISTS {quoted}"))
    }

    /// `CHARACTER SET utf8mb4`: the server default may be `latin1`.
    fn create_database_sql(&self, quoted: &str) -> Option<String> {
        Some(format!("CREATE DATABASE {quoted} CHARACTER SET utf8mb4"))
    }

    fn test_server(&self) -> Option<(&'static str, &'static str)> {
        Some((
            "TIDEMARK_TEST_MYSQL_URL",
            "mysql://root@127.0.0.1:3306/test",
        ))
    }
}
