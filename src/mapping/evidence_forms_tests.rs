//! The evidence forms of issue 12 in the mapping file: `filter`, `lookup`, a timestamp keyed by
//! the user alone, `[members] join_time`: what parses, and each error named with its key and
//! line.

use super::*;
use crate::dialect::Dialect;

const BASE: &str = r#"[messages]
table = "messages"
id = "id"
conversation = "conv_id"
sender = "sender_id"
created_at = "created_at"

[members]
table = "members"
user = "user_id"
conversation = "conv_id"
join_time = "joined_at"

[counter]
shape = "per_member"
table = "unread_counters"
user = "user_id"
conversation = "conv_id"
column = "unread_count"

[[evidence]]
kind = "position"
table = "receipts"
user = "user_id"
conversation = "room_id"
column = "event_id"
filter = "this.receipt_type IN ('m.read', 'm.read.private')"
lookup = { table = "events", key = "event_id", position = "stream_ordering" }

[[evidence]]
kind = "timestamp"
table = "users"
user = "id"
column = "marked_all_read_at"

[watermarks]
table = "read_watermarks"
"#;

fn err(text: &str) -> String {
    Mapping::parse(text, "t.toml").unwrap_err().to_string()
}

#[test]
fn the_forms_parse() {
    let m = Mapping::parse(BASE, "t.toml").unwrap();
    assert_eq!(
        m.members.as_ref().unwrap().join_time.as_deref(),
        Some("joined_at")
    );
    let receipts = m.evidence[0].source().unwrap();
    assert_eq!(
        receipts.filter.as_deref(),
        Some("this.receipt_type IN ('m.read', 'm.read.private')")
    );
    assert_eq!(
        receipts.lookup,
        Some(Lookup {
            table: "events".into(),
            key: "event_id".into(),
            position: "stream_ordering".into(),
            conversation: None,
        })
    );
    assert_eq!(receipts.conversation.as_deref(), Some("room_id"));
    let users = m.evidence[1].source().unwrap();
    assert_eq!(users.conversation, None);
    // The filter is a predicate of the mapping: parsed per dialect, named with its line.
    assert_eq!(m.predicates.len(), 1);
    assert_eq!(m.predicates[0].key, "evidence[1].filter");
    assert_eq!(m.predicates[0].at, "t.toml:27:10");
    for d in [Dialect::Postgres, Dialect::Mysql, Dialect::Sqlite] {
        m.check_predicates(d.sql_parser_dialect(), d.name())
            .unwrap();
    }
}

#[test]
fn each_key_changes_the_fingerprint() {
    let a = Mapping::parse(BASE, "a").unwrap().fingerprint;
    for (from, to) in [
        ("'m.read.private'", "'m.read'"),
        (
            "\"stream_ordering\" }",
            "\"stream_ordering\", conversation = \"room_id\" }",
        ),
        ("join_time = \"joined_at\"", "join_time = \"joined\""),
        (
            "column = \"marked_all_read_at\"",
            "column = \"marked_all_read_at\"\nfilter = \"deleted = 0\"",
        ),
    ] {
        assert!(BASE.contains(from), "{from}");
        let b = Mapping::parse(&BASE.replace(from, to), "b")
            .unwrap()
            .fingerprint;
        assert_ne!(a, b, "{from} -> {to}");
    }
}

#[test]
fn errors_name_the_key_and_line() {
    // A filter that is not one expression.
    let e = err(&BASE.replace("'m.read.private')", "'m.read.private'); DROP TABLE x"));
    assert!(e.starts_with("t.toml:27:10: evidence.filter: "), "{e}");
    // A filter that does not parse in the dialect's SQL: at the predicate check.
    let m = Mapping::parse(&BASE.replace("IN ('m.read'", "IN IN ('m.read'"), "t.toml").unwrap();
    let e = m
        .check_predicates(
            Dialect::Postgres.sql_parser_dialect(),
            Dialect::Postgres.name(),
        )
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("t.toml:27:10: evidence[1].filter: "), "{e}");
    // A bad identifier in the lookup.
    let e = err(&BASE.replace("key = \"event_id\"", "key = \"event id\""));
    assert!(
        e.starts_with("t.toml:28:10: evidence.lookup.key = \"event id\": "),
        "{e}"
    );
    // An unknown key in the lookup.
    let e = err(&BASE.replace(
        "position = \"stream_ordering\"",
        "pos = \"stream_ordering\"",
    ));
    assert!(e.starts_with("t.toml:28:"), "{e}");
    assert!(e.contains("pos"), "{e}");
    // A lookup on a timestamp.
    let e = err(&BASE.replace(
        "column = \"marked_all_read_at\"",
        "column = \"marked_all_read_at\"\nlookup = { table = \"e\", key = \"k\", position = \"p\" }",
    ));
    assert!(
        e.starts_with("t.toml:35:10: evidence.lookup: kind \"timestamp\""),
        "{e}"
    );
    // A position without a conversation.
    let e = err(&BASE.replace("conversation = \"room_id\"\n", ""));
    assert!(
        e.contains("evidence.conversation is required for kind \"position\""),
        "{e}"
    );
    assert!(e.starts_with("t.toml:21:"), "{e}");
    // A filter on a counter.
    let e = err(&BASE.replace(
        "[watermarks]",
        "[[evidence]]\nkind = \"counter\"\nfilter = \"x = 1\"\n\n[watermarks]",
    ));
    assert!(
        e.starts_with("t.toml:38:10: evidence.filter: kind \"counter\""),
        "{e}"
    );
    // join_time with join_position.
    let e = err(&BASE.replace(
        "join_time = \"joined_at\"",
        "join_position = \"joined_after\"\njoin_time = \"joined_at\"",
    ));
    assert!(
        e.starts_with("t.toml:13:13: members.join_time: give either"),
        "{e}"
    );
    // join_time without messages.created_at (the timestamp evidence is removed too).
    let no_time = BASE
        .replace("created_at = \"created_at\"\n", "")
        .replace(
            "[[evidence]]\nkind = \"timestamp\"\ntable = \"users\"\nuser = \"id\"\ncolumn = \"marked_all_read_at\"\n\n",
            "",
        );
    let e = err(&no_time);
    assert!(
        e.starts_with("t.toml:11:13: members.join_time needs messages.created_at"),
        "{e}"
    );
    // join_time, a bad identifier.
    let e = err(&BASE.replace("join_time = \"joined_at\"", "join_time = \"joined at\""));
    assert!(
        e.starts_with("t.toml:12:13: members.join_time = \"joined at\""),
        "{e}"
    );
}

#[test]
fn a_filter_reads_the_looked_up_row_as_lookup() {
    // Issue 22: the looked-up row is named `lookup`; a filter may read it.
    let m = Mapping::parse(
        &BASE.replace(
            "'m.read.private')",
            "'m.read.private') AND lookup.type <> 'x'",
        ),
        "t.toml",
    )
    .unwrap();
    assert!(m.evidence[0]
        .source()
        .and_then(|s| s.filter.as_deref())
        .is_some_and(|f| f.contains("lookup.type")));
    // Without a lookup there is no such row: exit 2 at the filter.
    let e = err(&BASE.replace(
        "column = \"marked_all_read_at\"",
        "column = \"marked_all_read_at\"\nfilter = \"lookup.deleted = 0\"",
    ));
    assert!(
        e.starts_with("t.toml:35:10: evidence.filter reads `lookup.`"),
        "{e}"
    );
}

/// BASE with `[messages]` keys of issue 22 ("Messages only some readers count") and a
/// `[users]` section.
fn readers(keys: &str) -> String {
    BASE.replace(
        "created_at = \"created_at\"\n",
        &format!("created_at = \"created_at\"\n{keys}"),
    ) + "\n[users]\ntable = \"users\"\nkey = \"id\"\n"
}

#[test]
fn reader_keys_parse_and_are_checked() {
    let text = readers(
        "restricted = \"this.post_type = 4\"\nrestricted_readers = \"usr.admin OR usr.moderator\"\nrecipient = \"this.state_key\"\n",
    );
    let m = Mapping::parse(&text, "t.toml").unwrap();
    assert!(m.has_reader_rules());
    assert_eq!(m.messages.restricted.as_deref(), Some("this.post_type = 4"));
    let keys: Vec<&str> = m.predicates.iter().map(|p| p.key.as_str()).collect();
    assert!(keys.contains(&"messages.restricted_readers"), "{keys:?}");
    // Each key is part of the fingerprint; a mapping without them keeps its own.
    let plain = Mapping::parse(&readers(""), "t.toml").unwrap();
    assert!(!plain.has_reader_rules());
    assert_ne!(m.fingerprint, plain.fingerprint);
    // restricted without restricted_readers, and the reverse: exit 2 at the key.
    let e = err(&readers("restricted = \"this.post_type = 4\"\n"));
    assert!(
        e.starts_with("t.toml:7:14: messages.restricted needs messages.restricted_readers"),
        "{e}"
    );
    let e = err(&readers("restricted_readers = \"usr.admin\"\n"));
    assert!(
        e.contains("messages.restricted_readers needs messages.restricted"),
        "{e}"
    );
    // usr. in a messages predicate; a statement separator.
    let e = err(&readers("recipient = \"usr.id\"\n"));
    assert!(e.contains("messages.recipient reads `usr.`"), "{e}");
    let e = err(&readers("recipient = \"x; DROP TABLE y\"\n"));
    assert!(e.starts_with("t.toml:7:13: messages.recipient: "), "{e}");
    // Without [members] there is no reader row.
    let no_members = readers("restricted = \"this.t = 4\"\nrestricted_readers = \"this.staff = 1\"\n")
        .replace(
            "[members]\ntable = \"members\"\nuser = \"user_id\"\nconversation = \"conv_id\"\njoin_time = \"joined_at\"\n",
            "",
        );
    let e = err(&no_members);
    assert!(e.contains("add a [members] section"), "{e}");
}

#[test]
fn a_per_message_counter_refuses_reader_keys() {
    let text = readers("recipient = \"this.state_key\"\n")
        .replace(
            "shape = \"per_member\"\ntable = \"unread_counters\"\nuser = \"user_id\"\nconversation = \"conv_id\"\n",
            "shape = \"per_message\"\n",
        )
        .replace(
            "[[evidence]]\nkind = \"timestamp\"\ntable = \"users\"\nuser = \"id\"\ncolumn = \"marked_all_read_at\"\n",
            "",
        );
    let e = err(&text);
    assert!(
        e.starts_with("t.toml:7:13: messages.recipient: a per_message counter"),
        "{e}"
    );
}
