//! Counters at and beyond the edges of a 64-bit integer, and counters of another numeric type
//! (issue 25, rows 2 and 3), and the per-message history that ignored join positions (row 17).
//!
//! - A counter that cannot be an i64 (MariaDB `BIGINT UNSIGNED` above 2^63 - 1, a `numeric` /
//!   `DECIMAL` above it, SQLite's REAL beyond it) or that is not an integer (a `numeric` 2.7, a
//!   SQLite REAL 2.7 or text `'7abc'` in an INTEGER column) is bad input: every stage that reads
//!   it ends with exit 2 naming the table, the column, the value and the first key, and writes
//!   nothing.
//! - A counter at the i64 limits is audited and backfilled without an overflow: the report's
//!   drift is exact, the summary's sums saturate (never a wrapped number).
//! - An integer-valued `numeric` / `DECIMAL` counter (a column, a view's `CASE` that MariaDB
//!   types `DECIMAL`, an expression) works on every engine.
//! - Per message, `exceeds_history` counts the readers the message ever had: the members other
//!   than the sender who joined before it (shared/spec/semantics.md, shape B).

use std::path::Path;

use crate::common::bin::{run, Run};
use crate::common::faults::{scalar, watermarks};
use crate::common::{csv, exec_all, on_every_backend, Backend, TestDb};
use crate::scenario::{self, SHAPE_PER_MEMBER, SHAPE_PER_MESSAGE};

/// The scenario schema with the counter column `unread_count` of `table` (`unread_counters`
/// or `messages`) declared as `ty`.
fn schema_with_counter(table: &str, ty: &str) -> Vec<String> {
    scenario::schema_sql()
        .into_iter()
        .map(|s| {
            if s.starts_with(&format!("CREATE TABLE {table} (")) {
                s.replace("unread_count INT NULL", &format!("unread_count {ty} NULL"))
            } else {
                s
            }
        })
        .collect()
}

/// Three messages from u0 in conversation 1; u1, u2, u3 active members.
fn conversation() -> Vec<String> {
    [
        "INSERT INTO messages (conv_id, id, sender_id) VALUES (1, 1, 'u0'), (1, 2, 'u0'), (1, 3, 'u0')",
        "INSERT INTO members (conv_id, user_id) VALUES (1, 'u1'), (1, 'u2'), (1, 'u3')",
    ]
    .map(String::from)
    .to_vec()
}

/// Runs `tidemark ARGS --database URL --mapping m.toml` in `dir`.
fn tm(dir: &Path, db: &TestDb, args: &[&str]) -> Run {
    let mut all = args.to_vec();
    all.extend(["--database", &db.url, "--mapping", "m.toml"]);
    run(dir, &all)
}

/// Why `out` is not exit 2 with every one of `want` in its stderr (None when it is).
fn not_refused(out: &Run, what: &str, want: &[&str]) -> Option<String> {
    let missing: Vec<&&str> = want.iter().filter(|w| !out.stderr.contains(**w)).collect();
    (out.code != Some(2) || !missing.is_empty()).then(|| {
        format!(
            "{what}: exit {:?}, want 2 naming {missing:?}; stdout: {}; stderr: {}",
            out.code,
            out.stdout.lines().next().unwrap_or_default(),
            out.stderr.trim()
        )
    })
}

/// One bad counter: the column's type, the value as inserted, the value as the message shows
/// it.
struct BadValue {
    ty: &'static str,
    literal: &'static str,
    shown: &'static str,
}

/// The bad counters of each engine: above the i64 range (row 2) and not an integer (row 3).
fn bad_values(backend: Backend) -> Vec<BadValue> {
    let v = |ty, literal, shown| BadValue { ty, literal, shown };
    match backend {
        // SQLite keeps what does not fit its INTEGER as REAL or text.
        Backend::Sqlite => vec![
            v("INTEGER", "100000000000000000000", "1.0e+20"),
            v("INTEGER", "2.7", "2.7"),
            v("INTEGER", "'7abc'", "7abc"),
        ],
        Backend::Postgres => vec![
            v(
                "NUMERIC(30,0)",
                "9223372036854775808",
                "9223372036854775808",
            ),
            v("NUMERIC(10,1)", "2.7", "2.7"),
        ],
        Backend::Mysql => vec![
            v(
                "BIGINT UNSIGNED",
                "18446744073709551615",
                "18446744073709551615",
            ),
            v(
                "DECIMAL(30,0)",
                "100000000000000000000",
                "100000000000000000000",
            ),
            v("DECIMAL(10,1)", "2.7", "2.7"),
        ],
    }
}

/// Row 2 and 3, per member: a counter that is not an integer within the i64 range ends
/// `backfill`, `audit` and `contract` with exit 2 naming the table, column, value and first
/// key (conversation 1, user u2), and the backfill writes no watermark. Before the fix: the
/// unsigned maximum read as -1 (`negative`) and the backfill marked everything read (exit 0),
/// `numeric` beyond 2^63 failed with exit 3 "bigint out of range", 2.7 was rounded to 3.
async fn counters_outside_i64_are_refused(backend: Backend) {
    for bad in bad_values(backend) {
        let Some(db) = TestDb::create(backend, "num_bad").await else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let mapping = format!(
            "{}\n[contract]\ndrop = \"columns\"\ncolumns = [\"unread_counters.unread_count\"]\n",
            scenario::mapping_toml(SHAPE_PER_MEMBER, false)
        );
        std::fs::write(d.join("m.toml"), &mapping).unwrap();
        let mut conn = db.connect().await;
        let mut sql = schema_with_counter("unread_counters", bad.ty);
        sql.extend(conversation());
        sql.push(
            "INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES (1, 'u1', 1), (1, 'u3', 0)"
                .into(),
        );
        exec_all(&mut conn, &sql).await;
        tm(d, &db, &["expand"]).expect_code(0);
        // The bad row arrives after expand, as it would in production.
        exec_all(
            &mut conn,
            &[format!(
                "INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES (1, 'u2', {})",
                bad.literal
            )],
        )
        .await;
        let what = format!("{} {} {}", backend.name(), bad.ty, bad.literal);
        let want = [
            "counter.column = \"unread_count\"",
            "unread_counters.unread_count",
            &format!("holds {}", bad.shown),
            "conversation 1, user u2",
        ];
        let mut wrong = Vec::new();
        for args in [
            &["backfill", "--quiet"][..],
            &["audit", "--no-ledger", "--report", "r.csv"][..],
            &["contract"][..],
        ] {
            let out = tm(d, &db, args);
            wrong.extend(not_refused(&out, &format!("{what} {args:?}"), &want));
        }
        let marks = watermarks(&mut conn).await;
        if !marks.is_empty() {
            wrong.push(format!("{what}: the refused backfill wrote {marks:?}"));
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        drop(conn);
        db.cleanup().await;
    }
}

/// Row 3, per message: a per-message counter of 2.5 (or above the i64 range) is refused the
/// same way, naming the message (conversation 1, message 2).
async fn per_message_counters_outside_i64_are_refused(backend: Backend) {
    let Some(db) = TestDb::create(backend, "num_bad_msg").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("m.toml"),
        scenario::mapping_toml(SHAPE_PER_MESSAGE, false),
    )
    .unwrap();
    let mut conn = db.connect().await;
    let bad = bad_values(backend)
        .into_iter()
        .find(|b| b.literal == "2.7")
        .expect("a fractional case");
    let mut sql = schema_with_counter("messages", bad.ty);
    sql.push(
        "INSERT INTO messages (conv_id, id, sender_id, unread_count) VALUES (1, 1, 'u0', 1), (1, 3, 'u0', 1)"
            .into(),
    );
    sql.push("INSERT INTO members (conv_id, user_id) VALUES (1, 'u0'), (1, 'u1')".into());
    exec_all(&mut conn, &sql).await;
    tm(d, &db, &["expand"]).expect_code(0);
    exec_all(
        &mut conn,
        &[format!(
            "INSERT INTO messages (conv_id, id, sender_id, unread_count) VALUES (1, 2, 'u0', {})",
            bad.literal
        )],
    )
    .await;
    let out = tm(d, &db, &["audit", "--no-ledger", "--report", "r.csv"]);
    let wrong = not_refused(
        &out,
        backend.name(),
        &[
            "counter.column = \"unread_count\"",
            "messages.unread_count",
            &format!("holds {}", bad.shown),
            "conversation 1, message 2",
        ],
    );
    assert!(wrong.is_none(), "{}", wrong.unwrap_or_default());
    drop(conn);
    db.cleanup().await;
}

/// Rows 2 and 3 through `[counter] value` and `combine = "sum"`: an expression that gives
/// 4.5, and a member whose two rows (i64::MAX and 1) sum beyond the range, are refused by the
/// audit with exit 2 naming the expression, or the sum, and the member. Before: 4.5 audited as
/// 5 (SQLite: 4); the sum failed with exit 3 ("bigint out of range", SQLite "integer
/// overflow") or, on MariaDB, was read as i64::MAX.
async fn sums_and_expressions_outside_i64_are_refused(backend: Backend) {
    let Some(db) = TestDb::create(backend, "num_sum").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut conn = db.connect().await;
    let mut sql = scenario::schema_sql();
    sql.extend(conversation());
    sql.push("CREATE TABLE thread_counters (conv_id BIGINT NOT NULL, user_id VARCHAR(64) NOT NULL, thread_id BIGINT NOT NULL, unread BIGINT NULL)".into());
    exec_all(&mut conn, &sql).await;
    let base = scenario::mapping_toml(SHAPE_PER_MEMBER, false);
    let expression = base.replacen(
        "column = \"unread_count\"",
        "value = \"this.unread_count * 1.5\"",
        1,
    ) + "\n[contract]\ndrop = \"nothing\"\n";
    let sum =
        base.replacen(
            "table = \"unread_counters\"",
            "table = \"thread_counters\"",
            1,
        )
        .replacen(
            "column = \"unread_count\"",
            "column = \"unread\"\ncombine = \"sum\"",
            1,
        ) + "\n[contract]\ndrop = \"nothing\"\n";
    let cases = [
        (
            "expression",
            expression,
            vec![
                "INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES (1, 'u1', 2), (1, 'u2', 3)"
                    .to_string(),
            ],
            if backend == Backend::Sqlite {
                // SQLite: a REAL value is the expression's type, refused as such (before this
                // check reads a row; issue 13).
                vec![
                    "counter.value = \"this.unread_count * 1.5\"",
                    "the expression is floating point (real)",
                ]
            } else {
                vec![
                    "counter.value = \"this.unread_count * 1.5\"",
                    "the expression over unread_counters holds 4.5",
                    "conversation 1, user u2",
                ]
            },
        ),
        (
            "sum",
            sum,
            vec![format!(
                "INSERT INTO thread_counters (conv_id, user_id, thread_id, unread) VALUES (1, 'u1', 1, 1), (1, 'u1', 2, 1), (1, 'u2', 1, {}), (1, 'u2', 2, 1)",
                i64::MAX
            )],
            vec![
                "counter.column = \"unread\"",
                "the sum of a member's rows in thread_counters holds",
                "conversation 1, user u2",
            ],
        ),
    ];
    let mut wrong = Vec::new();
    for (what, mapping, rows, want) in cases {
        std::fs::write(d.join("m.toml"), &mapping).unwrap();
        tm(d, &db, &["expand"]).expect_code(0);
        exec_all(&mut conn, &rows).await;
        let out = tm(d, &db, &["audit", "--no-ledger", "--report", "r.csv"]);
        wrong.extend(not_refused(
            &out,
            &format!("{} {what}", backend.name()),
            &want,
        ));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    drop(conn);
    db.cleanup().await;
}

/// Row 3, the contract: a value the counter's `rows` leave out is still archived (every row
/// of the column is), so the contract checks it too: u2's -2.5 (a NUMERIC / DECIMAL, SQLite a
/// REAL in an INTEGER column), left out of the audits by `rows = "this.unread_count >= 0"`,
/// ends `contract --execute` with exit 2 naming the column, the value and the row, before the
/// archive is written; the column stays. Before: the archive rounded it and the verification
/// failed with exit 3 ("a value changed while archiving?").
async fn contract_refuses_values_it_cannot_archive(backend: Backend) {
    let Some(db) = TestDb::create(backend, "num_archive").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mapping = scenario::mapping_toml(SHAPE_PER_MEMBER, false).replacen(
        "column = \"unread_count\"",
        "column = \"unread_count\"\nrows = \"this.unread_count >= 0\"",
        1,
    );
    std::fs::write(d.join("m.toml"), &mapping).unwrap();
    let ty = match backend {
        Backend::Sqlite => "INTEGER",
        Backend::Postgres => "NUMERIC(10,1)",
        Backend::Mysql => "DECIMAL(10,1)",
    };
    let mut conn = db.connect().await;
    let mut sql = schema_with_counter("unread_counters", ty);
    sql.extend(conversation());
    sql.push(
        "INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES (1, 'u1', 1), (1, 'u2', -2.5)"
            .into(),
    );
    exec_all(&mut conn, &sql).await;
    tm(d, &db, &["expand"]).expect_code(0);
    tm(d, &db, &["backfill", "--quiet"]).expect_code(0);
    tm(d, &db, &["audit", "--quiet", "--report", "r.csv"]).expect_code(0);
    let out = tm(d, &db, &["contract", "--execute", "--archive", "a.csv"]);
    let wrong = not_refused(
        &out,
        backend.name(),
        &[
            "column unread_counters.unread_count: unread_counters.unread_count holds -2.5 for conversation 1, user u2",
            "the archive keeps whole numbers",
        ],
    );
    assert!(wrong.is_none(), "{}", wrong.unwrap_or_default());
    assert_eq!(
        scalar(&mut conn, "SELECT COUNT(*) FROM tidemark_counter_archive").await,
        0,
        "{}: nothing archived",
        backend.name()
    );
    assert_eq!(
        scalar(&mut conn, "SELECT COUNT(unread_count) FROM unread_counters").await,
        2,
        "{}: the column is still there",
        backend.name()
    );
    drop(conn);
    db.cleanup().await;
}

/// Row 2: counters at the i64 limits (u2 = i64::MAX, u3 = i64::MIN with a read receipt at 1)
/// beside a true one (u1 = 1). The backfill reads them without an overflow (before: exit 3
/// "bigint out of range" on PostgreSQL, "BIGINT value is out of range" on MariaDB); the audit
/// reports exact drifts in the CSV (u3's is below i64::MIN) and saturated sums in the summary
/// (before: a wrapped sum, or a panic on overflow in a debug build).
async fn counters_at_the_i64_limits(backend: Backend) {
    let Some(db) = TestDb::create(backend, "num_limits").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("m.toml"),
        scenario::mapping_toml(SHAPE_PER_MEMBER, false),
    )
    .unwrap();
    let mut conn = db.connect().await;
    let mut sql = schema_with_counter("unread_counters", "BIGINT");
    sql.extend(conversation());
    sql.extend([
        format!(
            "INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES (1, 'u1', 1), (1, 'u2', {}), (1, 'u3', -{} - 1)",
            i64::MAX,
            i64::MAX
        ),
        "INSERT INTO read_receipts (conv_id, user_id, message_id) VALUES (1, 'u3', 1)".into(),
    ]);
    exec_all(&mut conn, &sql).await;
    tm(d, &db, &["expand"]).expect_code(0);
    let out = tm(d, &db, &["backfill", "--format", "json"]);
    out.expect_code(0);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        json["unrepresentable_counters"],
        1,
        "{}: u2's counter exceeds the messages there are: {}",
        backend.name(),
        out.stdout
    );
    let out = tm(
        d,
        &db,
        &[
            "audit",
            "--quiet",
            "--report",
            "r.csv",
            "--store-rows",
            "--format",
            "json",
        ],
    );
    out.expect_code(1);
    let mut rows = csv::read(&d.join("r.csv")).rows;
    rows.sort();
    let want: Vec<Vec<String>> = [
        [
            "1",
            "u2",
            "9223372036854775807",
            "3",
            "9223372036854775804",
            "exceeds_history",
            "0",
            "counter",
        ],
        [
            "1",
            "u3",
            "-9223372036854775808",
            "2",
            "-9223372036854775810",
            "negative",
            "1",
            "position",
        ],
    ]
    .iter()
    .map(|r| r.iter().map(|c| c.to_string()).collect())
    .collect();
    assert_eq!(rows, want, "{}", backend.name());
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(json["drifting_rows"], 2, "{}", out.stdout);
    assert_eq!(json["sum_abs_drift"], i64::MAX, "saturated: {}", out.stdout);
    assert_eq!(json["max_abs_drift"], i64::MAX, "saturated: {}", out.stdout);
    // The stored row's drift saturates in the ledger's BIGINT column.
    assert_eq!(
        scalar(
            &mut conn,
            "SELECT MIN(drift) FROM tidemark_drift_rows WHERE subject = 'u3'"
        )
        .await,
        i64::MIN
    );
    let out = tm(d, &db, &["audit", "--report", "r.csv", "--no-ledger"]);
    out.expect_code(1);
    assert!(
        out.stdout.contains(&format!(
            "sum |drift| {}, largest |drift| {}",
            i64::MAX,
            i64::MAX
        )),
        "{}",
        out.stdout
    );
    drop(conn);
    db.cleanup().await;
}

/// Row 3: integer-valued `numeric` / `DECIMAL` counters work: a NUMERIC / DECIMAL column with
/// 2.0, and on the servers an expression of a decimal type. On MariaDB also the view whose
/// `CASE` mixes an `INT UNSIGNED` column with a signed expression (Flarum's rule; MariaDB
/// types it `DECIMAL`; reported to fail with exit 3 "Any driver does not support MySql type
/// NewDecimal"). Each is backfilled from the counter and audited clean (exit 0).
async fn integer_valued_decimals_work(backend: Backend) {
    let mut mappings = vec![(
        "column",
        scenario::mapping_toml(SHAPE_PER_MEMBER, false),
        "NUMERIC(10,1)",
    )];
    if backend != Backend::Sqlite {
        let value = scenario::mapping_toml(SHAPE_PER_MEMBER, false).replacen(
            "column = \"unread_count\"",
            "value = \"this.unread_count * 1.0\"",
            1,
        ) + "\n[contract]\ndrop = \"nothing\"\n";
        mappings.push(("expression", value, "INT"));
    }
    if backend == Backend::Mysql {
        let view = scenario::mapping_toml(SHAPE_PER_MEMBER, false).replacen(
            "table = \"unread_counters\"",
            "table = \"flarum_unread\"",
            1,
        );
        mappings.push(("view", view, "INT"));
    }
    for (what, mapping, ty) in mappings {
        let Some(db) = TestDb::create(backend, "num_decimal").await else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("m.toml"), &mapping).unwrap();
        let mut conn = db.connect().await;
        let mut sql = schema_with_counter("unread_counters", ty);
        sql.extend(conversation());
        sql.push(
            "INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES (1, 'u1', 2), (1, 'u2', 0), (1, 'u3', 3)"
                .into(),
        );
        if what == "view" {
            // Flarum: the unread number is the posts after the last read one, at most the
            // discussion's comment count (INT UNSIGNED); u1 read 1 of 3, u2 all, u3 none.
            sql.extend(
                [
                    "CREATE TABLE discussions (id BIGINT NOT NULL PRIMARY KEY, comment_count INT UNSIGNED NOT NULL, last_post_number INT NULL)",
                    "CREATE TABLE discussion_user (discussion_id BIGINT NOT NULL, user_id VARCHAR(64) NOT NULL, last_read_post_number INT NULL, PRIMARY KEY (discussion_id, user_id))",
                    "INSERT INTO discussions VALUES (1, 3, 3)",
                    "INSERT INTO discussion_user VALUES (1, 'u1', 1), (1, 'u2', 3), (1, 'u3', NULL)",
                    "CREATE VIEW flarum_unread AS SELECT du.discussion_id AS conv_id, du.user_id AS user_id, \
                     CASE WHEN du.last_read_post_number >= d.last_post_number THEN 0 \
                     WHEN d.last_post_number - COALESCE(du.last_read_post_number, 0) < d.comment_count \
                     THEN d.last_post_number - COALESCE(du.last_read_post_number, 0) \
                     ELSE d.comment_count END AS unread_count \
                     FROM discussion_user du JOIN discussions d ON d.id = du.discussion_id",
                ]
                .map(String::from),
            );
        }
        exec_all(&mut conn, &sql).await;
        let what = format!("{} {what}", backend.name());
        let out = tm(d, &db, &["expand"]);
        assert_eq!(out.code, Some(0), "{what}: {}", out.stderr);
        let out = tm(d, &db, &["backfill", "--quiet"]);
        assert_eq!(out.code, Some(0), "{what}: {}", out.stderr);
        let out = tm(d, &db, &["audit", "--quiet", "--report", "r.csv"]);
        assert_eq!(out.code, Some(0), "{what}: {}{}", out.stdout, out.stderr);
        let marks: Vec<String> = watermarks(&mut conn)
            .await
            .into_iter()
            .map(|w| w.rsplit_once('|').unwrap().0.to_string())
            .collect();
        assert_eq!(marks, ["1|u1|1", "1|u2|3", "1|u3|0"], "{what}");
        drop(conn);
        db.cleanup().await;
    }
}

/// Row 17: message 7 from u1 with stored 4; members u2, u8, u5, and u4 who joined at 21;
/// recomputed 2 (u2 read it). The message had 3 readers (u4 joined after it): 4 exceeds its
/// history (before the fix: `overcount`, every member but the sender counted).
async fn per_message_history_counts_members_who_joined_before(backend: Backend) {
    let Some(db) = TestDb::create(backend, "num_history").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("m.toml"),
        scenario::mapping_toml(SHAPE_PER_MESSAGE, false),
    )
    .unwrap();
    let mut conn = db.connect().await;
    let mut sql = scenario::schema_sql();
    sql.extend(
        [
            "INSERT INTO messages (conv_id, id, sender_id, unread_count) VALUES (1, 7, 'u1', 4)",
            "INSERT INTO members (conv_id, user_id, active, join_position) VALUES \
             (1, 'u2', 1, NULL), (1, 'u8', 1, NULL), (1, 'u5', 1, NULL), (1, 'u4', 1, 21)",
        ]
        .map(String::from),
    );
    exec_all(&mut conn, &sql).await;
    tm(d, &db, &["expand"]).expect_code(0);
    exec_all(
        &mut conn,
        &[format!(
            "INSERT INTO {} (user_id, conversation_id, last_read_id, source) VALUES ('u2', 1, 7, 'application')",
            scenario::WATERMARK_TABLE
        )],
    )
    .await;
    let out = tm(
        d,
        &db,
        &["audit", "--quiet", "--no-ledger", "--report", "r.csv"],
    );
    out.expect_code(1);
    let rows = csv::read(&d.join("r.csv")).rows;
    assert_eq!(
        rows,
        vec![["1", "7", "4", "2", "2", "exceeds_history"]
            .map(String::from)
            .to_vec()],
        "{}",
        backend.name()
    );
    drop(conn);
    db.cleanup().await;
}

/// Row 17, found by the audit_model property on the servers: a message from a NULL sender
/// (a deleted account) read by all four members, two of them with a join position before it
/// (0) and two without: its history is 4, so a stored 4 is an `overcount`, not an
/// `exceeds_history`. MariaDB summed the members without a join position as a running sum
/// (a window without ORDER BY beside ordered ones) and counted 2.
async fn per_message_history_with_members_with_and_without_join_positions(backend: Backend) {
    let Some(db) = TestDb::create(backend, "num_history_mixed").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("m.toml"),
        scenario::mapping_toml(SHAPE_PER_MESSAGE, false),
    )
    .unwrap();
    let mut conn = db.connect().await;
    let mut sql = scenario::schema_sql();
    sql.extend(
        [
            "INSERT INTO messages (conv_id, id, sender_id, unread_count) VALUES (2, 1, NULL, 4)",
            "INSERT INTO members (conv_id, user_id, active, join_position) VALUES \
             (2, 'u0', 1, 0), (2, 'u1', 1, NULL), (2, 'u2', 1, 0), (2, 'u3', 0, NULL)",
        ]
        .map(String::from),
    );
    exec_all(&mut conn, &sql).await;
    tm(d, &db, &["expand"]).expect_code(0);
    let marks: Vec<String> = ["u0", "u1", "u2", "u3"]
        .iter()
        .map(|u| {
            format!(
                "INSERT INTO {} (user_id, conversation_id, last_read_id, source) VALUES ('{u}', 2, 5, 'application')",
                scenario::WATERMARK_TABLE
            )
        })
        .collect();
    exec_all(&mut conn, &marks).await;
    tm(
        d,
        &db,
        &["audit", "--quiet", "--no-ledger", "--report", "r.csv"],
    )
    .expect_code(1);
    assert_eq!(
        csv::read(&d.join("r.csv")).rows,
        vec![["2", "1", "4", "0", "4", "overcount"]
            .map(String::from)
            .to_vec()],
        "{}",
        backend.name()
    );
    drop(conn);
    db.cleanup().await;
}

on_every_backend!(
    counters_outside_i64_are_refused,
    per_message_counters_outside_i64_are_refused,
    sums_and_expressions_outside_i64_are_refused,
    contract_refuses_values_it_cannot_archive,
    counters_at_the_i64_limits,
    integer_valued_decimals_work,
    per_message_history_counts_members_who_joined_before,
    per_message_history_with_members_with_and_without_join_positions,
);
