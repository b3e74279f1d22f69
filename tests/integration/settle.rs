//! The settle time applies to every watermark the backfill derives (issue 29, row 19;
//! semantics.md "Backfill", settle time): before, it held back only "everything read" (a
//! counter of 0), so a counter of 1 read while message 1 000 000 was still uncommitted and
//! 1 000 001 had committed named 1 000 001, covering 1 000 000 before it committed; and it
//! held whole conversations, so a busy conversation never converged. Now a derived watermark
//! (a counter of any value, a timestamp, an own message, read flags) is held, per member,
//! when it would newly cover a message younger than the settle time.
//!
//! Deterministic: messages created "now" stand for the ones that committed within the settle
//! time (a transaction still open holds a position below them).

use std::time::{SystemTime, UNIX_EPOCH};

use sqlx::Connection;

use crate::common::faults::{watermarks, Fixture};
use crate::common::{exec_all, on_every_backend, Backend, TestDb};

on_every_backend!(derived_watermarks_covering_young_messages_are_held_per_member);
on_every_backend!(servers: counter_of_one_over_an_uncommitted_position_is_held);

fn now_s() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Conversation 1: positions 1..12, created at 1001..1010 (old) and, for 11 and 12, now
/// (young); every message from `a` but 8 (from `j`), 11 (from `x`, no member) and 12 (from
/// `i`). Conversation 2:
/// positions 21..23, old. Counters: `b` 1, `c` 5, `d` 0, `e` 2, `i` 3 in conversation 1, `f`
/// 0 in conversation 2. Last viewed: `g` now, `h` at 1005. `j` has only its own message.
fn data() -> Vec<String> {
    let now = now_s();
    let mut sql = tidemark::legacy_schema::schema_sql();
    for id in 1..=12i64 {
        let sender = match id {
            8 => "j",
            11 => "x",
            12 => "i",
            _ => "a",
        };
        let created = if id > 10 { now } else { 1000 + id };
        sql.push(format!(
            "INSERT INTO messages (conv_id, id, sender_id, created_at) VALUES (1, {id}, '{sender}', {created})"
        ));
    }
    for id in 21..=23i64 {
        sql.push(format!(
            "INSERT INTO messages (conv_id, id, sender_id, created_at) VALUES (2, {id}, 'a', {})",
            1000 + id
        ));
    }
    for user in ["a", "b", "c", "d", "e", "g", "h", "i", "j"] {
        sql.push(format!(
            "INSERT INTO members (conv_id, user_id, active) VALUES (1, '{user}', 1)"
        ));
    }
    sql.push("INSERT INTO members (conv_id, user_id, active) VALUES (2, 'f', 1)".into());
    for (conv, user, k) in [
        (1, "b", 1),
        (1, "c", 5),
        (1, "d", 0),
        (1, "e", 2),
        (1, "i", 3),
        (2, "f", 0),
    ] {
        sql.push(format!(
            "INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES ({conv}, '{user}', {k})"
        ));
    }
    sql.push(
        "CREATE TABLE last_viewed (conv_id BIGINT NOT NULL, user_id VARCHAR(64) NOT NULL, viewed_at BIGINT NULL)"
            .into(),
    );
    sql.push(format!(
        "INSERT INTO last_viewed (conv_id, user_id, viewed_at) VALUES (1, 'g', {now})"
    ));
    sql.push("INSERT INTO last_viewed (conv_id, user_id, viewed_at) VALUES (1, 'h', 1005)".into());
    sql
}

/// The scenario mapping with `created_at`, and evidence: receipts, the last-viewed time,
/// the counter, own messages.
fn mapping() -> String {
    crate::scenario::mapping_toml("per_member", true)
        .replacen(
            "sender = \"sender_id\"",
            "sender = \"sender_id\"\ncreated_at = \"created_at\"",
            1,
        )
        .replacen(
            "\n[[evidence]]\nkind = \"counter\"",
            "\n[[evidence]]\nkind = \"timestamp\"\ntable = \"last_viewed\"\nuser = \"user_id\"\nconversation = \"conv_id\"\ncolumn = \"viewed_at\"\n\n[[evidence]]\nkind = \"counter\"",
            1,
        )
}

/// With the default settle time (5 min): `b`'s counter 1 names 11 (young: held, where
/// before it was written), `d`'s 0 names 12 (held), `g`'s time names 12 (held); in the same
/// conversation `a` (own message 10), `c` (L[5] = 7), `e` (L[2] = 10), `h` (time 1005: 5) and `j` (own message 8)
/// are written now, and `i` gets its counter's 8 (its own 12 is young); conversation 2 is
/// written. The summary counts 3 members in 1 conversation. With `--settle-time 0` the held
/// ones are written.
async fn derived_watermarks_covering_young_messages_are_held_per_member(backend: Backend) {
    let Some(db) = TestDb::create(backend, "settle_member").await else {
        return;
    };
    let mut conn = db.connect().await;
    exec_all(&mut conn, &data()).await;
    let f = Fixture::with_mapping(db, &mapping());
    let run = f.run(&["backfill", "--format", "json"]);
    run.expect_code(0);
    let json: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(
        watermarks(&mut conn).await,
        vec![
            "1|a|10|own_message".to_string(),
            "1|c|7|counter".to_string(),
            "1|e|10|counter".to_string(),
            "1|h|5|timestamp".to_string(),
            "1|i|8|counter".to_string(),
            "1|j|8|own_message".to_string(),
            "2|f|23|counter".to_string(),
        ],
        "{}",
        run.stdout
    );
    assert_eq!(json["settle_time_s"], 300, "{}", run.stdout);
    assert_eq!(json["left_unsettled_members"], 3, "{}", run.stdout);
    assert_eq!(json["left_unsettled"], 1, "{}", run.stdout);

    let text = f.run(&["backfill", "--dry-run"]);
    text.expect_code(0);
    assert!(
        text.stdout.contains(
            "left 3 members (in 1 conversations) for a later run: their derived watermark would cover a message younger than the settle time (300s)"
        ),
        "{}",
        text.stdout
    );

    f.run(&["backfill", "--settle-time", "0", "--quiet"])
        .expect_code(0);
    assert_eq!(
        watermarks(&mut conn).await,
        vec![
            "1|a|10|own_message".to_string(),
            "1|b|11|counter".to_string(),
            "1|c|7|counter".to_string(),
            "1|d|12|counter".to_string(),
            "1|e|10|counter".to_string(),
            "1|g|12|timestamp".to_string(),
            "1|h|5|timestamp".to_string(),
            "1|i|12|own_message".to_string(),
            "1|j|8|own_message".to_string(),
            "2|f|23|counter".to_string(),
        ]
    );
    drop(conn);
    f.db.cleanup().await;
}

/// The reproduction: conversation 1 holds positions 1..99 from `b`, an hour old;
/// connection A inserts 100 and does not commit, connection B inserts 101 and 102 and commits.
/// `a`'s counter is 1: the newest message read is L[1] = 101 of what the backfill sees, which
/// covers the open 100. The backfill (default settle time) writes nothing for `a` (before:
/// 101 from the counter); `c` (counter 3: L[3] = 98) is written. Once 100 has committed and
/// the settle time is off, `a` gets 101.
async fn counter_of_one_over_an_uncommitted_position_is_held(backend: Backend) {
    let Some(db) = TestDb::create(backend, "settle_open").await else {
        return;
    };
    let mut conn = db.connect().await;
    let mut sql = tidemark::legacy_schema::schema_sql();
    let old = now_s() - 3600;
    for id in 1..=99i64 {
        sql.push(format!(
            "INSERT INTO messages (conv_id, id, sender_id, created_at) VALUES (1, {id}, 'b', {old})"
        ));
    }
    for (user, k) in [("a", 1), ("b", 0), ("c", 3)] {
        sql.push(format!(
            "INSERT INTO members (conv_id, user_id, active) VALUES (1, '{user}', 1)"
        ));
        sql.push(format!(
            "INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES (1, '{user}', {k})"
        ));
    }
    exec_all(&mut conn, &sql).await;
    let text = crate::scenario::mapping_toml("per_member", false).replacen(
        "sender = \"sender_id\"",
        "sender = \"sender_id\"\ncreated_at = \"created_at\"",
        1,
    );
    let f = Fixture::with_mapping(db, &text);
    let mut a = f.connect().await;
    let mut b = f.connect().await;
    sqlx::Executor::execute(&mut a, "BEGIN").await.unwrap();
    let now = now_s();
    sqlx::Executor::execute(
        &mut a,
        format!(
            "INSERT INTO messages (conv_id, id, sender_id, created_at) VALUES (1, 100, 'b', {now})"
        )
        .as_str(),
    )
    .await
    .unwrap();
    for id in [101, 102] {
        sqlx::Executor::execute(
            &mut b,
            format!("INSERT INTO messages (conv_id, id, sender_id, created_at) VALUES (1, {id}, 'b', {now})")
                .as_str(),
        )
        .await
        .unwrap();
    }
    let run = f.run(&["backfill", "--format", "json"]);
    run.expect_code(0);
    let got = watermarks(&mut conn).await;
    assert!(
        !got.iter().any(|w| w.starts_with("1|a|")),
        "{backend:?}: a watermark over the uncommitted position 100: {got:?}\n{}",
        run.stdout
    );
    assert!(got.contains(&"1|c|98|counter".to_string()), "{got:?}");
    let json: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(json["left_unsettled_members"], 2, "a and b: {}", run.stdout);

    sqlx::Executor::execute(&mut a, "COMMIT").await.unwrap();
    f.run(&["backfill", "--settle-time", "0", "--quiet"])
        .expect_code(0);
    let got = watermarks(&mut conn).await;
    assert!(got.contains(&"1|a|101|counter".to_string()), "{got:?}");
    let _ = a.close().await;
    let _ = b.close().await;
    drop(conn);
    f.db.cleanup().await;
}
