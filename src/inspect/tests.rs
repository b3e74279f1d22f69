//! Unit tests of the choice ([`super::propose`]) and the text ([`super::render`]) on catalogs
//! built by hand: no database.

use super::catalog::{Catalog, Column, Index, Table, TypeClass};
use super::propose::{propose, Facts};
use super::render::render;
use crate::dialect::Dialect;
use crate::mapping::{EvidenceKind, Mapping, Shape};

fn table(name: &str, columns: &[(&str, &str)], indexes: &[(&str, bool, &[&str])]) -> Table {
    Table {
        name: name.into(),
        schema: None,
        bare: name.into(),
        is_view: false,
        columns: columns
            .iter()
            .map(|(n, t)| Column {
                name: n.to_string(),
                declared: t.to_string(),
                class: TypeClass::of_server_type(t),
            })
            .collect(),
        indexes: indexes
            .iter()
            .map(|(n, unique, cols)| Index {
                name: n.to_string(),
                unique: *unique,
                partial: false,
                columns: cols.iter().map(|c| Some(c.to_string())).collect(),
            })
            .collect(),
    }
}

fn catalog(tables: Vec<Table>) -> Catalog {
    Catalog {
        tables,
        skipped: Vec::new(),
        foreign_keys: Vec::new(),
    }
}

#[test]
fn per_message_counter_with_last_read_columns() {
    let c = catalog(vec![
        table(
            "chat_messages",
            &[
                ("id", "bigint"),
                ("seq", "bigint"),
                ("conversation_id", "bigint"),
                ("author_id", "bigint"),
                ("created_at", "timestamp with time zone"),
                ("deleted_at", "timestamp with time zone"),
                ("unread_count", "integer"),
            ],
            &[("pk", true, &["id"])],
        ),
        table(
            "participants",
            &[
                ("conversation_id", "bigint"),
                ("user_id", "bigint"),
                ("left_at", "timestamp"),
                ("joined_at", "timestamp"),
                ("last_read_message_id", "bigint"),
                ("last_viewed_at", "timestamp"),
            ],
            &[("pk", true, &["conversation_id", "user_id"])],
        ),
    ]);
    let p = propose(&c, &Facts::default(), Dialect::Postgres);
    assert!(p.missing.is_empty(), "{:?}", p.missing);
    let m = p.messages.as_ref().unwrap();
    assert_eq!(
        (m.position.as_str(), m.sender.as_str()),
        ("seq", "author_id")
    );
    assert_eq!(m.countable, vec!["deleted_at IS NULL".to_string()]);
    let counter = p.counter.as_ref().unwrap();
    assert_eq!(counter.shape, Shape::PerMessage);
    let mb = p.members.as_ref().unwrap();
    assert_eq!(mb.active.as_deref(), Some("left_at IS NULL"));
    assert!(mb
        .notes
        .iter()
        .any(|n| n.contains("joined_at is a join time")));
    let kinds: Vec<EvidenceKind> = p.evidence.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [EvidenceKind::Position, EvidenceKind::Timestamp]);
    let text = render(&p, &[], &c, Dialect::Postgres, false);
    let mapping = Mapping::parse(&text, "proposal").unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(mapping.counter.shape, Shape::PerMessage);
    assert_eq!(mapping.messages.created_at.as_deref(), Some("created_at"));
}

#[test]
fn capitals_are_quoted_in_predicates() {
    let c = catalog(vec![table(
        "messages",
        &[
            ("id", "bigint"),
            ("conv_id", "bigint"),
            ("sender_id", "bigint"),
            ("Is_Deleted", "integer"),
        ],
        &[],
    )]);
    let pg = propose(&c, &Facts::default(), Dialect::Postgres);
    assert_eq!(
        pg.messages.unwrap().countable,
        vec!["\"Is_Deleted\" = 0".to_string()]
    );
}

#[test]
fn nothing_to_map_names_what_is_missing() {
    let c = catalog(vec![table(
        "users",
        &[("id", "bigint"), ("name", "text")],
        &[],
    )]);
    let p = propose(&c, &Facts::default(), Dialect::Postgres);
    assert_eq!(p.missing.len(), 2, "{:?}", p.missing);
    assert!(p.missing[0].starts_with("a messages table"));
    assert!(p.missing[1].starts_with("a counter column"));
    let text = render(&p, &[], &c, Dialect::Sqlite, false);
    assert!(text.contains("# MISSING: a messages table"), "{text}");
}

#[test]
fn a_text_position_is_missing_an_integer_and_a_text_counter_still_proposed() {
    let c = catalog(vec![
        table(
            "messages",
            &[
                ("uuid", "uuid"),
                ("position", "character varying(20)"),
                ("room_id", "text"),
                ("sender", "text"),
            ],
            &[],
        ),
        table(
            "room_members",
            &[
                ("room_id", "text"),
                ("user_id", "text"),
                ("unread", "numeric(10,2)"),
            ],
            &[],
        ),
    ]);
    let p = propose(&c, &Facts::default(), Dialect::Postgres);
    assert_eq!(p.missing.len(), 1, "{:?}", p.missing);
    assert!(p.missing[0].contains("an integer position on messages"));
    let counter = p.counter.as_ref().unwrap();
    assert!(!counter.integer);
    assert_eq!(counter.column, "unread");
}

#[test]
fn receipts_by_event_id_get_the_lookup_view() {
    let events = table(
        "Events",
        &[
            ("event_id", "text"),
            ("room_id", "text"),
            ("sender", "text"),
            ("stream_ordering", "bigint"),
        ],
        &[("pk", true, &["event_id"])],
    );
    let receipts = table(
        "receipts",
        &[
            ("room_id", "text"),
            ("user_id", "text"),
            ("event_id", "text"),
        ],
        &[],
    );
    let counts = table(
        "unread_counts",
        &[
            ("user_id", "text"),
            ("room_id", "text"),
            ("unread_count", "integer"),
        ],
        &[("pk", true, &["user_id", "room_id"])],
    );
    let c = catalog(vec![events, receipts.clone(), counts.clone()]);
    let p = propose(&c, &Facts::default(), Dialect::Postgres);
    let want = "`CREATE VIEW receipts_positions AS SELECT r.user_id AS user_id, r.room_id AS \
                room_id, m.stream_ordering AS stream_ordering FROM receipts r JOIN \"Events\" m ON \
                m.event_id = r.event_id AND m.room_id = r.room_id`";
    assert!(
        p.evidence_notes.iter().any(|n| n.contains(want)),
        "{:#?}",
        p.evidence_notes
    );
    // Without the key column on the messages table: the general advice, no statement.
    let bare = table(
        "Events",
        &[
            ("room_id", "text"),
            ("sender", "text"),
            ("stream_ordering", "bigint"),
        ],
        &[],
    );
    let p = propose(
        &catalog(vec![bare, receipts, counts]),
        &Facts::default(),
        Dialect::Postgres,
    );
    assert!(p
        .evidence_notes
        .iter()
        .any(|n| n.contains("has no integer read position") && !n.contains("CREATE VIEW")));
}

/// `plan`'s index list: every table the stages read by conversation range, found by an index
/// whose key starts with the columns in order, else one that starts with the leading columns
/// (partly served), else the statement that creates one.
#[test]
fn index_needs_are_found_or_created() {
    use super::indexes::{check_in, needed, IndexStatus};
    let text = crate::legacy_schema::mapping_toml(crate::mapping::Shape::PerMember, true);
    let mapping = Mapping::parse(&text, "needs").unwrap();
    let needs = needed(&mapping);
    let listed: Vec<(String, Vec<String>)> = needs
        .iter()
        .map(|n| (n.table.clone(), n.columns.clone()))
        .collect();
    let own = |t: &str, c: &[&str]| (t.to_string(), c.iter().map(|s| s.to_string()).collect());
    assert_eq!(
        listed,
        vec![
            own("messages", &["conv_id", "id"]),
            own("unread_counters", &["conv_id", "user_id"]),
            own("members", &["conv_id", "user_id"]),
            own("read_receipts", &["conv_id", "user_id"]),
            own("messages", &["conv_id", "sender_id", "id"]),
        ]
    );
    let c = catalog(vec![
        table(
            "messages",
            &[
                ("conv_id", "bigint"),
                ("id", "bigint"),
                ("sender_id", "text"),
            ],
            // (conv_id, id, …) serves (conv_id, id); no index starts with (conv_id, sender_id).
            &[("messages_pkey", true, &["conv_id", "id", "sender_id"])],
        ),
        // Key order matters: (user_id, conv_id) does not serve a conversation range.
        table(
            "unread_counters",
            &[("conv_id", "bigint"), ("user_id", "text")],
            &[("by_user", true, &["user_id", "conv_id"])],
        ),
        table(
            "members",
            &[("CONV_ID", "bigint"), ("USER_ID", "text")],
            &[("members_pk", true, &["CONV_ID", "USER_ID"])],
        ),
    ]);
    let checks = check_in(&c, Dialect::Postgres, needs);
    let status: Vec<&IndexStatus> = checks.iter().map(|c| &c.status).collect();
    assert_eq!(
        status,
        vec![
            &IndexStatus::Present("messages_pkey".into()),
            &IndexStatus::Missing(
                "CREATE INDEX \"unread_counters_conv_id_user_id\" ON \"unread_counters\" (\"conv_id\", \"user_id\");"
                    .into()
            ),
            &IndexStatus::Present("members_pk".into()),
            &IndexStatus::NoTable,
            // (conv_id, id, …) serves the conversation, not the sender after it (issue 24 #4:
            // say what the existing index costs, not that none exists).
            &IndexStatus::Partial {
                index: "messages_pkey".into(),
                leading: 1,
                create: "CREATE INDEX \"messages_conv_id_sender_id_id\" ON \"messages\" (\"conv_id\", \"sender_id\", \"id\");"
                    .into()
            },
        ]
    );
}

#[test]
fn plurals_know_the_english_endings() {
    use super::structure::plurals;
    assert_eq!(plurals("post"), ["post", "posts"]);
    assert!(plurals("category").contains(&"categories".to_string()));
    assert!(!plurals("day").contains(&"daies".to_string()));
    assert!(plurals("box").contains(&"boxes".to_string()));
}
