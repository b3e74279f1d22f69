//! The mapping file (`tidemark.toml`): which legacy tables and columns hold the messages, the
//! members, the stored counter and the read evidence (`shared/spec/interface.md`, "The mapping
//! file").
//!
//! Every identifier is validated here and quoted later by the dialect; predicates
//! (`countable`, `legacy_countable`, `active`, an evidence `filter`) are SQL the DBA writes and
//! owns, checked here for statement separators and comments and later parsed in the dialect's
//! grammar ([`Mapping::check_predicates`]). A file that does not parse, has an unknown key or an
//! invalid identifier is reported as `file:line:col: what is wrong` (exit 2).
//!
//! [`parse`] reads the TOML and builds a [`Mapping`]; [`validate`] holds the identifier and
//! predicate rules and the checks between sections (shape, evidence kinds, the evidence forms:
//! `filter`, `lookup`, a timestamp keyed by the user alone, `[members] join_time`).

use serde::Deserialize;
use std::path::Path;

use crate::error::input_error;

#[cfg(test)]
mod evidence_forms_tests;
mod parse;
mod policy;
mod predicates;
mod rows;
mod validate;

pub use parse::line_col;
pub use policy::EvidencePolicy;
pub use predicates::{parse_predicate, PredicateSite};
pub use rows::{Combine, ContractTargets, DropColumn, DropKind, KeyedTable, RawContract, RowRefs};
pub use validate::{check_identifier, check_predicate};

/// A parsed and validated mapping.
#[derive(Debug, Clone)]
pub struct Mapping {
    /// The messages table: positions, conversations, senders.
    pub messages: Messages,
    /// Membership (optional): active flag and join positions.
    pub members: Option<Members>,
    /// The legacy counter that the contract stage drops.
    pub counter: Counter,
    /// Read evidence, best first.
    pub evidence: Vec<Evidence>,
    /// The watermark table that `expand` creates.
    pub watermarks: Watermarks,
    /// `[backfill] policy`: how the backfill chooses among evidence values.
    pub policy: EvidencePolicy,
    /// `[conversations]` (optional): the conversation row predicates read as `conv.`.
    pub conversations: Option<KeyedTable>,
    /// `[users]` (optional): the user row predicates read as `usr.`.
    pub users: Option<KeyedTable>,
    /// `[contract]` (optional): what the contract drops; without it, `[counter] column`.
    pub contract: Option<RawContract>,
    /// SHA-256 (hex) of the normalised mapping: what the ledger keys audits and checkpoints by.
    pub fingerprint: String,
    /// The SQL predicates with where each was written, for
    /// [`Mapping::check_predicates`] (not part of the fingerprint).
    pub predicates: Vec<PredicateSite>,
    /// `origin:line:col` of each key's value as written, by dotted key (`messages.id`,
    /// `evidence[2].column`, `contract.columns`), for [`Mapping::located`] (not part of the
    /// fingerprint).
    pub locations: std::collections::BTreeMap<String, String>,
}

/// `[messages]`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Messages {
    /// Table, optionally `schema.table`.
    pub table: String,
    /// The position column: an integer increasing within a conversation.
    pub id: String,
    /// The conversation key column.
    pub conversation: String,
    /// The sender's user key column.
    pub sender: String,
    /// Creation time column, needed by `timestamp` evidence.
    pub created_at: Option<String>,
    /// SQL predicate on a messages row: what counts as unread now (default: every message).
    pub countable: Option<String>,
    /// SQL predicate: what the legacy counter counted (default: every message).
    pub legacy_countable: Option<String>,
}

/// `[members]`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Members {
    /// Table, optionally `schema.table`.
    pub table: String,
    /// User key column.
    pub user: String,
    /// Conversation key column.
    pub conversation: String,
    /// SQL predicate on a members row: the member is still in the conversation.
    pub active: Option<String>,
    /// Column: positions at or below it are not the member's.
    pub join_position: Option<String>,
    /// Column: the time the member joined; the join position is the highest message position
    /// created at or before it (0 when none), as for [`Members::join_position`]. Exclusive with
    /// `join_position`; needs `messages.created_at`. Left out of the fingerprint when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join_time: Option<String>,
}

/// The legacy counter's shape (`shared/spec/semantics.md`, "Legacy shapes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// Shape A (seed 000): one counter per (user, conversation).
    PerMember,
    /// Shape B (seed 003): one counter per message, how many members have not read it.
    PerMessage,
}

/// `[counter]`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Counter {
    /// per_member or per_message.
    pub shape: Shape,
    /// Table holding the counter; for per_message, the messages table (the default).
    pub table: Option<String>,
    /// User key column (per_member).
    pub user: Option<String>,
    /// Conversation key column (per_member).
    pub conversation: Option<String>,
    /// The counter column that `contract` drops (without a `[contract]` section); empty when
    /// the mapping gives `value` instead ([`Counter::stored_column`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub column: String,
    /// An SQL expression (integer) over the counter row `this`, the conversation row `conv`
    /// and the user row `usr`: the stored unread number (issue 12). Excludes `column`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// An SQL predicate over the counter row `this` (and `conv`, `usr`): which counter rows
    /// count (default: every row).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<String>,
    /// What several rows per member mean: `single` (the default: bad input) or `sum`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub combine: Option<Combine>,
}

/// An evidence kind (`shared/spec/semantics.md`, "Backfill").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EvidenceKind {
    /// A read position column or a receipts table (maximum per member).
    Position,
    /// A "last read at" time: the highest position created at or before it.
    Timestamp,
    /// The stored counter itself (per_member only).
    Counter,
    /// Lower bound: the member's own newest message.
    OwnMessage,
}

impl EvidenceKind {
    /// The name recorded as a watermark's provenance (`watermark_source` in the report).
    pub fn as_str(self) -> &'static str {
        match self {
            EvidenceKind::Position => "position",
            EvidenceKind::Timestamp => "timestamp",
            EvidenceKind::Counter => "counter",
            EvidenceKind::OwnMessage => "own_message",
        }
    }
}

/// One `[[evidence]]` entry: its kind, with the columns that kind reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Evidence {
    /// A read position column or a receipts table (maximum per member).
    Position(EvidenceSource),
    /// A "last read at" time column: the highest position created at or before it.
    Timestamp(EvidenceSource),
    /// The stored counter itself (per_member only); reads `[counter]`.
    Counter,
    /// Lower bound: the member's own newest message; reads the `[messages]` table.
    OwnMessage,
}

/// The table and columns a `position` or `timestamp` evidence reads (`table`, `user` and
/// `column` always; `conversation` except for a timestamp keyed by the user alone), with the
/// optional row filter and position lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvidenceSource {
    /// Table, optionally `schema.table`.
    pub table: String,
    /// User key column.
    pub user: String,
    /// Conversation key column. `None` only for `timestamp` evidence keyed by the user alone
    /// (e.g. a users table's "mark all as read" time): its time applies in each of the user's
    /// conversations.
    pub conversation: Option<String>,
    /// Position column (`position`), time column (`timestamp`), or, with a [`Lookup`], the
    /// column holding the key the lookup resolves (e.g. an event id).
    pub column: String,
    /// `filter`: an SQL predicate over the evidence row (named `this`); rows where it is not
    /// true are not evidence (e.g. only receipts of type `m.read`).
    pub filter: Option<String>,
    /// `lookup` (`position` only): `column` holds a key resolved to a position through
    /// another table.
    pub lookup: Option<Lookup>,
}

/// `lookup = { table = "events", key = "event_id", position = "stream_ordering" }` on a
/// `position` evidence: the evidence column's value is matched against `table.key`, and the
/// matching row's `position` is the read position (a key that matches no row is no evidence;
/// the key should be unique in `table`: with several matches the highest position counts).
/// With `conversation` (a column of `table`), only a row of the evidence row's conversation
/// matches.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Lookup {
    /// The table to look the key up in, optionally `schema.table`.
    pub table: String,
    /// The column of `table` the evidence column's value is matched against.
    pub key: String,
    /// The column of `table` holding the position (an integer, as `messages.id`).
    pub position: String,
    /// Optional: the column of `table` holding the conversation key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<String>,
}

impl Evidence {
    /// The kind of this evidence.
    pub fn kind(&self) -> EvidenceKind {
        match self {
            Evidence::Position(_) => EvidenceKind::Position,
            Evidence::Timestamp(_) => EvidenceKind::Timestamp,
            Evidence::Counter => EvidenceKind::Counter,
            Evidence::OwnMessage => EvidenceKind::OwnMessage,
        }
    }

    /// The table and columns read (`position` and `timestamp`), or None (`counter`,
    /// `own_message`).
    pub fn source(&self) -> Option<&EvidenceSource> {
        match self {
            Evidence::Position(s) | Evidence::Timestamp(s) => Some(s),
            Evidence::Counter | Evidence::OwnMessage => None,
        }
    }
}

/// `[watermarks]`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Watermarks {
    /// The watermark table's name, optionally `schema.table`.
    pub table: String,
}

impl Mapping {
    /// Reads and validates a mapping file.
    ///
    /// Errors (exit 2): the file is missing or unreadable, is not TOML, has an unknown or
    /// missing key, an invalid identifier, a predicate with `;` or a comment, or an evidence
    /// list that the shape cannot use. The message starts with `file:line:col:`.
    pub fn load(path: &Path) -> anyhow::Result<Mapping> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            input_error(format!(
                "{}: cannot read the mapping file: {e}",
                path.display()
            ))
        })?;
        Mapping::parse(&text, &path.display().to_string())
    }

    /// A mapping key as the database checks name it: `origin:line:col: key` (e.g.
    /// `tidemark.toml:12:10: evidence[2].column`), at the value's line and column in the file;
    /// a key inside an inline table (`evidence[1].lookup.position`) is placed at the table's
    /// key; just `key` when the file does not have it.
    pub fn located(&self, key: &str) -> String {
        let mut k = key;
        loop {
            if let Some(at) = self.locations.get(k) {
                return format!("{at}: {key}");
            }
            match k.rfind('.') {
                Some(dot) if k[..dot].contains('.') => k = &k[..dot],
                _ => return key.to_string(),
            }
        }
    }

    /// The table holding the counter (for per_message: the messages table).
    pub fn counter_table(&self) -> &str {
        self.counter
            .table
            .as_deref()
            .unwrap_or(&self.messages.table)
    }
}

/// Lower-case hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[messages]
table = "messages"
id = "id"
conversation = "conv_id"
sender = "sender_id"
countable = "is_deleted = 0"

[members]
table = "members"
user = "user_id"
conversation = "conv_id"
active = "active = 1"

[counter]
shape = "per_member"
table = "unread_counters"
user = "user_id"
conversation = "conv_id"
column = "unread_count"

[[evidence]]
kind = "position"
table = "read_receipts"
user = "user_id"
conversation = "conv_id"
column = "message_id"

[[evidence]]
kind = "counter"

[watermarks]
table = "read_watermarks"
"#;

    fn err(text: &str) -> String {
        Mapping::parse(text, "t.toml").unwrap_err().to_string()
    }

    #[test]
    fn parses_the_documented_shape() {
        let m = Mapping::parse(GOOD, "t.toml").unwrap();
        assert_eq!(m.counter.shape, Shape::PerMember);
        assert_eq!(m.evidence.len(), 2);
        assert_eq!(m.evidence[1].kind(), EvidenceKind::Counter);
        assert_eq!(m.fingerprint.len(), 64);
        assert_eq!(m.counter_table(), "unread_counters");
    }

    #[test]
    fn fingerprint_ignores_formatting_but_not_content() {
        let a = Mapping::parse(GOOD, "a").unwrap();
        let b = Mapping::parse(
            &GOOD.replace("table = \"messages\"", "table   =   \"messages\"  # c"),
            "b",
        )
        .unwrap();
        let c = Mapping::parse(&GOOD.replace("is_deleted = 0", "is_deleted = 1"), "c").unwrap();
        assert_eq!(a.fingerprint, b.fingerprint);
        assert_ne!(a.fingerprint, c.fingerprint);
    }

    #[test]
    fn unknown_key_is_named_with_its_line() {
        let e = err(&GOOD.replace(
            "sender = \"sender_id\"",
            "sender = \"sender_id\"\nsendr = \"x\"",
        ));
        assert!(e.starts_with("t.toml:7:1: [messages]"), "{e}");
        assert!(e.contains("sendr"), "{e}");
    }

    #[test]
    fn bad_identifier_points_at_its_value() {
        let e = err(&GOOD.replace(
            "conversation = \"conv_id\"\nsender",
            "conversation = \"conv id; DROP\"\nsender",
        ));
        assert!(e.starts_with("t.toml:5:16: messages.conversation"), "{e}");
    }

    #[test]
    fn toml_syntax_error_has_line_and_column() {
        let e = err("[messages]\ntable = \n");
        assert!(e.starts_with("t.toml:2:"), "{e}");
    }

    #[test]
    fn predicates_are_single_expressions() {
        assert!(check_predicate("deleted_at IS NULL AND kind <> 'system'").is_ok());
        assert!(check_predicate("kind <> ';'").is_ok());
        assert!(check_predicate("1=1; DROP TABLE x").is_err());
        assert!(check_predicate("a = 1 -- hi").is_err());
        assert!(check_predicate("(a = 1").is_err());
        let e = err(&GOOD.replace("is_deleted = 0", "is_deleted = 0; DELETE FROM messages"));
        assert!(e.contains("messages.countable"), "{e}");
    }

    #[test]
    fn per_message_needs_position_evidence() {
        let text = GOOD
            .replace("shape = \"per_member\"\ntable = \"unread_counters\"\nuser = \"user_id\"\nconversation = \"conv_id\"\n", "shape = \"per_message\"\n")
            .replace("[[evidence]]\nkind = \"counter\"\n", "");
        assert!(Mapping::parse(&text, "t").is_ok());
        let no_position = text.replace("kind = \"position\"", "kind = \"own_message\"")
            .replace("table = \"read_receipts\"\nuser = \"user_id\"\nconversation = \"conv_id\"\ncolumn = \"message_id\"\n", "");
        assert!(
            err(&no_position).contains("no counter to derive"),
            "{}",
            err(&no_position)
        );
    }

    #[test]
    fn identifiers() {
        assert!(check_identifier("public.messages", true).is_ok());
        assert!(check_identifier("a.b.c", true).is_err());
        assert!(check_identifier("public.messages", false).is_err());
        assert!(check_identifier("1abc", false).is_err());
        assert!(check_identifier("na`me", false).is_err());
    }

    #[test]
    fn fingerprints_are_stable() {
        // Computed before `Evidence` became an enum: the ledger keys audits and checkpoints by
        // these, so the normalised JSON must not change.
        let pm = GOOD
            .replace("shape = \"per_member\"\ntable = \"unread_counters\"\nuser = \"user_id\"\nconversation = \"conv_id\"\n", "shape = \"per_message\"\n")
            .replace("[[evidence]]\nkind = \"counter\"\n", "");
        let demo =
            crate::legacy_schema::mapping_toml(crate::legacy_schema::SHAPE_PER_MEMBER, false);
        for (text, want) in [
            (
                GOOD.to_string(),
                "d2351c7bf43906769143bd1185dcc4ef3fbb13921b1dd649f02dc69b33d15ea0",
            ),
            (
                pm,
                "8cf1f9c3e0c0d8a9a12d89d263ffa7cb1912317235a062792abcc8cf5e7d151e",
            ),
            (
                demo,
                "f79fc83451cc2e4ad6cda254c93d17ddaf94c737e3c6a03dffd67c217ad7bb0a",
            ),
        ] {
            assert_eq!(Mapping::parse(&text, "t").unwrap().fingerprint, want);
        }
    }

    #[test]
    fn evidence_is_typed_by_kind() {
        let m = Mapping::parse(GOOD, "t.toml").unwrap();
        let source = m.evidence[0].source().unwrap();
        assert_eq!(m.evidence[0].kind(), EvidenceKind::Position);
        assert_eq!(
            (source.table.as_str(), source.column.as_str()),
            ("read_receipts", "message_id")
        );
        assert_eq!(m.evidence[1], Evidence::Counter);
        assert!(m.evidence[1].source().is_none());
    }

    #[test]
    fn a_bad_value_is_reported_at_its_key_line() {
        // `id` is on line 4; the section header is line 2.
        let e = err(&GOOD.replace("id = \"id\"", "id = 5"));
        assert!(e.starts_with("t.toml:4:"), "{e}");
        let e = err(&GOOD.replace("kind = \"counter\"", "kind = \"countr\""));
        assert!(e.starts_with("t.toml:30:8: [[evidence]]"), "{e}");
    }

    /// GOOD with the counter given as an expression over two tables and a `[contract]`.
    fn expression_form(value: &str, contract: &str) -> String {
        GOOD.replace(
            "column = \"unread_count\"\n",
            &format!("value = \"{value}\"\n\n[conversations]\ntable = \"conversations\"\nkey = \"conv_id\"\n\n{contract}\n"),
        )
    }

    #[test]
    fn counter_value_and_contract_targets() {
        let text = expression_form(
            "conv.total - this.seen",
            "[contract]\ndrop = \"columns\"\ncolumns = [\"conversations.total\", \"unread_counters.seen\"]",
        );
        let m = Mapping::parse(&text, "t.toml").unwrap();
        assert_eq!(m.counter.stored_column(), None);
        assert!(m.counter_is_expression());
        assert_eq!(
            m.contract_targets(),
            ContractTargets::Columns(vec![
                DropColumn {
                    table: "conversations".into(),
                    column: "total".into()
                },
                DropColumn {
                    table: "unread_counters".into(),
                    column: "seen".into()
                },
            ])
        );
        let legacy = Mapping::parse(GOOD, "t.toml").unwrap();
        assert_eq!(
            legacy.contract_targets(),
            ContractTargets::Columns(vec![DropColumn {
                table: "unread_counters".into(),
                column: "unread_count".into()
            }])
        );
        assert_ne!(m.fingerprint, legacy.fingerprint);
        // value without [contract]; value with column; a target on no mapped table; usr
        // without [users]; conv in a messages predicate without [conversations].
        let e = err(&GOOD.replace("column = \"unread_count\"", "value = \"this.a\""));
        assert!(
            e.contains("counter.value needs a [contract] section"),
            "{e}"
        );
        assert!(e.starts_with("t.toml:20:9:"), "{e}");
        let e = err(&GOOD.replace(
            "column = \"unread_count\"",
            "column = \"unread_count\"\nvalue = \"this.a\"",
        ));
        assert!(e.contains("exclude each other"), "{e}");
        let e = err(&expression_form(
            "this.a",
            "[contract]\ndrop = \"columns\"\ncolumns = [\"other.a\"]",
        ));
        assert!(e.contains("\"other\" is not a mapped table"), "{e}");
        let e = err(&expression_form("usr.a", "[contract]\ndrop = \"nothing\""));
        assert!(e.contains("add a [users] section"), "{e}");
        let e = err(&GOOD.replace("is_deleted = 0", "conv.closed = 0"));
        assert!(
            e.starts_with("t.toml:7:13: messages.countable reads `conv.`"),
            "{e}"
        );
        let e = err(&expression_form(
            "this.a",
            "[contract]\ndrop = \"table\"\ntable = \"members\"",
        ));
        assert!(e.contains("only the per_member counter table"), "{e}");
        let m = Mapping::parse(
            &expression_form("this.a", "[contract]\ndrop = \"nothing\""),
            "t",
        )
        .unwrap();
        assert_eq!(m.contract_targets(), ContractTargets::Nothing);
    }

    #[test]
    fn a_predicate_that_does_not_parse_is_named_with_its_line() {
        use crate::dialect::Dialect;
        let m = Mapping::parse(
            &GOOD.replace("is_deleted = 0", "is_deleted = 0 AND"),
            "t.toml",
        );
        let m = m.unwrap();
        for d in [Dialect::Postgres, Dialect::Mysql, Dialect::Sqlite] {
            let e = m
                .check_predicates(d.sql_parser_dialect(), d.name())
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("t.toml:7:13: messages.countable: "), "{e}");
            assert!(e.contains(d.name()), "{e}");
        }
        let m = Mapping::parse(&GOOD.replace("active = 1", "active = = 1"), "t.toml").unwrap();
        let e = m
            .check_predicates(
                Dialect::Postgres.sql_parser_dialect(),
                Dialect::Postgres.name(),
            )
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("t.toml:13:10: members.active: "), "{e}");
        let good = Mapping::parse(GOOD, "t.toml").unwrap();
        assert!(good
            .check_predicates(Dialect::Mysql.sql_parser_dialect(), Dialect::Mysql.name())
            .is_ok());
    }
}
