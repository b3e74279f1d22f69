//! A member's own messages under reader rules and `legacy_countable` (semantics.md "Drift
//! classes", `own_messages_counted`; interface.md: `legacy_countable` is used only to classify
//! `excluded_counted`): a member's own message after the watermark that counts for that member
//! (its own staff whisper; an invite it addressed to itself) is one of its own messages, even
//! where `legacy_countable` says the legacy counter never counted such messages. The
//! differential test found the audit classing such a row `excluded_counted` (about one MariaDB
//! run in four, `--cap 2`): the own count read the `legacy_countable` flag. On every backend,
//! with and without a cap; the expected values are worked out by hand below.
//!
//! Conversation 10; user 1 is staff, users 2 and 3 are not. No watermarks (nothing read).
//!
//! | id | by | rule | countable | legacy-counted |
//! |---:|---|---|---|---|
//! | 1 | 2 | everyone | yes | yes |
//! | 2 | 1 | whisper (staff only) | yes | no |
//! | 3 | 2 | everyone | no (deleted) | yes |
//! | 4 | 3 | invite for 3 only | yes | no |
//!
//! User 1 (staff): recomputed 1 (message 1), own 1 (its whisper 2), excluded 1 (3): stored
//! 2 = 1 + 1 is `own_messages_counted` (the first class that applies), not `excluded_counted`.
//! User 2: recomputed 0 (1 and the deleted 3 are its own, 2 and 4 kept from it), own 2:
//! stored 2 is `own_messages_counted`. User 3: recomputed 1 (1), own 1 (the invite 4 it addressed to
//! itself), excluded 1 (3): stored 2 is `own_messages_counted`. Under `--cap 1` (values
//! clamped at 2) the same rows and classes.

use crate::common::{csv, exec_all, on_every_backend, Backend, TestDb};
use tidemark::db::Dsn;
use tidemark::mapping::Mapping;
use tidemark::stages::{audit, expand};

on_every_backend!(own_messages_count_where_they_count_for_their_sender);

const MAPPING: &str = r#"
[messages]
table = "messages"
id = "id"
conversation = "conv_id"
sender = "sender_id"
countable = "this.deleted = 0"
legacy_countable = "this.whisper = 0 AND this.recipient_id IS NULL"
restricted = "this.whisper = 1"
restricted_readers = "this.staff = 1"
recipient = "this.recipient_id"

[members]
table = "members"
user = "user_id"
conversation = "conv_id"

[counter]
shape = "per_member"
table = "counters"
user = "user_id"
conversation = "conv_id"
column = "unread_count"

[watermarks]
table = "read_watermarks"
"#;

const SCHEMA: [&str; 6] = [
    "CREATE TABLE messages (id BIGINT NOT NULL PRIMARY KEY, conv_id BIGINT NOT NULL, sender_id BIGINT NOT NULL, whisper INTEGER NOT NULL, deleted INTEGER NOT NULL, recipient_id BIGINT NULL)",
    "CREATE TABLE members (conv_id BIGINT NOT NULL, user_id BIGINT NOT NULL, staff INTEGER NOT NULL, PRIMARY KEY (conv_id, user_id))",
    "CREATE TABLE counters (conv_id BIGINT NOT NULL, user_id BIGINT NOT NULL, unread_count BIGINT NULL, PRIMARY KEY (conv_id, user_id))",
    "INSERT INTO messages (id, conv_id, sender_id, whisper, deleted, recipient_id) VALUES (1, 10, 2, 0, 0, NULL), (2, 10, 1, 1, 0, NULL), (3, 10, 2, 0, 1, NULL), (4, 10, 3, 0, 0, 3)",
    "INSERT INTO members (conv_id, user_id, staff) VALUES (10, 1, 1), (10, 2, 0), (10, 3, 0)",
    "INSERT INTO counters (conv_id, user_id, unread_count) VALUES (10, 1, 2), (10, 2, 2), (10, 3, 2)",
];

async fn own_messages_count_where_they_count_for_their_sender(backend: Backend) {
    let Some(db) = TestDb::create(backend, "readersown").await else {
        return;
    };
    let dsn = Dsn::parse(&db.url).unwrap();
    let dialect = dsn.dialect;
    let mut conn = dsn.connect().await.unwrap();
    let schema: Vec<String> = SCHEMA.iter().map(|s| s.to_string()).collect();
    exec_all(&mut conn, &schema).await;
    let mapping = Mapping::parse(MAPPING, "tidemark.toml").expect("the mapping");
    expand::run(&mut conn, &mapping, dialect, false)
        .await
        .expect("expand");
    let want = [
        "10,1,2,1,1,own_messages_counted,,",
        "10,2,2,0,2,own_messages_counted,,",
        "10,3,2,1,1,own_messages_counted,,",
    ];
    for cap in [None, Some(1)] {
        let tmp = tempfile::tempdir().unwrap();
        let report = tmp.path().join("drift.csv");
        let a = audit::run(
            &mut conn,
            &mapping,
            dialect,
            &audit::AuditOptions {
                report: report.clone(),
                cap,
                ..Default::default()
            },
        )
        .await
        .expect("audit");
        let s = &a.summary;
        assert_eq!(
            (s.rows_checked, s.drifting_rows, s.sum_abs_drift),
            (3, 3, 4),
            "cap {cap:?}: {s:?}"
        );
        let mut rows: Vec<String> = csv::read(&report)
            .rows
            .iter()
            .map(|r| r.join(","))
            .collect();
        rows.sort();
        assert_eq!(rows, want, "cap {cap:?}");
    }
    drop(conn);
    db.cleanup().await;
}
