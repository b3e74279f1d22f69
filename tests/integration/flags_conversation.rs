//! Read flags and their conversation (issue 29 row 11, semantics.md "Shape C"): where the
//! messages' position is a per-conversation sequence (both conversations have messages 1, 2,
//! 3), a flag row belongs to its message's conversation only. With `conversation` on the
//! read_flags counter and evidence the flags join their message on (conversation, position):
//! the backfill and the audit see each member's own flags and nothing else, on every backend.
//! Without it the position alone cannot name the message: every stage refuses the mapping
//! (exit 2) before anything is written, naming the flag keys and the shared positions. The
//! expected values are worked out by hand below, not by running tidemark.

use std::path::Path;

use sqlx::{AnyConnection, Row};

use crate::common::{bin, exec_all, on_every_backend, Backend, TestDb};
use tidemark::db::Dsn;
use tidemark::mapping::Mapping;
use tidemark::stages::{audit, backfill, expand};
use tidemark::values::text;

on_every_backend!(
    flags_join_their_conversation,
    flags_by_position_alone_are_refused
);

/// The mapping; `{conv}` is replaced by the `conversation` line of the counter and evidence
/// (or nothing).
const MAPPING: &str = r#"
[messages]
table = "messages"
id = "seq"
conversation = "conv_id"
sender = "sender_id"

[members]
table = "members"
user = "user_id"
conversation = "conv_id"

[counter]
shape = "read_flags"
table = "message_flags"
user = "user_id"
message = "seq"
{conv}
read = "(this.flags & 1) = 1"

[contract]
drop = "nothing"

[[evidence]]
kind = "read_flags"
table = "message_flags"
user = "user_id"
message = "seq"
{conv}
read = "(this.flags & 1) = 1"

[watermarks]
table = "read_watermarks"
"#;

/// Conversation 1: messages 1 to 4, conversation 2: messages 1 to 3, all sent by user 2.
/// User 1 is a member of both: in 1 it has read 1 and 2, not 3 and 4; in 2 it has read
/// everything. User 2 (the sender) has no flag rows.
const SCHEMA: [&str; 6] = [
    "CREATE TABLE messages (conv_id BIGINT NOT NULL, seq BIGINT NOT NULL, sender_id BIGINT NOT NULL, PRIMARY KEY (conv_id, seq))",
    "CREATE TABLE members (conv_id BIGINT NOT NULL, user_id BIGINT NOT NULL, PRIMARY KEY (conv_id, user_id))",
    "CREATE TABLE message_flags (user_id BIGINT NOT NULL, conv_id BIGINT NOT NULL, seq BIGINT NOT NULL, flags INTEGER NOT NULL, PRIMARY KEY (user_id, conv_id, seq))",
    "INSERT INTO messages (conv_id, seq, sender_id) VALUES (1, 1, 2), (1, 2, 2), (1, 3, 2), (1, 4, 2), (2, 1, 2), (2, 2, 2), (2, 3, 2)",
    "INSERT INTO members (conv_id, user_id) VALUES (1, 1), (1, 2), (2, 1), (2, 2)",
    "INSERT INTO message_flags (user_id, conv_id, seq, flags) VALUES (1, 1, 1, 1), (1, 1, 2, 1), (1, 1, 3, 0), (1, 1, 4, 2), (1, 2, 1, 1), (1, 2, 2, 3), (1, 2, 3, 1)",
];

fn mapping_text(conversation: bool) -> String {
    MAPPING.replace(
        "{conv}",
        if conversation {
            "conversation = \"conv_id\""
        } else {
            ""
        },
    )
}

async fn world(backend: Backend, label: &str) -> Option<(TestDb, AnyConnection)> {
    let db = TestDb::create(backend, label).await?;
    let mut conn = Dsn::parse(&db.url).unwrap().connect().await.unwrap();
    let schema: Vec<String> = SCHEMA.iter().map(|s| s.to_string()).collect();
    exec_all(&mut conn, &schema).await;
    Some((db, conn))
}

/// (conv, user, last_read_id, source), sorted.
async fn watermarks(conn: &mut AnyConnection) -> Vec<(i64, i64, i64, String)> {
    let mut out: Vec<(i64, i64, i64, String)> =
        sqlx::query("SELECT conversation_id, user_id, last_read_id, source FROM read_watermarks")
            .fetch_all(&mut *conn)
            .await
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r.try_get(0).unwrap(),
                    r.try_get(1).unwrap(),
                    r.try_get(2).unwrap(),
                    text(r, 3).unwrap().unwrap_or_default(),
                )
            })
            .collect();
    out.sort();
    out
}

/// With `conversation`: user 1's lowest unread flag in conversation 1 is on message 3, so its
/// watermark is 2 (the greatest position below it) and its stored value 2 (flags 3 and 4
/// unread); in conversation 2 no flag is unread, so the watermark is that conversation's
/// greatest position, 3, and the stored value 0. The audit recomputes 2 (messages 3 and 4)
/// and 0: two rows checked (user 2 has no flag rows), none drifting, no orphan. Joined on the
/// position alone, conversation 2 would also see the flag on conversation 1's message 3
/// (unread): watermark 2 and a drift, and conversation 1 would see conversation 2's flags.
async fn flags_join_their_conversation(backend: Backend) {
    let Some((db, mut conn)) = world(backend, "flagconv").await else {
        return;
    };
    let dialect = Dsn::parse(&db.url).unwrap().dialect;
    let mapping = Mapping::parse(&mapping_text(true), "tidemark.toml").expect("the mapping");
    expand::run(&mut conn, &mapping, dialect, false)
        .await
        .expect("expand");
    let b = backfill::run(&mut conn, &mapping, dialect, &Default::default())
        .await
        .expect("backfill");
    assert_eq!((b.written, b.no_evidence), (2, 2), "{b:?}");
    let flags = b.read_flags.expect("read_flags counts");
    assert_eq!(
        (flags.read_out_of_order, flags.unread_marked_read),
        (0, 0),
        "{flags:?}"
    );
    assert_eq!(
        watermarks(&mut conn).await,
        vec![
            (1, 1, 2, "read_flags".to_string()),
            (2, 1, 3, "read_flags".to_string()),
        ]
    );
    let tmp = tempfile::tempdir().unwrap();
    let a = audit::run(
        &mut conn,
        &mapping,
        dialect,
        &audit::AuditOptions {
            report: tmp.path().join("drift.csv"),
            ..Default::default()
        },
    )
    .await
    .expect("audit");
    let s = &a.summary;
    assert_eq!(
        (s.rows_checked, s.drifting_rows, s.sum_abs_drift),
        (2, 0, 0),
        "{s:?}"
    );
    drop(conn);
    db.cleanup().await;
}

/// Without `conversation`, the flags name their message by `seq` alone, which three
/// positions (1, 2, 3) share between the two conversations: `expand`, `backfill` and `audit`
/// exit 2 naming both flag keys, the messages column and the positions, and nothing is
/// written (no watermark table). The same mapping over positions unique across the table
/// (conversation 2 renumbered 11 to 13) passes the preflight.
async fn flags_by_position_alone_are_refused(backend: Backend) {
    let Some((db, mut conn)) = world(backend, "flagpos").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tidemark.toml"), mapping_text(false)).unwrap();
    for stage in ["expand", "backfill", "audit"] {
        let run = cli(dir.path(), &db.url, stage);
        run.expect_code(2);
        for want in [
            "counter.message",
            "evidence[1].message",
            "messages.seq",
            "3 position(s) are found in several conversations (the smallest: 1, in up to 2 conversations)",
            "conversation = ",
        ] {
            assert!(run.stderr.contains(want), "{stage}: {want}\n{}", run.stderr);
        }
    }
    assert!(
        sqlx::query("SELECT COUNT(*) FROM read_watermarks")
            .fetch_one(&mut conn)
            .await
            .is_err(),
        "nothing written: no watermark table"
    );

    // Positions unique across the table: the same mapping is accepted.
    exec_all(
        &mut conn,
        &[
            "UPDATE messages SET seq = seq + 10 WHERE conv_id = 2".to_string(),
            "UPDATE message_flags SET seq = seq + 10 WHERE conv_id = 2".to_string(),
        ],
    )
    .await;
    let dialect = Dsn::parse(&db.url).unwrap().dialect;
    let mapping = Mapping::parse(&mapping_text(false), "tidemark.toml").expect("the mapping");
    tidemark::schema::preflight(&mut conn, &mapping, dialect)
        .await
        .expect("unique positions pass the preflight");
    drop(conn);
    db.cleanup().await;
}

/// `tidemark STAGE --database URL --mapping tidemark.toml` in `dir`.
fn cli(dir: &Path, url: &str, stage: &str) -> bin::Run {
    bin::run(
        dir,
        &[stage, "--database", url, "--mapping", "tidemark.toml"],
    )
}
