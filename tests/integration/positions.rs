//! Positions at or below 0 (issue 29, rows 4 and 23; semantics.md "Terms", position, and
//! "Backfill" 1).
//!
//! Row 4: a messages table whose positions include a value <= 0 (ids counting up from
//! −29 997) was backfilled: counter evidence k >= the member's countable messages wrote
//! watermark 0, above every message, so 86 unread became 0 and the audit called it
//! `overcount`. Now every stage refuses it before anything is written: exit 2 naming
//! `messages.id` and its smallest value.
//!
//! Row 23: position evidence below 0 (a real system writes −1 and −2 as "nothing read")
//! became a negative watermark with source `position`, and the counter never filled it. Now
//! a value below 0 is no position: the next source applies, and the summary counts such
//! members. A 0 stays what it was, the evidence "nothing read" (watermark 0 from `position`),
//! as `shared/spec/scenarios.json` (S7, K1, K2) expects.

use crate::common::faults::{scalar, statuses, watermarks, Fixture};
use crate::common::{exec_all, on_every_backend, Backend, TestDb};

on_every_backend!(positions_at_or_below_zero_are_refused);
on_every_backend!(position_evidence_below_zero_is_no_position);

/// Two conversations of four messages from `a` (positions 1..4, and 11..14), members `a`,
/// `b`, `c` in each, `b` and `c` with 3 unread; no receipt.
fn data() -> Vec<String> {
    let mut sql = tidemark::legacy_schema::schema_sql();
    sql.extend(crate::common::two_small_conversations(
        |conv| (conv - 1) * 10,
        3,
    ));
    sql
}

/// Row 4: after `expand` on good data, conversation 3 gets eight messages at −29 997 …
/// −29 990 and a member whose counter (9) exceeds them. `backfill`, `audit`, `contract` and a
/// new `expand` exit 2 naming `messages.id`, how many positions are bad and the smallest;
/// no watermark, no ledger run and no report is written. Without them the backfill runs.
async fn positions_at_or_below_zero_are_refused(backend: Backend) {
    let Some(db) = TestDb::create(backend, "positions_neg").await else {
        return;
    };
    let mut conn = db.connect().await;
    exec_all(&mut conn, &data()).await;
    let f = Fixture::with_mapping(db, &crate::scenario::mapping_toml("per_member", false));
    let mut bad: Vec<String> = (-29997..=-29990i64)
        .map(|id| format!("INSERT INTO messages (conv_id, id, sender_id) VALUES (3, {id}, 'a')"))
        .collect();
    bad.push("INSERT INTO members (conv_id, user_id, active) VALUES (3, 'b', 1)".into());
    bad.push(
        "INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES (3, 'b', 9)".into(),
    );
    exec_all(&mut conn, &bad).await;
    for args in [
        &["backfill", "--quiet", "--settle-time", "0"][..],
        &["audit", "--quiet", "--report", "drift.csv"][..],
        &["contract"][..],
        &["expand"][..],
    ] {
        let run = f.run(args);
        run.expect_code(2);
        assert!(
            run.stderr.contains("m.toml:")
                && run.stderr.contains("messages.id = \"id\"")
                && run
                    .stderr
                    .contains("8 message(s) of messages have a position <= 0")
                && run.stderr.contains("(the smallest: -29997)"),
            "{}: the column and its smallest value are named: {}",
            args[0],
            run.stderr
        );
    }
    assert!(!f.path().join("drift.csv").exists(), "no report");
    assert_eq!(
        scalar(&mut conn, "SELECT COUNT(*) FROM read_watermarks").await,
        0,
        "nothing written"
    );
    assert!(statuses(&mut conn, "backfill").await.is_empty());
    assert!(statuses(&mut conn, "audit").await.is_empty());

    // Position 0 alone is refused too: 0 means "nothing read".
    exec_all(
        &mut conn,
        &[
            "DELETE FROM messages WHERE id < 0".to_string(),
            "INSERT INTO messages (conv_id, id, sender_id) VALUES (3, 0, 'a')".to_string(),
        ],
    )
    .await;
    let run = f.run(&["backfill", "--quiet", "--settle-time", "0"]);
    run.expect_code(2);
    assert!(
        run.stderr
            .contains("1 message(s) of messages have a position <= 0 (the smallest: 0)"),
        "{}",
        run.stderr
    );

    exec_all(
        &mut conn,
        &["DELETE FROM messages WHERE id <= 0".to_string()],
    )
    .await;
    f.run(&["backfill", "--quiet", "--settle-time", "0"])
        .expect_code(0);
    let got = watermarks(&mut conn).await;
    assert!(
        got.contains(&"1|b|1|counter".to_string()) && got.contains(&"2|c|11|counter".to_string()),
        "{got:?}"
    );
    drop(conn);
    f.db.cleanup().await;
}

/// Row 23: conversation 1 (positions 1..4 from `a`); receipts: `b` only −1, `c` −2 and −1,
/// `d` −1 and 3, `e` 0; counters `b` 2, `c` 0, `d` 1, `e` 4. `b` and `c` have no position:
/// the counter applies (`b`: L[2] = 2; `c`: k = 0, the newest, 4); `d` keeps its position 3
/// and `e` its 0 ("nothing read"); the summary counts the 2 members (text and JSON) and the
/// evidence share samples only `d`'s 3 and `e`'s 0.
async fn position_evidence_below_zero_is_no_position(backend: Backend) {
    let Some(db) = TestDb::create(backend, "positions_evid").await else {
        return;
    };
    let mut conn = db.connect().await;
    let mut sql = tidemark::legacy_schema::schema_sql();
    for id in 1..=4i64 {
        sql.push(format!(
            "INSERT INTO messages (conv_id, id, sender_id) VALUES (1, {id}, 'a')"
        ));
    }
    for (user, unread, receipts) in [
        ("b", 2, &[-1i64][..]),
        ("c", 0, &[-2, -1][..]),
        ("d", 1, &[-1, 3][..]),
        ("e", 4, &[0][..]),
    ] {
        sql.push(format!(
            "INSERT INTO members (conv_id, user_id, active) VALUES (1, '{user}', 1)"
        ));
        sql.push(format!(
            "INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES (1, '{user}', {unread})"
        ));
        for r in receipts {
            sql.push(format!(
                "INSERT INTO read_receipts (conv_id, user_id, message_id) VALUES (1, '{user}', {r})"
            ));
        }
    }
    exec_all(&mut conn, &sql).await;
    let f = Fixture::with_mapping(db, &crate::scenario::mapping_toml("per_member", false));
    let dry = f.run(&[
        "backfill",
        "--dry-run",
        "--settle-time",
        "0",
        "--format",
        "json",
    ]);
    dry.expect_code(0);
    let json: serde_json::Value = serde_json::from_str(&dry.stdout).unwrap();
    assert_eq!(json["not_positions"], 2, "{}", dry.stdout);
    let run = f.run(&["backfill", "--settle-time", "0"]);
    run.expect_code(0);
    assert!(
        run.stdout.contains(
            "2 members' position evidence was below 0 (a \"nothing read\" marker), no position: the next source applied"
        ) && run.stdout.contains(
            "evidence[1] position read_receipts.message_id: 100.0 % of 2 sampled values"
        ),
        "{}",
        run.stdout
    );
    assert_eq!(
        watermarks(&mut conn).await,
        vec![
            "1|b|2|counter",
            "1|c|4|counter",
            "1|d|3|position",
            "1|e|0|position"
        ]
    );
    let audit = f.run(&["audit", "--report", "drift.csv"]);
    audit.expect_code(0);
    drop(conn);
    f.db.cleanup().await;
}
