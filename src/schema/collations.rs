//! The key columns' collations (issue 25, "Mixed key collations"): every text column a
//! mapping compares conversation or user keys on, with its collation as the catalog says
//! ([`crate::dialect::Catalog::column_collation`]). When one family of keys is not in one
//! collation (`messages.conv_id` in `en-x-icu`, the other tables in `C.UTF-8`; messages in
//! `utf8mb4_general_ci`, members in `utf8mb4_bin`), a range of keys in one table's order is
//! another set of rows in another's, and an equality can be case-insensitive in one table only:
//! the stages then batch by the keys themselves and compare them byte for byte
//! ([`KeyCollations::apply`], [`crate::dialect::SqlContext::with_key_compare`]), and `inspect`,
//! `plan` and every stage's preflight name the columns ([`KeyCollations::notice`]).

use anyhow::Result;
use sqlx::AnyConnection;

use super::key_families::KeyFamilies;
use crate::dialect::{Collation, Dialect, SqlContext};
use crate::mapping::{Mapping, Shape};

/// Which keys a column holds: columns of one family are compared with each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Conversation keys.
    Conversation,
    /// User keys (a message's sender included).
    User,
}

/// One text key column and its collation.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyColumn {
    /// The table, as the mapping names it.
    pub table: String,
    /// The column.
    pub column: String,
    /// Its family.
    pub family: Family,
    /// Its collation.
    pub collation: Collation,
}

/// The collations of a mapping's text key columns (integer keys have none and are left out).
#[derive(Debug, Clone)]
pub struct KeyCollations {
    /// The engine.
    pub dialect: Dialect,
    /// Every text key column found, in the mapping's order (conversations first).
    pub columns: Vec<KeyColumn>,
    /// The key columns' types (issue 29: [`KeyFamilies`]), read by [`KeyCollations::read`]
    /// (empty from [`KeyCollations::read_columns`]).
    pub families: KeyFamilies,
    /// The preflight's other notices, reported with the collations' (issue 29 row 2: time
    /// columns of different kinds, [`crate::schema::time_kinds`]).
    pub other_notices: Vec<String>,
}

impl KeyCollations {
    /// The key columns of `mapping`, as (table, column, family), each once: the messages'
    /// conversation and sender, the members', the per-member counter's, each evidence's and
    /// its lookup's conversation, `[conversations]` / `[users]` keys and the watermark
    /// table's `conversation_id` and `user_id`.
    pub fn columns_of(mapping: &Mapping) -> Vec<(String, String, Family)> {
        use Family::{Conversation as C, User as U};
        let mut out: Vec<(String, String, Family)> = Vec::new();
        let mut add = |table: &str, column: &str, family: Family| {
            if !out.iter().any(|(t, c, _)| t == table && c == column) {
                out.push((table.to_string(), column.to_string(), family));
            }
        };
        let m = &mapping.messages;
        add(&m.table, &m.conversation, C);
        if let Some(mb) = &mapping.members {
            add(&mb.table, &mb.conversation, C);
        }
        let ctr = &mapping.counter;
        if let (Shape::PerMember, Some(conv)) = (ctr.shape, &ctr.conversation) {
            add(mapping.counter_table(), conv, C);
        }
        for src in mapping.evidence.iter().filter_map(|e| e.source()) {
            if let Some(conv) = &src.conversation {
                add(&src.table, conv, C);
            }
            if let Some(l) = &src.lookup {
                if let Some(conv) = &l.conversation {
                    add(&l.table, conv, C);
                }
            }
        }
        if let Some(k) = &mapping.conversations {
            add(&k.table, &k.key, C);
        }
        add(&mapping.watermarks.table, "conversation_id", C);
        add(&m.table, &m.sender, U);
        if let Some(mb) = &mapping.members {
            add(&mb.table, &mb.user, U);
        }
        if let (Shape::PerMember | Shape::ReadFlags, Some(user)) = (ctr.shape, &ctr.user) {
            add(mapping.counter_table(), user, U);
        }
        for src in mapping.evidence.iter().filter_map(|e| e.source()) {
            add(&src.table, &src.user, U);
        }
        if let Some(k) = &mapping.users {
            add(&k.table, &k.key, U);
        }
        add(&mapping.watermarks.table, "user_id", U);
        out
    }

    /// Reads the collation of each of `columns` (table, column, family); a column that does
    /// not exist (the watermark table before `expand`) or has no collation is left out.
    ///
    /// Errors (exit 3): the catalog cannot be read.
    pub async fn read_columns(
        conn: &mut AnyConnection,
        dialect: Dialect,
        columns: &[(String, String, Family)],
    ) -> Result<KeyCollations> {
        let mut found = Vec::new();
        for (table, column, family) in columns {
            let collation = dialect
                .catalog()
                .column_collation(conn, table, column)
                .await?;
            if let Some(collation) = collation {
                found.push(KeyColumn {
                    table: table.clone(),
                    column: column.clone(),
                    family: *family,
                    collation,
                });
            }
        }
        Ok(KeyCollations {
            dialect,
            columns: found,
            families: KeyFamilies::default(),
            other_notices: Vec::new(),
        })
    }

    /// Reads the collations of `mapping`'s key columns ([`KeyCollations::columns_of`]) and
    /// checks their types ([`KeyFamilies::read`]).
    ///
    /// Errors (exit 2): key columns of one family in different type families, or an unsigned
    /// key above 2^63 − 1 (issue 29). Exit 3: the catalog cannot be read.
    pub async fn read(
        conn: &mut AnyConnection,
        mapping: &Mapping,
        dialect: Dialect,
    ) -> Result<KeyCollations> {
        let columns = Self::columns_of(mapping);
        let words: Vec<(String, String, &'static str)> = columns
            .iter()
            .map(|(t, c, f)| {
                let word = match f {
                    Family::Conversation => "conversation",
                    Family::User => "user",
                };
                (t.clone(), c.clone(), word)
            })
            .collect();
        let families = KeyFamilies::read(conn, mapping, dialect, &words).await?;
        let mut found = Self::read_columns(conn, dialect, &columns).await?;
        found.families = families;
        Ok(found)
    }

    /// Whether some family of keys is held in more than one collation.
    pub fn mixed(&self) -> bool {
        [Family::Conversation, Family::User]
            .iter()
            .any(|f| self.family_mixed(*f))
    }

    fn family_mixed(&self, family: Family) -> bool {
        let mut names = self
            .columns
            .iter()
            .filter(|c| c.family == family)
            .map(|c| &c.collation.sql_name);
        let Some(first) = names.next() else {
            return false;
        };
        names.any(|n| n != first)
    }

    /// The collation of `table.column` as the mapping names them, if it was read.
    pub fn of(&self, table: &str, column: &str) -> Option<&Collation> {
        self.columns
            .iter()
            .find(|c| c.table == table && c.column == column)
            .map(|c| &c.collation)
    }

    /// The notice that names the key columns whose collations differ (each column of a family
    /// held in several collations, with its collation), and what tidemark does about it; None
    /// when every family is in one collation.
    pub fn notice(&self) -> Option<String> {
        if !self.mixed() {
            return None;
        }
        let columns: Vec<String> = self
            .columns
            .iter()
            .filter(|c| self.family_mixed(c.family))
            .map(|c| format!("{}.{} ({})", c.table, c.column, c.collation.describe()))
            .collect();
        Some(format!(
            "the key columns' collations differ: {}; tidemark reads each batch by its \
             conversations' keys and compares keys byte for byte ({}), so every table reads \
             the same conversations and members (the book: docs/src/collations.md, \"Mixed key collations\")",
            columns.join(", "),
            self.dialect.bytewise_collation()
        ))
    }

    /// The notice as a list (empty or one line), for a stage's summary.
    pub fn notices(&self) -> Vec<String> {
        self.notice()
            .into_iter()
            .chain(self.other_notices.iter().cloned())
            .collect()
    }

    /// `ctx` for these collations: unchanged when every family is in one collation; else each
    /// key column of a family in several collations compared as the engine spells its
    /// collation ([`crate::dialect::Spelling::key_compare`]), and, when the conversation keys
    /// are in several, batches of keys rather than ranges.
    ///
    /// Integer key columns of a family that mixes signed and unsigned types
    /// ([`KeyFamilies::casts`], issue 29 row 13) pass their keys on cast to a signed 64-bit
    /// integer (the `out` pattern), so that a union of them is an integer, not a decimal; uuid
    /// key columns are compared as the engine's [`crate::dialect::Spelling::uuid_key_compare`]
    /// says (row 14).
    pub fn apply(&self, ctx: SqlContext, mapping: &Mapping) -> SqlContext {
        if !self.mixed() && !self.families.any() {
            return ctx;
        }
        let dialect = self.dialect;
        let keyed = self.family_mixed(Family::Conversation);
        ctx.with_key_compare(mapping, keyed, |table, column| {
            if let Some(k) = self.families.compare_of(dialect, table, column) {
                return k;
            }
            self.columns
                .iter()
                .find(|c| c.table == table && c.column == column)
                .filter(|c| self.family_mixed(c.family))
                .map(|c| dialect.key_compare(&c.collation))
                .unwrap_or_default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(table: &str, column: &str, family: Family, name: &str) -> KeyColumn {
        KeyColumn {
            table: table.into(),
            column: column.into(),
            family,
            collation: Collation {
                name: name.into(),
                detail: String::new(),
                exact: name.ends_with("_bin"),
                charset: "utf8mb4".into(),
                sql_name: name.into(),
            },
        }
    }

    #[test]
    fn only_mixed_families_change_and_only_conversations_batch_by_keys() {
        let mapping = Mapping::parse(
            "[messages]\ntable = \"messages\"\nid = \"id\"\nconversation = \"conv_id\"\nsender = \"sender_id\"\n\n\
             [counter]\nshape = \"per_member\"\ntable = \"unread_counters\"\nuser = \"user_id\"\nconversation = \"conv_id\"\ncolumn = \"unread_count\"\n\n\
             [[evidence]]\nkind = \"counter\"\n\n[watermarks]\ntable = \"read_watermarks\"\n",
            "test.toml",
        )
        .unwrap();
        let ci = "utf8mb4_general_ci";
        let bin = "utf8mb4_bin";
        let users_mixed = KeyCollations {
            dialect: Dialect::Mysql,
            other_notices: Vec::new(),
            columns: vec![
                column("messages", "conv_id", Family::Conversation, ci),
                column("unread_counters", "conv_id", Family::Conversation, ci),
                column("messages", "sender_id", Family::User, ci),
                column("unread_counters", "user_id", Family::User, bin),
            ],
            families: KeyFamilies::default(),
        };
        let ctx = users_mixed.apply(SqlContext::new(&mapping, Dialect::Mysql), &mapping);
        assert!(!ctx.keyed, "conversations in one collation: ranges");
        assert_eq!(ctx.msg.conv_k, crate::dialect::KeyCompare::default());
        assert_eq!(ctx.msg.sender_k.out, "{v} COLLATE utf8mb4_bin");
        assert_eq!(ctx.ctr.user_k.out, "{v}", "already utf8mb4_bin");
        let mut both = users_mixed.clone();
        both.columns[1] = column("unread_counters", "conv_id", Family::Conversation, bin);
        let ctx = both.apply(SqlContext::new(&mapping, Dialect::Mysql), &mapping);
        assert!(ctx.keyed);
        assert_eq!(
            ctx.msg.conv_k.val,
            "CONVERT({v} USING utf8mb4) COLLATE utf8mb4_bin"
        );
        assert_eq!(ctx.msg.conv_k.order, "{v} COLLATE utf8mb4_bin");
    }

    #[test]
    fn a_family_in_two_collations_is_named_column_by_column() {
        let mut kc = KeyCollations {
            dialect: Dialect::Mysql,
            other_notices: Vec::new(),
            columns: vec![
                column(
                    "messages",
                    "conv_id",
                    Family::Conversation,
                    "utf8mb4_general_ci",
                ),
                column(
                    "members",
                    "conv_id",
                    Family::Conversation,
                    "utf8mb4_general_ci",
                ),
                column("members", "user_id", Family::User, "utf8mb4_bin"),
            ],
            families: KeyFamilies::default(),
        };
        assert!(!kc.mixed(), "one collation per family");
        assert_eq!(kc.notice(), None);
        kc.columns.push(column(
            "members2",
            "conv_id",
            Family::Conversation,
            "utf8mb4_bin",
        ));
        assert!(kc.mixed());
        let notice = kc.notice().unwrap();
        assert!(
            notice.starts_with(
                "the key columns' collations differ: messages.conv_id (utf8mb4_general_ci), \
                 members.conv_id (utf8mb4_general_ci), members2.conv_id (utf8mb4_bin); "
            ),
            "{notice}"
        );
        // The users, in one collation, are not named.
        assert!(!notice.contains("user_id"), "{notice}");
        assert!(notice.contains("(utf8mb4_bin)"), "{notice}");
    }
}
