//! Several `[members]` rows for one (conversation, user) (issue 25, row 4): before, PostgreSQL's
//! backfill failed with exit 3 ("ON CONFLICT DO UPDATE command cannot affect row a second
//! time"), the audit joined every copy ("12 rows checked, 14 drifting") and MariaDB's backfill
//! counted 13 members for 12 rows. Now every stage refuses such a members table in its
//! preflight, as it refuses several counter rows per member: exit 2 naming how many members
//! and the first of them, nothing written.

use sqlx::Connection;

use crate::common::bin::Run;
use crate::common::faults::{scalar, statuses, Fixture};
use crate::common::{exec_all, on_every_backend, Backend, TestDb};

on_every_backend!(duplicate_member_rows_are_refused);

/// Twelve members in three conversations (users a..d), four messages each, a receipt for
/// half of them; `members` has no primary key, so a row can be there twice.
fn data() -> Vec<String> {
    let mut sql: Vec<String> = tidemark::legacy_schema::schema_sql()
        .into_iter()
        .map(|s| {
            if s.starts_with("CREATE TABLE members") {
                "CREATE TABLE members (conv_id BIGINT NOT NULL, user_id VARCHAR(64) NOT NULL, \
                 active INT NOT NULL DEFAULT 1, join_position BIGINT NULL)"
                    .to_string()
            } else {
                s
            }
        })
        .collect();
    for conv in 1..=3i64 {
        for id in 1..=4i64 {
            sql.push(format!(
                "INSERT INTO messages (conv_id, id, sender_id) VALUES ({conv}, {}, 'a')",
                conv * 10 + id
            ));
        }
        for (n, user) in ["a", "b", "c", "d"].iter().enumerate() {
            sql.push(format!(
                "INSERT INTO members (conv_id, user_id, active) VALUES ({conv}, '{user}', 1)"
            ));
            let unread = if *user == "a" { 0 } else { 2 };
            sql.push(format!(
                "INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES ({conv}, '{user}', {unread})"
            ));
            if n % 2 == 1 {
                sql.push(format!(
                    "INSERT INTO read_receipts (conv_id, user_id, message_id) VALUES ({conv}, '{user}', {})",
                    conv * 10 + 2
                ));
            }
        }
    }
    sql
}

#[track_caller]
fn refused(run: &Run, stage: &str) {
    run.expect_code(2);
    let err = &run.stderr;
    assert!(
        err.contains("2 member(s) have several rows in members")
            && err.contains("the first: conversation 2, user b: 2 rows"),
        "{stage}: the message names the duplicated members and the first of them: {err}"
    );
    assert!(
        err.contains("m.toml:") && err.contains("members.table"),
        "{stage}: the message names the mapping key: {err}"
    );
}

/// `expand` on a clean members table; then two members get a second row. `backfill`,
/// `audit` (per member and per message) and `contract` exit 2 naming the first duplicated
/// member; no watermark and no ledger run is written.
async fn duplicate_member_rows_are_refused(backend: Backend) {
    let Some(db) = TestDb::create(backend, "dup_members").await else {
        return;
    };
    let mut conn = db.connect().await;
    exec_all(&mut conn, &data()).await;
    let f = Fixture::with_mapping(db, &crate::scenario::mapping_toml("per_member", false));
    exec_all(
        &mut conn,
        &[
            "INSERT INTO members (conv_id, user_id, active) VALUES (3, 'c', 1)".to_string(),
            "INSERT INTO members (conv_id, user_id, active) VALUES (2, 'b', 0)".to_string(),
        ],
    )
    .await;
    let backfill = f.run(&["backfill", "--quiet", "--settle-time", "0"]);
    refused(&backfill, "backfill");
    let audit = f.run(&["audit", "--quiet", "--report", "drift.csv"]);
    refused(&audit, "audit");
    assert!(!f.path().join("drift.csv").exists(), "no report");
    let contract = f.run(&["contract"]);
    refused(&contract, "contract");
    assert_eq!(
        scalar(&mut conn, "SELECT COUNT(*) FROM read_watermarks").await,
        0,
        "nothing written"
    );
    assert!(statuses(&mut conn, "backfill").await.is_empty());
    assert!(statuses(&mut conn, "audit").await.is_empty());

    std::fs::write(
        f.path().join("m.toml"),
        crate::scenario::mapping_toml("per_message", false),
    )
    .unwrap();
    let audit = f.run(&["audit", "--quiet", "--report", "drift.csv"]);
    refused(&audit, "audit per message");

    // One row per member again: the stages run.
    exec_all(
        &mut conn,
        &[
            "DELETE FROM members WHERE conv_id = 2 AND user_id = 'b' AND active = 0".to_string(),
            "DELETE FROM members WHERE conv_id = 3 AND user_id = 'c'".to_string(),
            "INSERT INTO members (conv_id, user_id, active) VALUES (3, 'c', 1)".to_string(),
        ],
    )
    .await;
    std::fs::write(
        f.path().join("m.toml"),
        crate::scenario::mapping_toml("per_member", false),
    )
    .unwrap();
    f.run(&["backfill", "--quiet", "--settle-time", "0"])
        .expect_code(0);
    let audit = f.run(&[
        "audit",
        "--quiet",
        "--format",
        "json",
        "--report",
        "drift.csv",
    ]);
    let json: serde_json::Value = serde_json::from_str(&audit.stdout).unwrap();
    assert_eq!(json["rows_checked"], 12, "{}", audit.stdout);
    assert!(
        json["drifting_rows"].as_u64().unwrap() <= 12,
        "{}",
        audit.stdout
    );
    let _ = conn.close().await;
    f.db.cleanup().await;
}
