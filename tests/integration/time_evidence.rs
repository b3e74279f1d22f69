//! Timestamp evidence as the database compares times (issue 29, rows 2, 3, 5 and 9;
//! semantics.md "Backfill", timestamp evidence), run through the built binary:
//!
//! - row 2 (PostgreSQL, MariaDB): times compare in the database's own time zone (PostgreSQL:
//!   `ALTER DATABASE … SET timezone`, which the driver's `TimeZone=UTC` used to hide) or in the
//!   zone `--time-zone` names (MariaDB: the server's global zone is shared by every test, so the
//!   option stands in for it); the settle time uses the same zone; a wall time beside an instant
//!   is named in a notice; a zone the server does not know is exit 2;
//! - row 3 (SQLite): text times compare as times (ISO 8601 with `T`, `Z`, offsets, fractions;
//!   integers as Unix seconds), a text that is no time is no evidence and is counted;
//! - row 5 (MariaDB): a zero date or a date with a zero day is no evidence, and is counted;
//! - row 9 (PostgreSQL, MariaDB): an integer `created_at` beside date/time evidence (and the
//!   reverse) is exit 2 before anything is written, naming both columns and their types.
//!
//! The data: conversation 1 has messages 1, 2, 3 created one minute apart; each member's
//! counter is 2, which names message 1 (newest first: 3, 2, 1) where the counter applies.

use std::path::Path;

use sqlx::AnyConnection;

use crate::common::bin::{run, Run};
use crate::common::faults::{scalar, watermarks};
use crate::common::{exec_all, on_every_backend, Backend, TestDb};

on_every_backend!(servers: zone_of_the_session, number_beside_time_is_refused);
on_every_backend!(text_times_compare_as_times, zero_dates_are_no_evidence);

/// The mapping: timestamp evidence first, the counter second (policy "first").
const MAPPING: &str = r#"
[messages]
table = "messages"
id = "id"
conversation = "conv_id"
sender = "sender_id"
created_at = "created_at"

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

[[evidence]]
kind = "timestamp"
table = "read_times"
user = "user_id"
conversation = "conv_id"
column = "last_read_at"

[[evidence]]
kind = "counter"

[watermarks]
table = "read_watermarks"
"#;

/// The four tables, with `created_at` of type `msg_time` and `last_read_at` of `ev_time`.
fn schema(msg_time: &str, ev_time: &str) -> Vec<String> {
    vec![
        format!(
            "CREATE TABLE messages (id BIGINT NOT NULL, conv_id BIGINT NOT NULL, \
             sender_id VARCHAR(32) NULL, created_at {msg_time} NULL, PRIMARY KEY (id))"
        ),
        "CREATE TABLE members (conv_id BIGINT NOT NULL, user_id VARCHAR(32) NOT NULL, \
         PRIMARY KEY (conv_id, user_id))"
            .into(),
        "CREATE TABLE counters (conv_id BIGINT NOT NULL, user_id VARCHAR(32) NOT NULL, \
         unread_count INTEGER NOT NULL, PRIMARY KEY (conv_id, user_id))"
            .into(),
        format!(
            "CREATE TABLE read_times (conv_id BIGINT NOT NULL, user_id VARCHAR(32) NOT NULL, \
             last_read_at {ev_time} NULL, PRIMARY KEY (conv_id, user_id))"
        ),
    ]
}

/// Members `users` of conversation `conv`, each with the counter `k`.
fn members(conv: i64, users: &[&str], k: i64) -> Vec<String> {
    users
        .iter()
        .flat_map(|u| {
            [
                format!("INSERT INTO members (conv_id, user_id) VALUES ({conv}, '{u}')"),
                format!(
                    "INSERT INTO counters (conv_id, user_id, unread_count) VALUES ({conv}, '{u}', {k})"
                ),
            ]
        })
        .collect()
}

/// Runs `tidemark ARGS --database URL --mapping m.toml` in `dir`.
fn tm(dir: &Path, db: &TestDb, args: &[&str]) -> Run {
    let mut all = args.to_vec();
    all.extend(["--database", &db.url, "--mapping", "m.toml"]);
    run(dir, &all)
}

/// A test database with [`MAPPING`] written into a fresh folder.
async fn setup(
    backend: Backend,
    label: &str,
) -> Option<(TestDb, tempfile::TempDir, AnyConnection)> {
    let db = TestDb::create(backend, label).await?;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("m.toml"), MAPPING).unwrap();
    let conn = db.connect().await;
    Some((db, dir, conn))
}

/// The backfill's JSON summary (exit 0 asserted).
fn backfill_json(dir: &Path, db: &TestDb, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["backfill", "--format", "json"];
    args.extend(extra);
    let out = tm(dir, db, &args);
    out.expect_code(0);
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("backfill JSON: {e}\n{}", out.stdout))
}

/// Row 2. Conversation 1's messages were created at 10:00, 10:30 and 11:00 New York wall time
/// (`created_at` without zone); u1 read at 10:15 New York time (an instant, `-04` in June):
/// watermark 1. Read in UTC, as the driver's session had it, 10:00…11:00 were all before 14:15
/// UTC and u1 got 3 (two unread messages marked read). Conversation 2's one message was created
/// now (New York wall time); u3's counter 0 would mark it read, but it is younger than the
/// settle time: held (in UTC it looked 4 or 5 hours old, and was covered).
///
/// PostgreSQL: the database's `timezone` is America/New_York, no option; then again with
/// `--time-zone -04:00` in a database left in UTC (an offset means four hours behind UTC on
/// every server: PostgreSQL itself would read a bare `-04:00` the POSIX way, four hours
/// ahead, and u1 got 3). MariaDB: the server's global zone is every test's, so `--time-zone
/// -04:00` names the zone instead. A zone the server does not know is exit 2 naming it,
/// before expand writes anything.
async fn zone_of_the_session(backend: Backend) {
    zone_case(backend, backend != Backend::Postgres).await;
    if backend == Backend::Postgres {
        zone_case(backend, true).await;
    }
}

/// One run of [`zone_of_the_session`]: the zone named with `--time-zone -04:00` (`named`) or,
/// on PostgreSQL, the database's own.
async fn zone_case(backend: Backend, named: bool) {
    let Some((db, dir, mut conn)) = setup(backend, "tz_session").await else {
        return;
    };
    let d = dir.path();
    let (types, read_at, now_local, option): (_, _, _, &[&str]) = match backend {
        Backend::Postgres if named => (
            ("timestamp", "timestamptz"),
            "'2024-06-01 10:15:00-04'",
            "(now() AT TIME ZONE 'UTC' - INTERVAL '4 hours')",
            &["--time-zone", "-04:00"],
        ),
        Backend::Postgres => {
            exec_all(
                &mut conn,
                &[format!(
                    "ALTER DATABASE \"{}\" SET timezone = 'America/New_York'",
                    db.name
                )],
            )
            .await;
            (
                ("timestamp", "timestamptz"),
                "'2024-06-01 10:15:00-04'",
                "(now() AT TIME ZONE 'America/New_York')",
                &[],
            )
        }
        _ => {
            exec_all(&mut conn, &["SET time_zone = '+00:00'".to_string()]).await;
            (
                ("DATETIME", "TIMESTAMP"),
                "'2024-06-01 14:15:00'",
                "(UTC_TIMESTAMP() - INTERVAL 4 HOUR)",
                &["--time-zone", "-04:00"],
            )
        }
    };
    let mut sql = schema(types.0, types.1);
    sql.push(
        "INSERT INTO messages (id, conv_id, sender_id, created_at) VALUES \
         (1, 1, 'u0', '2024-06-01 10:00:00'), (2, 1, 'u0', '2024-06-01 10:30:00'), \
         (3, 1, 'u0', '2024-06-01 11:00:00')"
            .into(),
    );
    sql.push(format!(
        "INSERT INTO messages (id, conv_id, sender_id, created_at) VALUES (4, 2, 'u0', {now_local})"
    ));
    sql.extend(members(1, &["u1", "u2"], 0));
    sql.extend(members(2, &["u3"], 0));
    sql.push(format!(
        "INSERT INTO read_times (conv_id, user_id, last_read_at) VALUES (1, 'u1', {read_at})"
    ));
    exec_all(&mut conn, &sql).await;

    let bad = tm(d, &db, &["expand", "--time-zone", "Mars/Olympus"]);
    assert_eq!(bad.code, Some(2), "{}: {bad:?}", backend.name());
    assert!(bad.stderr.contains("Mars/Olympus"), "{bad:?}");
    let tables = match backend {
        Backend::Postgres => scalar(&mut conn, "SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 'read_watermarks'").await,
        _ => scalar(&mut conn, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 'read_watermarks'").await,
    };
    assert_eq!(tables, 0, "{}: expand refused but wrote", backend.name());

    let mut expand = vec!["expand"];
    expand.extend(option);
    tm(d, &db, &expand).expect_code(0);
    let summary = backfill_json(d, &db, option);
    assert_eq!(
        watermarks(&mut conn).await,
        vec!["1|u1|1|timestamp", "1|u2|3|counter"],
        "{}: {summary}",
        backend.name()
    );
    assert_eq!(summary["left_unsettled_members"], 1, "{summary}");
    let notices = summary["notices"].to_string();
    assert!(
        notices.contains("messages.created_at") && notices.contains("read_times.last_read_at"),
        "{}: the notice names both time columns: {summary}",
        backend.name()
    );
    let _ = sqlx::Connection::close(conn).await;
    db.cleanup().await;
}

/// Row 9. An integer `created_at` beside date/time evidence, and a date/time `created_at`
/// beside integer evidence: `expand` and `backfill` end with exit 2 naming both columns and
/// their types, and nothing is written (no watermark table, no ledger). Before: expand exit 0,
/// then backfill exit 3 (`operator does not exist: bigint <= timestamp with time zone`;
/// `1292 Incorrect datetime value`) after its ledger run was written.
async fn number_beside_time_is_refused(backend: Backend) {
    let time = match backend {
        Backend::Postgres => "timestamptz",
        _ => "DATETIME",
    };
    for (msg_time, ev_time) in [("BIGINT", time), (time, "BIGINT")] {
        let Some((db, dir, mut conn)) = setup(backend, "tz_kinds").await else {
            return;
        };
        let d = dir.path();
        let (created, read_at) = if msg_time == "BIGINT" {
            ("1717200060", "'2024-06-01 00:02:30'")
        } else {
            ("'2024-06-01 00:01:00'", "1717200150")
        };
        let mut sql = schema(msg_time, ev_time);
        sql.push(format!(
            "INSERT INTO messages (id, conv_id, sender_id, created_at) VALUES (1, 1, 'u0', {created})"
        ));
        sql.extend(members(1, &["u1"], 0));
        sql.push(format!(
            "INSERT INTO read_times (conv_id, user_id, last_read_at) VALUES (1, 'u1', {read_at})"
        ));
        exec_all(&mut conn, &sql).await;
        for stage in ["expand", "backfill"] {
            let out = tm(d, &db, &[stage]);
            let err = out.stderr.to_lowercase();
            assert!(
                out.code == Some(2)
                    && err.contains("messages.created_at")
                    && err.contains("read_times.last_read_at")
                    && err.contains("bigint"),
                "{} {stage} ({msg_time} beside {ev_time}): want exit 2 naming both columns and types: {out:?}",
                backend.name()
            );
        }
        let schema_of = match backend {
            Backend::Postgres => "current_schema()",
            _ => "DATABASE()",
        };
        let written = scalar(
            &mut conn,
            &format!(
                "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = {schema_of} \
                 AND table_name IN ('read_watermarks', 'tidemark_ledger')"
            ),
        )
        .await;
        assert_eq!(written, 0, "{}: nothing is written", backend.name());
        let _ = sqlx::Connection::close(conn).await;
        db.cleanup().await;
    }
}

/// Row 3 (SQLite; on the servers the same times as their date/time types, which they compare
/// themselves). Messages created at 00:01 (text), 00:02 (text with `T` and `Z`) and 00:03
/// (an integer, Unix seconds). Read-at times: u1 `2024-06-01T00:00:00Z`, before every message:
/// 0 (as a string it sorted after '2024-06-01 00:01:00', and u1 got 3); u2 00:02:30 with `T`;
/// u3 02:02:30+02:00 (00:02:30 UTC); u4 the integer 1717200150 (00:02:30): each 2; u5 a text
/// that is no time: no evidence, the counter's 1, and counted; u6 00:03:00.500: 3; u7 no row:
/// the counter's 1.
async fn text_times_compare_as_times(backend: Backend) {
    let Some((db, dir, mut conn)) = setup(backend, "tz_text").await else {
        return;
    };
    let d = dir.path();
    let sqlite = backend == Backend::Sqlite;
    let t = |lite: &str, server: &str| {
        if sqlite {
            lite.to_string()
        } else {
            server.to_string()
        }
    };
    let ty = match backend {
        Backend::Sqlite => "DATETIME",
        Backend::Postgres => "timestamptz",
        Backend::Mysql => "DATETIME(3)",
    };
    let mut sql = schema(ty, ty);
    sql.push(format!(
        "INSERT INTO messages (id, conv_id, sender_id, created_at) VALUES \
         (1, 1, 'u0', '2024-06-01 00:01:00'), (2, 1, 'u0', {}), (3, 1, 'u0', {})",
        t("'2024-06-01T00:02:00Z'", "'2024-06-01 00:02:00'"),
        t("1717200180", "'2024-06-01 00:03:00'")
    ));
    sql.extend(members(1, &["u1", "u2", "u3", "u4", "u5", "u6", "u7"], 2));
    let mut reads = vec![
        ("u1", t("'2024-06-01T00:00:00Z'", "'2024-06-01 00:00:00'")),
        ("u2", t("'2024-06-01T00:02:30'", "'2024-06-01 00:02:30'")),
        (
            "u3",
            t("'2024-06-01 02:02:30+02:00'", "'2024-06-01 00:02:30'"),
        ),
        ("u4", t("1717200150", "'2024-06-01 00:02:30'")),
        ("u6", "'2024-06-01 00:03:00.500'".to_string()),
    ];
    if sqlite {
        reads.push(("u5", "'not a time'".to_string()));
    }
    for (u, at) in reads {
        sql.push(format!(
            "INSERT INTO read_times (conv_id, user_id, last_read_at) VALUES (1, '{u}', {at})"
        ));
    }
    exec_all(&mut conn, &sql).await;
    tm(d, &db, &["expand"]).expect_code(0);
    let summary = backfill_json(d, &db, &[]);
    assert_eq!(
        watermarks(&mut conn).await,
        vec![
            "1|u1|0|timestamp",
            "1|u2|2|timestamp",
            "1|u3|2|timestamp",
            "1|u4|2|timestamp",
            "1|u5|1|counter",
            "1|u6|3|timestamp",
            "1|u7|1|counter",
        ],
        "{}: {summary}",
        backend.name()
    );
    let not_times = if sqlite { 1 } else { 0 };
    assert_eq!(summary["times_not_times"], not_times, "{summary}");
    let _ = sqlx::Connection::close(conn).await;
    db.cleanup().await;
}

/// Row 5 (MariaDB; SQLite keeps the same texts and reads them as no time too; PostgreSQL
/// cannot store them). Read-at times: u1 the zero date, u2 `2024-06-00` (a zero day): each no
/// evidence, the counter's 1 (before: 0 from the timestamp, which beat the counter), counted;
/// u3 00:02:30: 2; u4 NULL: the counter's 1, not counted.
async fn zero_dates_are_no_evidence(backend: Backend) {
    if backend == Backend::Postgres {
        return;
    }
    let Some((db, dir, mut conn)) = setup(backend, "tz_zero").await else {
        return;
    };
    let d = dir.path();
    let mut sql = Vec::new();
    if backend == Backend::Mysql {
        // The SQL mode an old application runs with: zero dates accepted.
        sql.push("SET SESSION sql_mode = ''".to_string());
    }
    sql.extend(schema("DATETIME", "DATETIME"));
    sql.push(
        "INSERT INTO messages (id, conv_id, sender_id, created_at) VALUES \
         (1, 1, 'u0', '2024-06-01 00:01:00'), (2, 1, 'u0', '2024-06-01 00:02:00'), \
         (3, 1, 'u0', '2024-06-01 00:03:00')"
            .into(),
    );
    sql.extend(members(1, &["u1", "u2", "u3", "u4"], 2));
    sql.push(
        "INSERT INTO read_times (conv_id, user_id, last_read_at) VALUES \
         (1, 'u1', '0000-00-00 00:00:00'), (1, 'u2', '2024-06-00 00:00:00'), \
         (1, 'u3', '2024-06-01 00:02:30'), (1, 'u4', NULL)"
            .into(),
    );
    exec_all(&mut conn, &sql).await;
    tm(d, &db, &["expand"]).expect_code(0);
    let summary = backfill_json(d, &db, &[]);
    assert_eq!(
        watermarks(&mut conn).await,
        vec![
            "1|u1|1|counter",
            "1|u2|1|counter",
            "1|u3|2|timestamp",
            "1|u4|1|counter",
        ],
        "{}: {summary}",
        backend.name()
    );
    assert_eq!(summary["times_not_times"], 2, "{summary}");
    let _ = sqlx::Connection::close(conn).await;
    db.cleanup().await;
}

/// SQLite has no session time zone: `--time-zone` would change nothing, so every database
/// command refuses it (exit 2, naming the option) before anything is written, rather than
/// ignoring it (a fresh user's try: `audit --time-zone Nowhere/Zone` ran as if unset).
#[tokio::test]
async fn time_zone_option_is_refused_on_sqlite() {
    let Some((db, dir, mut conn)) = setup(Backend::Sqlite, "tz_sqlite").await else {
        return;
    };
    let d = dir.path();
    exec_all(&mut conn, &schema("TEXT", "TEXT")).await;
    for zone in ["America/New_York", "-04:00"] {
        let refused = tm(d, &db, &["expand", "--time-zone", zone]);
        assert_eq!(refused.code, Some(2), "{refused:?}");
        assert!(
            refused.stderr.contains("--time-zone") && refused.stderr.contains("SQLite"),
            "{refused:?}"
        );
    }
    let tables = scalar(
        &mut conn,
        "SELECT COUNT(*) FROM sqlite_master WHERE name = 'read_watermarks'",
    )
    .await;
    assert_eq!(tables, 0, "a refused expand wrote nothing");
    tm(d, &db, &["expand"]).expect_code(0);
    let _ = sqlx::Connection::close(conn).await;
    db.cleanup().await;
}
