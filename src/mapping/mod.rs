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
//!
//! The files import one way: `types.rs` (the [`Mapping`] and its sections), `locator.rs`
//! (where an error points) and `raw.rs` (the TOML as given) import no sibling that imports them
//! back; `policy.rs`, `validate.rs`, `rows.rs` and `predicates.rs` build on them; `parse.rs` is
//! the top of the reading; this file re-exports the types and is never imported by its
//! children.

use std::path::Path;

use crate::error::input_error;

mod counters;
#[cfg(test)]
mod counters_tests;
#[cfg(test)]
mod evidence_forms_tests;
mod locator;
mod parse;
mod policy;
mod predicates;
mod raw;
mod readers;
mod rows;
mod types;
mod validate;

pub use locator::line_col;
pub use parse::hex;
pub use predicates::parse_predicate;
pub use rows::{ContractTargets, DropColumn, RowRefs};
pub use types::{
    Combine, Counter, DropKind, Evidence, EvidenceKind, EvidencePolicy, EvidenceSource, KeyedTable,
    Lookup, Mapping, Members, Mentions, Messages, PredicateSite, RawContract, Shape, Watermarks,
};
pub use validate::{check_identifier, check_predicate};

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
        let demo = crate::legacy_schema::mapping_toml(crate::mapping::Shape::PerMember, false);
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
