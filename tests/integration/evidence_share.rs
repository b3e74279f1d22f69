//! The evidence share (issue 24; `sql/common/evidence_share.sql`, rewritten for issue 29 row 20
//! and issue 30): the figures are right on every engine. The statement reads a sample of each
//! entry's values and judges each sampled row; since issue 30 a counter's conversation is
//! counted, and a timestamp's conversation's first message found, once per distinct sampled
//! conversation (of at most SAMPLE_CONVERSATIONS) instead of once per sampled row, and the
//! sample is joined by key instead of probed by a correlated subquery (which Citus refuses). These tests pin what each sampled row
//! is judged against.
//!
//! Data (the scenario schema, plus `last_viewed` for timestamp evidence): conversation 1 is a
//! channel of 40 members and 30 messages (ids 1-30, created at 1001-1030), conversation 2 has
//! 10 members and 5 messages (ids 101-105, created at 2001-2005), conversation 3 has 5 members
//! and no message. Each member has one receipt, one counter and one last-viewed time, chosen so
//! that some fit and some do not, for a reason the comment next to it names.

use crate::common::{exec_all, on_every_backend, Backend, TestDb};
use tidemark::db::Dsn;
use tidemark::dialect::SqlContext;
use tidemark::legacy_schema as scenario;
use tidemark::mapping::{Mapping, Shape};
use tidemark::schema::evidence_share::{measure, Share, SAMPLE_CONVERSATIONS, SAMPLE_ROWS};

/// The scenario mapping per member with `messages.created_at`, its evidence: [1] the receipts'
/// positions, [2] the counter, [3] `last_viewed.viewed_at`.
fn mapping() -> Mapping {
    let text = scenario::mapping_toml(Shape::PerMember, false)
        .replace(
            "sender = \"sender_id\"\n",
            "sender = \"sender_id\"\ncreated_at = \"created_at\"\n",
        )
        .replace(
            "\n[watermarks]",
            "\n[[evidence]]\nkind = \"timestamp\"\ntable = \"last_viewed\"\nuser = \"user_id\"\n\
             conversation = \"conv_id\"\ncolumn = \"viewed_at\"\n\n[watermarks]",
        );
    Mapping::parse(&text, "tidemark.toml").unwrap()
}

/// Rows of `table` (columns `cols`) as INSERT statements of at most 500 rows each.
fn inserts(table: &str, cols: &str, rows: &[String]) -> Vec<String> {
    rows.chunks(500)
        .map(|c| format!("INSERT INTO {table} ({cols}) VALUES {}", c.join(", ")))
        .collect()
}

/// The schema and the `last_viewed` table.
fn schema() -> Vec<String> {
    let mut s = scenario::schema_sql();
    s.push(
        "CREATE TABLE last_viewed (conv_id BIGINT NOT NULL, user_id VARCHAR(64) NOT NULL, \
         viewed_at BIGINT NULL)"
            .into(),
    );
    s
}

/// The three conversations of the module's data.
fn three_conversations() -> Vec<String> {
    let mut messages = Vec::new();
    for id in 1..=30 {
        messages.push(format!("(1, {id}, 'x', 0, 0, {})", 1000 + id));
    }
    for id in 101..=105 {
        messages.push(format!("(2, {id}, 'x', 0, 0, {})", 1900 + id));
    }
    let (mut receipts, mut counters, mut viewed) = (Vec::new(), Vec::new(), Vec::new());
    for i in 1..=40 {
        // Conversation 1: every receipt a position of it (1-30): 40 fit.
        receipts.push(format!("(1, 'u{i}', {})", i % 30 + 1));
        // 0-31 and -1: 31 (above its 30 messages) and -1 do not fit: 38 fit.
        let stored = if i == 40 { -1 } else { i % 32 };
        counters.push(format!("(1, 'u{i}', {stored})"));
        // Five times before its first message (1001): 35 fit.
        let at = if i <= 5 { 990 } else { 1000 + i };
        viewed.push(format!("(1, 'u{i}', {at})"));
    }
    for i in 1..=10 {
        // Conversation 2: four receipts hold 5, a position of conversation 1: 6 fit.
        let position = if i <= 4 { 5 } else { 100 + i % 5 + 1 };
        receipts.push(format!("(2, 'u{i}', {position})"));
        // 0-9 against 5 messages: 0-5 fit, 6.
        counters.push(format!("(2, 'u{i}', {})", i - 1));
        // 1998-2007 against its first message at 2001: 7 fit.
        viewed.push(format!("(2, 'u{i}', {})", 1997 + i));
    }
    // NULLs are not sampled.
    counters.push("(2, 'u11', NULL)".into());
    viewed.push("(2, 'u11', NULL)".into());
    for i in 1..=5 {
        // Conversation 3 has no message: no receipt fits, a counter of 0 does (3 of 5), no
        // time does.
        receipts.push(format!("(3, 'u{i}', 7)"));
        counters.push(format!("(3, 'u{i}', {})", [0, 0, 1, 0, 2][i - 1]));
        viewed.push(format!("(3, 'u{i}', 5000)"));
    }
    let mut out = inserts(
        "messages",
        "conv_id, id, sender_id, is_deleted, is_system, created_at",
        &messages,
    );
    out.extend(inserts(
        "read_receipts",
        "conv_id, user_id, message_id",
        &receipts,
    ));
    out.extend(inserts(
        "unread_counters",
        "conv_id, user_id, unread_count",
        &counters,
    ));
    out.extend(inserts(
        "last_viewed",
        "conv_id, user_id, viewed_at",
        &viewed,
    ));
    out
}

/// Each entry's (entry, kind, measured, fits).
fn figures(shares: &[Share]) -> Vec<(usize, String, u64, u64)> {
    shares
        .iter()
        .map(|s| (s.entry, s.kind.clone(), s.measured, s.fits))
        .collect()
}

/// The module's data: every sampled row judged against its own conversation, whatever the
/// other rows of that conversation hold.
async fn figures_are_per_sampled_row(backend: Backend) {
    let Some(db) = TestDb::create(backend, "share_rows").await else {
        return;
    };
    let dialect = Dsn::parse(&db.url).unwrap().dialect;
    let mut conn = db.connect().await;
    exec_all(&mut conn, &schema()).await;
    exec_all(&mut conn, &three_conversations()).await;
    let m = mapping();
    let shares = measure(&mut conn, &m, &SqlContext::new(&m, dialect))
        .await
        .unwrap();
    assert_eq!(
        figures(&shares),
        [
            (1, "position".to_string(), 55, 46),
            (2, "counter".to_string(), 55, 47),
            (3, "timestamp".to_string(), 55, 42),
        ],
        "{backend:?}"
    );
    assert_eq!(
        shares[2].describe(),
        "76.4 % of 55 sampled values are at or after their conversation's first message"
    );
    drop(conn);
    db.cleanup().await;
}

/// A channel whose members fill the sample (issue 30's "large channels"): 12,000 members of
/// one conversation of 50 messages, every counter within 0-50, every receipt a position and
/// every time after the first message. The sample stops at SAMPLE_ROWS rows, each fits.
async fn a_channel_that_fills_the_sample(backend: Backend) {
    let Some(db) = TestDb::create(backend, "share_channel").await else {
        return;
    };
    let dialect = Dsn::parse(&db.url).unwrap().dialect;
    let mut conn = db.connect().await;
    exec_all(&mut conn, &schema()).await;
    let messages: Vec<String> = (1..=50)
        .map(|id| format!("(9, {id}, 'x', 0, 0, {})", 1000 + id))
        .collect();
    let mut load = inserts(
        "messages",
        "conv_id, id, sender_id, is_deleted, is_system, created_at",
        &messages,
    );
    let members = 12_000u64;
    let rows = |f: &dyn Fn(u64) -> String| (1..=members).map(f).collect::<Vec<_>>();
    load.extend(inserts(
        "read_receipts",
        "conv_id, user_id, message_id",
        &rows(&|i| format!("(9, 'u{i}', {})", i % 50 + 1)),
    ));
    load.extend(inserts(
        "unread_counters",
        "conv_id, user_id, unread_count",
        &rows(&|i| format!("(9, 'u{i}', {})", i % 51)),
    ));
    load.extend(inserts(
        "last_viewed",
        "conv_id, user_id, viewed_at",
        &rows(&|i| format!("(9, 'u{i}', {})", 1001 + i % 60)),
    ));
    exec_all(&mut conn, &load).await;
    let m = mapping();
    let shares = measure(&mut conn, &m, &SqlContext::new(&m, dialect))
        .await
        .unwrap();
    let n = SAMPLE_ROWS;
    assert_eq!(
        figures(&shares),
        [
            (1, "position".to_string(), n, n),
            (2, "counter".to_string(), n, n),
            (3, "timestamp".to_string(), n, n),
        ],
        "{backend:?}"
    );
    drop(conn);
    db.cleanup().await;
}

/// Direct messages, one sampled row per conversation (issue 30's worst case for reading each
/// sampled conversation once): 1,500 conversations of 2 messages, one member each, every value
/// fitting. Positions are probed per row (all 1,500 measured); the counter and the timestamp
/// measure the rows of SAMPLE_CONVERSATIONS conversations.
async fn direct_messages_measure_at_most_the_conversation_cap(backend: Backend) {
    let Some(db) = TestDb::create(backend, "share_direct").await else {
        return;
    };
    let dialect = Dsn::parse(&db.url).unwrap().dialect;
    let mut conn = db.connect().await;
    exec_all(&mut conn, &schema()).await;
    let convs = 1_500u64;
    let per = |f: &dyn Fn(u64) -> String| (1..=convs).map(f).collect::<Vec<_>>();
    let mut load = inserts(
        "messages",
        "conv_id, id, sender_id, is_deleted, is_system, created_at",
        &(1..=convs)
            .flat_map(|c| {
                [
                    format!("({c}, 1, 'x', 0, 0, 100)"),
                    format!("({c}, 2, 'x', 0, 0, 200)"),
                ]
            })
            .collect::<Vec<_>>(),
    );
    load.extend(inserts(
        "read_receipts",
        "conv_id, user_id, message_id",
        &per(&|c| format!("({c}, 'u', {})", c % 2 + 1)),
    ));
    load.extend(inserts(
        "unread_counters",
        "conv_id, user_id, unread_count",
        &per(&|c| format!("({c}, 'u', {})", c % 3)),
    ));
    load.extend(inserts(
        "last_viewed",
        "conv_id, user_id, viewed_at",
        &per(&|c| format!("({c}, 'u', {})", 100 + c)),
    ));
    exec_all(&mut conn, &load).await;
    let m = mapping();
    let shares = measure(&mut conn, &m, &SqlContext::new(&m, dialect))
        .await
        .unwrap();
    let k = SAMPLE_CONVERSATIONS;
    assert_eq!(
        figures(&shares),
        [
            (1, "position".to_string(), convs, convs),
            (2, "counter".to_string(), k, k),
            (3, "timestamp".to_string(), k, k),
        ],
        "{backend:?}"
    );
    drop(conn);
    db.cleanup().await;
}

on_every_backend!(
    figures_are_per_sampled_row,
    a_channel_that_fills_the_sample,
    direct_messages_measure_at_most_the_conversation_cap
);
