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

    fn demo_watermark_upsert(&self) -> &'static str {
        "INSERT INTO read_watermarks (user_id, conversation_id, last_read_id) VALUES (?, ?, ?) \
             ON CONFLICT (user_id, conversation_id) DO UPDATE SET last_read_id = MAX(last_read_id, excluded.last_read_id)"
    }

    fn demo_database_is_file(&self) -> bool {
        true
    }
}
