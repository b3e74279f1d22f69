//! Several rows of a plain `[counter] column` for one member (issue 29, row 12): the
//! duplicate check ran only for `value` / `rows` counters, so a counter table without a key
//! on (conversation, user) gave "wrote 9 watermarks" for one member and the audit reported
//! the member twice. Now every stage refuses it before anything is written (exit 2 naming
//! how many members and the first of them, as for `combine = "single"`), and `inspect` warns.

use crate::common::bin;
use crate::common::faults::{scalar, statuses, Fixture};
use crate::common::{exec_all, on_every_backend, Backend, TestDb};

on_every_backend!(plain_counter_with_several_rows_per_member_is_refused);

/// The legacy schema with `unread_counters` keyed by nothing; two conversations of four
/// messages from `a`; members `a`, `b`, `c`, one counter row each.
fn data() -> Vec<String> {
    let mut sql: Vec<String> = tidemark::legacy_schema::schema_sql()
        .into_iter()
        .map(|s| {
            if s.starts_with("CREATE TABLE unread_counters") {
                "CREATE TABLE unread_counters (conv_id BIGINT NOT NULL, \
                 user_id VARCHAR(64) NOT NULL, unread_count INT NULL)"
                    .to_string()
            } else {
                s
            }
        })
        .collect();
    sql.extend(crate::common::two_small_conversations(|conv| conv * 10, 2));
    sql
}

/// After `expand` on one row per member, member (2, c) gets two more counter rows and
/// (1, b) one more: `backfill`, `audit` and `contract` exit 2 naming the 2 members and the
/// first, (1, b) with 2 rows; nothing is written. `inspect` warns about the 2 pairs. With
/// one row per member again, the backfill writes one watermark per member.
async fn plain_counter_with_several_rows_per_member_is_refused(backend: Backend) {
    let Some(db) = TestDb::create(backend, "counter_rows").await else {
        return;
    };
    let mut conn = db.connect().await;
    exec_all(&mut conn, &data()).await;
    let f = Fixture::with_mapping(db, &crate::scenario::mapping_toml("per_member", false));
    let extra = [
        "INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES (1, 'b', 1)",
        "INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES (2, 'c', 0)",
        "INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES (2, 'c', 3)",
    ];
    exec_all(&mut conn, &extra.map(String::from)).await;
    for args in [
        &["backfill", "--quiet", "--settle-time", "0"][..],
        &["audit", "--quiet", "--report", "drift.csv"][..],
        &["contract"][..],
    ] {
        let run = f.run(args);
        run.expect_code(2);
        assert!(
            run.stderr
                .contains("2 member(s) have several counter rows in unread_counters")
                && run
                    .stderr
                    .contains("(the first: conversation 1, user b: 2 rows)"),
            "{}: the members are named: {}",
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

    let inspect = bin::run(
        f.path(),
        &[
            "inspect",
            "--database",
            &f.db.url,
            "--output",
            "proposed.toml",
        ],
    );
    let text = std::fs::read_to_string(f.path().join("proposed.toml")).unwrap_or_default();
    assert!(
        text.contains("2 (user_id, conv_id) pairs have more than one row in unread_counters")
            && text.contains("not one value per member (threads? devices?): refused"),
        "inspect warns: {inspect:?}\n{text}"
    );

    exec_all(
        &mut conn,
        &[
            "DELETE FROM unread_counters WHERE (conv_id = 1 AND user_id = 'b' AND unread_count = 1) \
             OR (conv_id = 2 AND user_id = 'c' AND unread_count <> 2)"
                .to_string(),
        ],
    )
    .await;
    let run = f.run(&["backfill", "--settle-time", "0"]);
    run.expect_code(0);
    assert!(run.stdout.contains("wrote 6 watermarks"), "{}", run.stdout);
    drop(conn);
    f.db.cleanup().await;
}
