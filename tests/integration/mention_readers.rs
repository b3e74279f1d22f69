//! Mentions under reader rules (issue 29 rows 15 and 16, semantics.md "Messages only some
//! readers count" and "Several counters per member"): a mention counter beside `[messages]
//! restricted` (staff whispers) and `recipient` (an invite for one member) is accepted, and a
//! mention counts for a reader only where the message counts for that reader; a message the
//! rules keep from a reader, which the legacy counter counted, is that reader's excluded
//! message (`excluded_counted`), for the unread counter and the mention counter alike. On
//! every backend; the expected values are worked out by hand below.
//!
//! Conversation 10; user 1 is staff, users 2 and 3 are not. Messages (all countable):
//!
//! | id | by | rule | mentions |
//! |---:|---|---|---|
//! | 1 | 1 | everyone | 2, 3 |
//! | 2 | 1 | whisper (staff only) | 2, 3 |
//! | 3 | 2 | whisper (staff only) | 1 |
//! | 4 | 1 | invite for 3 only | 2, 3 |
//! | 5 | 3 | everyone | 2 |
//!
//! No watermarks (nothing read). Unread, recomputed: user 1: 3, 5 (2); user 2: 1, 5 (2;
//! 2 and 4 are kept from it, 3 its own); user 3: 1, 4 (2; 2 and 3 are whispers, 5 its own).
//! Mentions, recomputed: user 1: 3 (1); user 2: 1, 5 (2; the whisper 2 and the invite 4 are
//! kept from it); user 3: 1, 4 (2; the whisper 2 is kept from it).
//!
//! The legacy counters counted every message: unread 2, 4, 2 and mentions 1, 4, 3. So user 2's
//! unread (4 = 2 + the whisper 2 and the invite 4) and mentions (4 = 2 + the same two) and
//! user 3's mentions (3 = 2 + the whisper 2) drift, each `excluded_counted` (before issue 29
//! user 2's unread was `exceeds_history`, and the mapping was refused).

use sqlx::AnyConnection;

use crate::common::{csv, exec_all, on_every_backend, Backend, TestDb};
use tidemark::db::Dsn;
use tidemark::mapping::Mapping;
use tidemark::stages::{audit, expand};

on_every_backend!(
    mentions_count_where_the_message_counts,
    text_mentions_count_where_the_message_counts
);

const MAPPING: &str = r#"
[messages]
table = "messages"
id = "id"
conversation = "conv_id"
sender = "sender_id"
restricted = "this.whisper = 1"
restricted_readers = "this.staff = 1"
recipient = "this.recipient_id"

[members]
table = "members"
user = "user_id"
conversation = "conv_id"

[[counter]]
name = "unread"
shape = "per_member"
table = "counters"
user = "user_id"
conversation = "conv_id"
column = "unread_count"

[[counter]]
name = "mentions"
shape = "per_member"
table = "counters"
user = "user_id"
conversation = "conv_id"
column = "mention_count"
mentions = { table = "mentions", message = "message_id", user = "user_id" }

{text}
[watermarks]
table = "read_watermarks"
"#;

/// The third counter (issue 29 row 16): the same mentions found in the text (`@` and the
/// reader's user name) by a mention predicate over the message and the reader's user row.
/// `{concat}` is the engine's pattern: `'%@' || usr.username || '%'` or MySQL's CONCAT.
const TEXT_COUNTER: &str = r#"
[[counter]]
name = "text_mentions"
shape = "per_member"
table = "counters"
user = "user_id"
conversation = "conv_id"
column = "text_mention_count"
mentioned = "this.body LIKE {concat}"

[users]
table = "users"
key = "id"
"#;

const SCHEMA: [&str; 10] = [
    "CREATE TABLE messages (id BIGINT NOT NULL PRIMARY KEY, conv_id BIGINT NOT NULL, sender_id BIGINT NOT NULL, whisper INTEGER NOT NULL, recipient_id BIGINT NULL, body VARCHAR(100) NOT NULL)",
    "CREATE TABLE members (conv_id BIGINT NOT NULL, user_id BIGINT NOT NULL, staff INTEGER NOT NULL, PRIMARY KEY (conv_id, user_id))",
    "CREATE TABLE counters (conv_id BIGINT NOT NULL, user_id BIGINT NOT NULL, unread_count BIGINT NULL, mention_count BIGINT NULL, text_mention_count BIGINT NULL, PRIMARY KEY (conv_id, user_id))",
    "CREATE TABLE users (id BIGINT NOT NULL PRIMARY KEY, username VARCHAR(20) NOT NULL)",
    "CREATE TABLE mentions (message_id BIGINT NOT NULL, user_id BIGINT NOT NULL, PRIMARY KEY (message_id, user_id))",
    "INSERT INTO messages (id, conv_id, sender_id, whisper, recipient_id, body) VALUES (1, 10, 1, 0, NULL, 'hi @ann @bo'), (2, 10, 1, 1, NULL, 'between staff: @ann @bo'), (3, 10, 2, 1, NULL, '@root look'), (4, 10, 1, 0, 3, 'invite: @ann @bo'), (5, 10, 3, 0, NULL, 'thanks @ann')",
    "INSERT INTO users (id, username) VALUES (1, 'root'), (2, 'ann'), (3, 'bo')",
    "INSERT INTO members (conv_id, user_id, staff) VALUES (10, 1, 1), (10, 2, 0), (10, 3, 0)",
    "INSERT INTO counters (conv_id, user_id, unread_count, mention_count, text_mention_count) VALUES (10, 1, 2, 1, 1), (10, 2, 4, 4, 4), (10, 3, 2, 3, 3)",
    "INSERT INTO mentions (message_id, user_id) VALUES (1, 2), (1, 3), (2, 2), (2, 3), (3, 1), (4, 2), (4, 3), (5, 2)",
];

async fn setup(backend: Backend, label: &str) -> Option<(TestDb, AnyConnection)> {
    let db = TestDb::create(backend, label).await?;
    let mut conn = Dsn::parse(&db.url).unwrap().connect().await.unwrap();
    let schema: Vec<String> = SCHEMA.iter().map(|s| s.to_string()).collect();
    exec_all(&mut conn, &schema).await;
    Some((db, conn))
}

async fn mentions_count_where_the_message_counts(backend: Backend) {
    let Some((db, mut conn)) = setup(backend, "mentionrd").await else {
        return;
    };
    let dialect = Dsn::parse(&db.url).unwrap().dialect;
    let mapping = Mapping::parse(&MAPPING.replace("{text}", ""), "tidemark.toml")
        .expect("mentions beside reader rules");
    let (summary, rows) = audit_rows(&mut conn, &mapping, dialect).await;
    assert_eq!(summary, (6, 3, 5, 2));
    assert_eq!(
        rows,
        vec![
            "10,2,4,2,2,excluded_counted,,,mentions",
            "10,2,4,2,2,excluded_counted,,,unread",
            "10,3,3,2,1,excluded_counted,,,mentions",
        ]
    );
    drop(conn);
    db.cleanup().await;
}

/// The same with a third counter whose mentions are found in the text by a predicate
/// (`mentioned`): the same values, the same classes. User 2 is `ann` (mentioned in 1, 2, 4,
/// 5), user 3 `bo` (1, 2, 4), user 1 `root` (3).
async fn text_mentions_count_where_the_message_counts(backend: Backend) {
    let Some((db, mut conn)) = setup(backend, "mentiontx").await else {
        return;
    };
    let dialect = Dsn::parse(&db.url).unwrap().dialect;
    let concat = if backend == Backend::Mysql {
        "CONCAT('%@', usr.username, '%')"
    } else {
        "'%@' || usr.username || '%'"
    };
    let text = MAPPING.replace("{text}", &TEXT_COUNTER.replace("{concat}", concat));
    let mapping = Mapping::parse(&text, "tidemark.toml").expect("a mention predicate");
    mapping
        .check_predicates(dialect.sql_parser_dialect(), dialect.name())
        .expect("the predicate parses");
    let (summary, rows) = audit_rows(&mut conn, &mapping, dialect).await;
    assert_eq!(summary, (9, 5, 8, 2));
    assert_eq!(
        rows,
        vec![
            "10,2,4,2,2,excluded_counted,,,mentions",
            "10,2,4,2,2,excluded_counted,,,text_mentions",
            "10,2,4,2,2,excluded_counted,,,unread",
            "10,3,3,2,1,excluded_counted,,,mentions",
            "10,3,3,2,1,excluded_counted,,,text_mentions",
        ]
    );
    drop(conn);
    db.cleanup().await;
}

/// Expands and audits: (rows checked, drifting, sum |drift|, largest |drift|) and the sorted
/// report rows.
async fn audit_rows(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: tidemark::dialect::Dialect,
) -> ((u64, u64, i64, i64), Vec<String>) {
    expand::run(&mut *conn, mapping, dialect, false)
        .await
        .expect("expand");
    let tmp = tempfile::tempdir().unwrap();
    let report = tmp.path().join("drift.csv");
    let a = audit::run(
        &mut *conn,
        mapping,
        dialect,
        &audit::AuditOptions {
            report: report.clone(),
            ..Default::default()
        },
    )
    .await
    .expect("audit");
    let s = &a.summary;
    let mut rows: Vec<String> = csv::read(&report)
        .rows
        .iter()
        .map(|r| r.join(","))
        .collect();
    rows.sort();
    (
        (
            s.rows_checked,
            s.drifting_rows,
            s.sum_abs_drift,
            s.max_abs_drift,
        ),
        rows,
    )
}
