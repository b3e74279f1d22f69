//! How the backfill chooses a watermark (semantics.md "Backfill: where each last_read_id comes
//! from"): the settle time that keeps a derived watermark from covering a position whose
//! transaction has not committed (issue 13 row 14), and the evidence policy (issue 12).

use crate::common::{on_every_backend, Backend, TestDb};
use crate::scenario;
use sqlx::{AnyConnection, Executor, Row};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tidemark::db::Dsn;
use tidemark::mapping::Mapping;
use tidemark::stages::{backfill, expand};

on_every_backend!(servers: settle_time_uncommitted_position);
on_every_backend!(
    settle_time_unguarded,
    evidence_policy,
    settle_time_keeps_the_order
);

/// Unix seconds now.
fn now_s() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The per-member mapping of the scenario schema, with `messages.created_at` when asked.
fn mapping(created_at: bool, extra: &str) -> Mapping {
    let mut text = scenario::mapping_toml("per_member", false);
    if created_at {
        text = text.replacen(
            "sender = \"sender_id\"",
            "sender = \"sender_id\"\ncreated_at = \"created_at\"",
            1,
        );
    }
    text.push_str(extra);
    Mapping::parse(&text, "policy").unwrap()
}

/// Conversation 1 with members `a` (counter 0, no receipt) and `b` (sender of messages
/// 1..=99, an hour old).
async fn load(conn: &mut AnyConnection) {
    crate::common::exec_all(conn, &scenario::schema_sql()).await;
    let old = now_s() - 3600;
    let rows: Vec<String> = (1..=99)
        .map(|id| format!("(1, {id}, 'b', 0, 0, {old}, NULL)"))
        .collect();
    let stmts = vec![
        format!(
            "INSERT INTO messages (conv_id, id, sender_id, is_deleted, is_system, created_at, unread_count) VALUES {}",
            rows.join(", ")
        ),
        "INSERT INTO members (conv_id, user_id, active, join_position) VALUES (1, 'a', 1, NULL), (1, 'b', 1, NULL)".into(),
        "INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES (1, 'a', 0)".into(),
    ];
    crate::common::exec_all(conn, &stmts).await;
}

/// `a`'s watermark in conversation 1: (last_read_id, source).
async fn watermark_of_a(conn: &mut AnyConnection) -> Option<(i64, String)> {
    sqlx::query(
        "SELECT last_read_id, source FROM read_watermarks WHERE conversation_id = 1 AND user_id = 'a'",
    )
    .fetch_optional(&mut *conn)
    .await
    .unwrap()
    .map(|r| {
        (
            r.try_get(0).unwrap(),
            tidemark::values::text(&r, 1).unwrap().unwrap_or_default(),
        )
    })
}

/// Issue 13 row 14 (seed 000 §4): connection A inserts position 100 and does not commit,
/// connection B inserts 101 and commits; `a`'s counter is 0 ("read everything"). The backfill
/// must not write 101 (when 100 commits it would never be counted unread): it leaves the
/// conversation for later and reports it; after A commits and the settle time passes, a rerun
/// writes 101.
async fn settle_time_uncommitted_position(backend: Backend) {
    let Some(db) = TestDb::create(backend, "bf_settle").await else {
        return;
    };
    let dsn = Dsn::parse(&db.url).unwrap();
    let mut conn = db.connect().await;
    load(&mut conn).await;
    let mapping = mapping(true, "");
    expand::run(&mut conn, &mapping, dsn.dialect, false)
        .await
        .unwrap();

    let mut a = db.connect().await;
    let mut b = db.connect().await;
    a.execute("BEGIN").await.unwrap();
    a.execute(
        format!(
            "INSERT INTO messages (conv_id, id, sender_id, is_deleted, is_system, created_at) VALUES (1, 100, 'b', 0, 0, {})",
            now_s()
        )
        .as_str(),
    )
    .await
    .unwrap();
    b.execute(
        format!(
            "INSERT INTO messages (conv_id, id, sender_id, is_deleted, is_system, created_at) VALUES (1, 101, 'b', 0, 0, {})",
            now_s()
        )
        .as_str(),
    )
    .await
    .unwrap();

    let opts = backfill::BackfillOptions {
        settle_time: Duration::from_secs(2),
        ..Default::default()
    };
    let first = backfill::run(&mut conn, &mapping, dsn.dialect, &opts)
        .await
        .unwrap();
    assert_eq!(
        watermark_of_a(&mut conn).await,
        None,
        "{backend:?}: a watermark over an uncommitted position 100: {first:?}"
    );
    assert_eq!(first.left_unsettled, 1, "{first:?}");
    assert_eq!(first.left_unsettled_members, 1, "{first:?}");
    assert_eq!(first.settle_time_s, Some(2));
    let mut text = Vec::new();
    tidemark::render::text::backfill(&mut text, &first, false).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(
        text.contains(
            "left 1 members (in 1 conversations) for a later run: their derived watermark would cover a message younger than the settle time (2s)"
        ),
        "{text}"
    );

    a.execute("COMMIT").await.unwrap();
    tokio::time::sleep(Duration::from_millis(3100)).await;
    let second = backfill::run(&mut conn, &mapping, dsn.dialect, &opts)
        .await
        .unwrap();
    assert_eq!(
        watermark_of_a(&mut conn).await,
        Some((101, "counter".to_string())),
        "{backend:?}: {second:?}"
    );
    assert_eq!(second.left_unsettled, 0, "{second:?}");
    drop(a);
    drop(b);
    drop(conn);
    db.cleanup().await;
}

/// Without `messages.created_at` the settle time cannot apply: the summary and the text say
/// that the hazard is not guarded, and the backfill writes as before. With it and
/// `--settle-time 0`, nothing is left out either.
async fn settle_time_unguarded(backend: Backend) {
    let Some(db) = TestDb::create(backend, "bf_unguarded").await else {
        return;
    };
    let dsn = Dsn::parse(&db.url).unwrap();
    let mut conn = db.connect().await;
    load(&mut conn).await;
    conn.execute(
        format!(
            "INSERT INTO messages (conv_id, id, sender_id, is_deleted, is_system, created_at) VALUES (1, 100, 'b', 0, 0, {})",
            now_s()
        )
        .as_str(),
    )
    .await
    .unwrap();
    let unguarded = mapping(false, "");
    expand::run(&mut conn, &unguarded, dsn.dialect, false)
        .await
        .unwrap();
    let s = backfill::run(&mut conn, &unguarded, dsn.dialect, &Default::default())
        .await
        .unwrap();
    assert!(s.settle_unguarded, "{s:?}");
    assert_eq!(s.settle_time_s, None);
    assert_eq!(
        watermark_of_a(&mut conn).await,
        Some((100, "counter".into()))
    );
    let mut text = Vec::new();
    tidemark::render::text::backfill(&mut text, &s, false).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(text.contains("settle time not guarded"), "{text}");

    // With a creation time and the settle time off: written at once, nothing left.
    conn.execute("DELETE FROM read_watermarks").await.unwrap();
    let off = backfill::BackfillOptions {
        settle_time: Duration::ZERO,
        restart: true,
        ..Default::default()
    };
    let s = backfill::run(&mut conn, &mapping(true, ""), dsn.dialect, &off)
        .await
        .unwrap();
    assert!(!s.settle_unguarded && s.left_unsettled == 0, "{s:?}");
    assert_eq!(
        watermark_of_a(&mut conn).await,
        Some((100, "counter".into()))
    );
    drop(conn);
    db.cleanup().await;
}

/// Issue 12 "Evidence policy": a member with a stale receipt (position 5) listed first and a
/// last-viewed time that resolves to 9. "first" (the default) writes 5 from the receipt;
/// "highest" writes 9 with source `timestamp`. A counter never beats either.
async fn evidence_policy(backend: Backend) {
    for (policy, want) in [
        ("", (5, "position")),
        ("\n[backfill]\npolicy = \"first\"\n", (5, "position")),
        ("\n[backfill]\npolicy = \"highest\"\n", (9, "timestamp")),
    ] {
        let Some(db) = TestDb::create(backend, "bf_policy").await else {
            return;
        };
        let dsn = Dsn::parse(&db.url).unwrap();
        let mut conn = db.connect().await;
        crate::common::exec_all(&mut conn, &scenario::schema_sql()).await;
        let rows: Vec<String> = (1..=12)
            .map(|id| format!("(1, {id}, 'b', 0, 0, {}, NULL)", 1000 + id))
            .collect();
        let stmts = vec![
            format!(
                "INSERT INTO messages (conv_id, id, sender_id, is_deleted, is_system, created_at, unread_count) VALUES {}",
                rows.join(", ")
            ),
            "INSERT INTO members (conv_id, user_id, active, join_position) VALUES (1, 'a', 1, NULL)".into(),
            "INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES (1, 'a', 0)".into(),
            "INSERT INTO read_receipts (conv_id, user_id, message_id) VALUES (1, 'a', 5)".into(),
            "CREATE TABLE last_viewed (conv_id BIGINT NOT NULL, user_id VARCHAR(64) NOT NULL, viewed_at BIGINT NULL)".into(),
            "INSERT INTO last_viewed (conv_id, user_id, viewed_at) VALUES (1, 'a', 1009)".into(),
        ];
        crate::common::exec_all(&mut conn, &stmts).await;
        let extra = format!(
            "\n[[evidence]]\nkind = \"timestamp\"\ntable = \"last_viewed\"\nuser = \"user_id\"\nconversation = \"conv_id\"\ncolumn = \"viewed_at\"\n{policy}"
        );
        // The receipt first, the counter second (scenario mapping), the timestamp last.
        let m = mapping(true, &extra);
        expand::run(&mut conn, &m, dsn.dialect, false)
            .await
            .unwrap();
        let s = backfill::run(&mut conn, &m, dsn.dialect, &Default::default())
            .await
            .unwrap();
        assert_eq!(
            watermark_of_a(&mut conn).await,
            Some((want.0, want.1.to_string())),
            "{backend:?} policy {policy:?}: {s:?}"
        );
        let plan = backfill::statements(&m, dsn.dialect).unwrap();
        let name = if policy.contains("highest") {
            "highest"
        } else {
            "first"
        };
        assert!(
            plan[0].0.contains(&format!("policy \"{name}\"")),
            "{}",
            plan[0].0
        );
        drop(conn);
        db.cleanup().await;
    }
}

/// A bad `[backfill] policy` is exit-2 input, pointing at the value's line.
#[test]
fn evidence_policy_bad_value() {
    let text = format!(
        "{}\n[backfill]\npolicy = \"newest\"\n",
        scenario::mapping_toml("per_member", false)
    );
    let line = text.lines().count();
    let err = Mapping::parse(&text, "m.toml").unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.starts_with(&format!("m.toml:{line}:")), "{msg}");
    assert!(
        msg.contains("\"first\"") && msg.contains("\"highest\""),
        "{msg}"
    );
    assert_eq!(tidemark::cli::Outcome::code_of(&err), 2, "{msg}");
    let unknown = format!(
        "{}\n[backfill]\norder = \"first\"\n",
        scenario::mapping_toml("per_member", false)
    );
    let err = Mapping::parse(&unknown, "m.toml").unwrap_err();
    assert!(
        format!("{err:#}").contains("unknown key `order`"),
        "{err:#}"
    );
}

/// A derived source listed ahead of a position (a last-viewed time, then the receipt) whose
/// watermark would cover a fresh message (issue 29 row 19: held per member, when the value
/// newly covers a message younger than the settle time): under "first" nothing is written now
/// (the receipt must not stand in for the time that will win once settled); under "highest"
/// the receipt is written and the later run may raise it. With the settle time off, the time
/// wins at once.
async fn settle_time_keeps_the_order(backend: Backend) {
    for (policy, settle, want) in [
        ("first", Duration::from_secs(300), None),
        ("highest", Duration::from_secs(300), Some((5, "position"))),
        ("first", Duration::ZERO, Some((11, "timestamp"))),
    ] {
        let Some(db) = TestDb::create(backend, "bf_order").await else {
            return;
        };
        let dsn = Dsn::parse(&db.url).unwrap();
        let mut conn = db.connect().await;
        crate::common::exec_all(&mut conn, &scenario::schema_sql()).await;
        let mut rows: Vec<String> = (1..=10)
            .map(|id| format!("(1, {id}, 'b', 0, 0, {}, NULL)", 1000 + id))
            .collect();
        rows.push(format!("(1, 11, 'b', 0, 0, {}, NULL)", now_s()));
        let stmts = vec![
            format!(
                "INSERT INTO messages (conv_id, id, sender_id, is_deleted, is_system, created_at, unread_count) VALUES {}",
                rows.join(", ")
            ),
            "INSERT INTO members (conv_id, user_id, active, join_position) VALUES (1, 'a', 1, NULL)".into(),
            "INSERT INTO read_receipts (conv_id, user_id, message_id) VALUES (1, 'a', 5)".into(),
            "CREATE TABLE last_viewed (conv_id BIGINT NOT NULL, user_id VARCHAR(64) NOT NULL, viewed_at BIGINT NULL)".into(),
            format!(
                "INSERT INTO last_viewed (conv_id, user_id, viewed_at) VALUES (1, 'a', {})",
                now_s() + 60
            ),
        ];
        crate::common::exec_all(&mut conn, &stmts).await;
        let text = scenario::mapping_toml("per_member", false)
            .replacen(
                "sender = \"sender_id\"",
                "sender = \"sender_id\"\ncreated_at = \"created_at\"",
                1,
            )
            .replacen(
                "[[evidence]]",
                "[[evidence]]\nkind = \"timestamp\"\ntable = \"last_viewed\"\nuser = \"user_id\"\nconversation = \"conv_id\"\ncolumn = \"viewed_at\"\n\n[[evidence]]",
                1,
            )
            + &format!("\n[backfill]\npolicy = \"{policy}\"\n");
        let m = Mapping::parse(&text, "order").unwrap();
        expand::run(&mut conn, &m, dsn.dialect, false)
            .await
            .unwrap();
        let opts = backfill::BackfillOptions {
            settle_time: settle,
            ..Default::default()
        };
        let s = backfill::run(&mut conn, &m, dsn.dialect, &opts)
            .await
            .unwrap();
        assert_eq!(
            watermark_of_a(&mut conn).await,
            want.map(|(v, src)| (v, src.to_string())),
            "{backend:?} policy {policy} settle {settle:?}: {s:?}"
        );
        assert_eq!(s.left_unsettled, u64::from(want.is_none()), "{s:?}");
        drop(conn);
        db.cleanup().await;
    }
}
