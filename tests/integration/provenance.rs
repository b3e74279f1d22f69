//! Provenance (issue 25, row 5; semantics.md, "Provenance names where the stored value came
//! from"): a backfill write that does not advance a watermark changes nothing (its source,
//! backfilled value and time included), and the audit report's `watermark_source` says
//! `application` wherever the stored value is not the one the backfill wrote. On every backend,
//! through the binary and the application's own `mark_read` statement (`tidemark sql app`).

use std::collections::BTreeMap;

use sqlx::{AnyConnection, Connection, Row};
use tidemark::values::text;

use crate::app_sql::{parse, App, V};
use crate::common::{bin, csv, exec_all, on_every_backend, Backend, TestDb};
use crate::scenario;

on_every_backend!(
    a_write_that_does_not_advance_changes_nothing,
    the_report_names_what_the_application_moved
);

/// One watermark row: last_read_id, source, updated_at (as text).
type WmRow = (i64, Option<String>, String);

/// Every watermark row by (conversation, user).
async fn watermarks(conn: &mut AnyConnection, backend: Backend) -> BTreeMap<(i64, String), WmRow> {
    let as_text = match backend {
        Backend::Mysql => "CHAR",
        _ => "TEXT",
    };
    sqlx::query(&format!(
        "SELECT conversation_id, user_id, last_read_id, source, CAST(updated_at AS {as_text}) FROM {}",
        scenario::WATERMARK_TABLE
    ))
    .fetch_all(&mut *conn)
    .await
    .unwrap()
    .iter()
    .map(|r| {
        (
            (r.get::<i64, _>(0), text(r, 1).unwrap().unwrap()),
            (
                r.get::<i64, _>(2),
                text(r, 3).unwrap(),
                text(r, 4).unwrap().unwrap(),
            ),
        )
    })
    .collect()
}

/// Every watermark's `backfilled_id` by (conversation, user) (migration V5), or the error
/// of a database without that column (compared as such: a test fails on what it asserts
/// first).
async fn backfilled(
    conn: &mut AnyConnection,
) -> Result<BTreeMap<(i64, String), Option<i64>>, String> {
    Ok(sqlx::query(&format!(
        "SELECT conversation_id, user_id, backfilled_id FROM {}",
        scenario::WATERMARK_TABLE
    ))
    .fetch_all(&mut *conn)
    .await
    .map_err(|e| format!("reading backfilled_id (migration V5): {e}"))?
    .iter()
    .map(|r| {
        (
            (r.get::<i64, _>(0), text(r, 1).unwrap().unwrap()),
            r.get::<Option<i64>, _>(2),
        )
    })
    .collect())
}

/// The report's `watermark_source` and `last_read_id` by (conversation, user).
fn report_sources(path: &std::path::Path) -> BTreeMap<(i64, String), (String, String)> {
    let report = csv::read(path);
    let col = |name: &str| report.columns.iter().position(|c| c == name).unwrap();
    let (c, u, l, s) = (
        col("conversation_id"),
        col("user_id"),
        col("last_read_id"),
        col("watermark_source"),
    );
    report
        .rows
        .iter()
        .map(|r| {
            (
                (r[c].parse().unwrap(), r[u].clone()),
                (r[l].clone(), r[s].clone()),
            )
        })
        .collect()
}

/// Runs `tidemark args… --database URL` in `dir` (the mapping is `dir/tidemark.toml`).
fn tm(dir: &std::path::Path, url: &str, args: &[&str]) -> bin::Run {
    let mut all = args.to_vec();
    all.extend(["--database", url]);
    bin::run(dir, &all)
}

/// The reproduction of the issue: the application's watermark 1000150 (source `app`, as the
/// application's statement of earlier versions wrote it), a receipt at 1000049. The backfill,
/// and `backfill --restart` after it, write nothing: the row keeps its source, time and (no)
/// backfilled value, and the report says `application`.
async fn a_write_that_does_not_advance_changes_nothing(backend: Backend) {
    let Some(db) = TestDb::create(backend, "provenance_kept").await else {
        return;
    };
    let mut conn = db.connect().await;
    exec_all(&mut conn, &scenario::schema_sql()).await;
    let messages: Vec<String> = (1_000_000..=1_000_200)
        .map(|id| format!("(1, {id}, 'sender', 0, 0, NULL, NULL)"))
        .collect();
    exec_all(
        &mut conn,
        &[
            format!(
                "INSERT INTO messages (conv_id, id, sender_id, is_deleted, is_system, created_at, unread_count) VALUES {}",
                messages.join(", ")
            ),
            "INSERT INTO members (conv_id, user_id, active, join_position) VALUES (1, 'reader', 1, NULL)".into(),
            "INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES (1, 'reader', 7)".into(),
            "INSERT INTO read_receipts (conv_id, user_id, message_id) VALUES (1, 'reader', 1000049)".into(),
        ],
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    std::fs::write(
        dir.join("tidemark.toml"),
        scenario::mapping_toml("per_member", false),
    )
    .unwrap();
    let url = db.url.as_str();
    tm(dir, url, &["expand"]).expect_code(0);
    exec_all(
        &mut conn,
        &[format!(
            "INSERT INTO {} (user_id, conversation_id, last_read_id, source) VALUES ('reader', 1, 1000150, 'app')",
            scenario::WATERMARK_TABLE
        )],
    )
    .await;
    let before = watermarks(&mut conn, backend).await;
    let key = (1, "reader".to_string());
    assert_eq!(before[&key].0, 1_000_150);

    for args in [&["backfill"][..], &["backfill", "--restart"][..]] {
        let run = tm(dir, url, args);
        run.expect_code(0);
        assert!(
            run.stdout.contains("wrote 0 watermarks")
                && run
                    .stdout
                    .contains("1 already at or past the evidence, left as they were"),
            "{args:?}:\n{}",
            run.stdout
        );
        let after = watermarks(&mut conn, backend).await;
        assert_eq!(
            after[&key], before[&key],
            "{args:?}: (last_read_id, source, updated_at) of the application's row"
        );
        assert_eq!(
            backfilled(&mut conn).await.map(|b| b[&key]),
            Ok(None),
            "{args:?}: the backfill wrote no value"
        );
    }
    tm(dir, url, &["audit", "--report", "r.csv", "-q"]).expect_code(1);
    let sources = report_sources(&dir.join("r.csv"));
    assert_eq!(
        sources[&key],
        ("1000150".to_string(), "application".to_string()),
        "the report's last_read_id and watermark_source"
    );
    conn.close().await.unwrap();
    db.cleanup().await;
}

/// Conversations and users of the second test: 4 conversations of 100 messages by `sender`,
/// members u0..u4 with a NULL counter each (every row drifts, so every row is in the report).
const CONVERSATIONS: i64 = 4;
const USERS: i64 = 5;

/// Whether the application moves the watermark of (conversation, user `u<i>`).
fn moved(conv: i64, user: i64) -> bool {
    (conv + user) % 3 == 0
}

/// Backfill, then the application advances part of the watermarks through the `mark_read`
/// statement `tidemark sql app` prints, then a second backfill (`--restart`) with lower
/// evidence: it writes nothing, and the report says `application` for exactly the rows the
/// application moved, `position` for the others.
async fn the_report_names_what_the_application_moved(backend: Backend) {
    let Some(db) = TestDb::create(backend, "provenance_moved").await else {
        return;
    };
    let mut conn = db.connect().await;
    exec_all(&mut conn, &scenario::schema_sql()).await;
    let mut data = Vec::new();
    for c in 1..=CONVERSATIONS {
        let messages: Vec<String> = (1..=100)
            .map(|id| format!("({c}, {id}, 'sender', 0, 0, NULL, NULL)"))
            .collect();
        data.push(format!(
            "INSERT INTO messages (conv_id, id, sender_id, is_deleted, is_system, created_at, unread_count) VALUES {}",
            messages.join(", ")
        ));
        for u in 0..USERS {
            data.push(format!(
                "INSERT INTO members (conv_id, user_id, active, join_position) VALUES ({c}, 'u{u}', 1, NULL)"
            ));
            data.push(format!(
                "INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES ({c}, 'u{u}', NULL)"
            ));
            data.push(format!(
                "INSERT INTO read_receipts (conv_id, user_id, message_id) VALUES ({c}, 'u{u}', 50)"
            ));
        }
    }
    exec_all(&mut conn, &data).await;
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    std::fs::write(
        dir.join("tidemark.toml"),
        scenario::mapping_toml("per_member", false),
    )
    .unwrap();
    let url = db.url.as_str();
    tm(dir, url, &["expand"]).expect_code(0);
    tm(dir, url, &["backfill", "-q"]).expect_code(0);

    // The application reads further in part of the conversations, with its own statement.
    let printed = tm(dir, url, &["sql", "app"]);
    printed.expect_code(0);
    let app = App {
        statements: parse(&printed.stdout),
    };
    let mut n_moved = 0;
    for c in 1..=CONVERSATIONS {
        for u in (0..USERS).filter(|u| moved(c, *u)) {
            app.run(
                &mut conn,
                "mark_read",
                &[
                    ("user", V::Text(format!("u{u}"))),
                    ("conversation", V::Int(c)),
                    ("message", V::Int(80)),
                ],
            )
            .await;
            n_moved += 1;
        }
    }
    assert!(n_moved > 0 && n_moved < CONVERSATIONS * USERS);

    // Lower evidence, and the backfill run again from the start: nothing advances.
    exec_all(
        &mut conn,
        &["UPDATE read_receipts SET message_id = 30".to_string()],
    )
    .await;
    let before = watermarks(&mut conn, backend).await;
    let before_backfilled = backfilled(&mut conn).await;
    let run = tm(dir, url, &["backfill", "--restart"]);
    run.expect_code(0);

    // What the audit reports, first: the symptom.
    tm(dir, url, &["audit", "--report", "r.csv", "-q"]).expect_code(1);
    let sources = report_sources(&dir.join("r.csv"));
    let mut want = BTreeMap::new();
    for c in 1..=CONVERSATIONS {
        for u in 0..USERS {
            let row = if moved(c, u) {
                ("80".to_string(), "application".to_string())
            } else {
                ("50".to_string(), "position".to_string())
            };
            want.insert((c, format!("u{u}")), row);
        }
    }
    assert_eq!(
        sources, want,
        "the report's (last_read_id, watermark_source) per (conversation, user)"
    );
    // The second backfill wrote nothing and changed nothing.
    assert!(
        run.stdout.contains("wrote 0 watermarks")
            && run.stdout.contains(&format!(
                "{} already at or past the evidence",
                CONVERSATIONS * USERS
            )),
        "{}",
        run.stdout
    );
    assert_eq!(
        watermarks(&mut conn, backend).await,
        before,
        "(last_read_id, source, updated_at) after a backfill that advanced nothing"
    );
    assert_eq!(backfilled(&mut conn).await, before_backfilled);
    conn.close().await.unwrap();
    db.cleanup().await;
}
