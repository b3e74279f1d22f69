//! The legacy chat schema the demo and the generator load (tables `messages`, `members`,
//! `unread_counters`, `read_receipts`), and the mapping that maps it.
//!
//! One text works on PostgreSQL, MySQL/MariaDB and SQLite. The shared scenarios
//! (`shared/spec/scenarios.json`, loaded by the integration tests in
//! `tests/integration/scenario.rs`) use the same schema and mapping; the demo loads its drift
//! into it and `generate` fills it with a synthetic fleet.

use crate::mapping::Shape;

/// The watermark table named by [`mapping_toml`].
pub const WATERMARK_TABLE: &str = "read_watermarks";

/// The legacy schema every scenario is loaded into: `messages`, `members`, `unread_counters`,
/// `read_receipts` and their indexes. The same statements work on PostgreSQL, MySQL/MariaDB
/// and SQLite; run them one by one on an empty database.
pub fn schema_sql() -> Vec<String> {
    [
        "CREATE TABLE messages (\
         conv_id BIGINT NOT NULL, \
         id BIGINT NOT NULL, \
         sender_id VARCHAR(64) NULL, \
         is_deleted INT NOT NULL DEFAULT 0, \
         is_system INT NOT NULL DEFAULT 0, \
         created_at BIGINT NULL, \
         unread_count INT NULL, \
         PRIMARY KEY (conv_id, id))",
        "CREATE INDEX messages_by_sender ON messages (conv_id, sender_id, id)",
        "CREATE TABLE members (\
         conv_id BIGINT NOT NULL, \
         user_id VARCHAR(64) NOT NULL, \
         active INT NOT NULL DEFAULT 1, \
         join_position BIGINT NULL, \
         PRIMARY KEY (conv_id, user_id))",
        "CREATE TABLE unread_counters (\
         conv_id BIGINT NOT NULL, \
         user_id VARCHAR(64) NOT NULL, \
         unread_count INT NULL, \
         PRIMARY KEY (conv_id, user_id))",
        "CREATE TABLE read_receipts (\
         conv_id BIGINT NOT NULL, \
         user_id VARCHAR(64) NOT NULL, \
         message_id BIGINT NOT NULL)",
        "CREATE INDEX read_receipts_by_member ON read_receipts (conv_id, user_id)",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A string as an SQL literal: single quotes, any `'` doubled.
pub fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// The mapping file (TOML) for the schema of [`schema_sql`].
///
/// `shape` per member (counters in `unread_counters`; evidence: read receipts, then the
/// counter) or per message (counter `messages.unread_count`; evidence: read receipts only).
/// `own_message_lower_bound` adds the `own_message` evidence last.
///
/// Panics for shape `read_flags`: this schema keeps counters, not read flags.
pub fn mapping_toml(shape: Shape, own_message_lower_bound: bool) -> String {
    let counter = match shape {
        Shape::PerMember => format!(
            "[counter]\n\
             shape = \"{shape}\"\n\
             table = \"unread_counters\"\n\
             user = \"user_id\"\n\
             conversation = \"conv_id\"\n\
             column = \"unread_count\"\n"
        ),
        Shape::PerMessage => format!(
            "[counter]\n\
             shape = \"{shape}\"\n\
             column = \"unread_count\"\n"
        ),
        Shape::ReadFlags => unreachable!("the scenario schema keeps counters, not read flags"),
    };
    let mut text = String::from(
        "[messages]\n\
         table = \"messages\"\n\
         id = \"id\"\n\
         conversation = \"conv_id\"\n\
         sender = \"sender_id\"\n\
         countable = \"is_deleted = 0 AND is_system = 0\"\n\
         \n\
         [members]\n\
         table = \"members\"\n\
         user = \"user_id\"\n\
         conversation = \"conv_id\"\n\
         active = \"active = 1\"\n\
         join_position = \"join_position\"\n\
         \n",
    );
    text.push_str(&counter);
    text.push_str(
        "\n\
         [[evidence]]\n\
         kind = \"position\"\n\
         table = \"read_receipts\"\n\
         user = \"user_id\"\n\
         conversation = \"conv_id\"\n\
         column = \"message_id\"\n",
    );
    if shape == Shape::PerMember {
        text.push_str("\n[[evidence]]\nkind = \"counter\"\n");
    }
    if own_message_lower_bound {
        text.push_str("\n[[evidence]]\nkind = \"own_message\"\n");
    }
    text.push_str(&format!("\n[watermarks]\ntable = \"{WATERMARK_TABLE}\"\n"));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_has_shape_specific_counter_and_evidence() {
        let a = mapping_toml(Shape::PerMember, false);
        assert!(a.contains("shape = \"per_member\"\ntable = \"unread_counters\""));
        assert!(a.contains("kind = \"counter\""));
        assert!(!a.contains("own_message"));
        let b = mapping_toml(Shape::PerMessage, true);
        assert!(b.contains("[counter]\nshape = \"per_message\"\ncolumn = \"unread_count\"\n\n"));
        assert!(!b.contains("kind = \"counter\""));
        assert!(b.contains("kind = \"own_message\""));
        for text in [a, b] {
            let value: toml::Table = toml::from_str(&text).unwrap();
            assert_eq!(value["watermarks"]["table"].as_str(), Some(WATERMARK_TABLE));
        }
    }
}
