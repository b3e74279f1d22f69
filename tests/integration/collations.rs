//! Mixed key collations (issue 25, row 1): the conversation keys `a B c D e F` in tables whose
//! key columns compare differently, against a copy of the same data in one collation.
//!
//! - PostgreSQL: `messages.conv_id` in the ICU collation `en-x-icu` (a < B < c < D < e < F),
//!   every other table in the database's default (`C.UTF-8`: B < D < F < a < c < e).
//! - MariaDB: `messages` and `read_receipts` in `utf8mb4_general_ci`, `members` and
//!   `unread_counters` in `utf8mb4_bin` (common in old schemas); the copy all `utf8mb4_bin`.
//! - SQLite: `messages.conv_id` declared `COLLATE NOCASE`; the copy without.
//!
//! Batches are small (three members or counter rows: one conversation each), so that batch
//! bounds computed in one table's order and applied to a table with another order would lose
//! rows. The mixed database must give the same watermarks, the same audit report (byte for
//! byte) and the same contract archive as the copy, and both the values worked out by hand
//! below; every stage names the key columns whose collations differ.

use std::collections::BTreeMap;
use std::path::Path;

use sqlx::{AnyConnection, Row};

use crate::common::{bin, csv, exec_all, on_every_backend, Backend, TestDb};
use tidemark::db::Dsn;
use tidemark::dialect::Dialect;
use tidemark::mapping::Mapping;
use tidemark::stages::contract::{self, ContractOptions};
use tidemark::stages::{audit, backfill, expand};
use tidemark::values::text;

on_every_backend!(mixed_collations_give_the_one_collation_answer);

/// The conversations, in the order their messages are numbered: conversation `i` has the
/// messages 10(i+1)+1 … 10(i+1)+6.
const CONVERSATIONS: [&str; 6] = ["a", "B", "c", "D", "e", "F"];

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
table = "unread_counters"
user = "user_id"
conversation = "conv_id"
column = "unread_count"

[[evidence]]
kind = "position"
table = "read_receipts"
user = "user_id"
conversation = "conv_id"
column = "message_id"

[[evidence]]
kind = "counter"

[watermarks]
table = "read_watermarks"
"#;

/// The same database audited per message (`messages.unread_count`, the per-message counter of
/// seed 003): the batches are then the messages' conversations, in their table's order.
fn per_message_mapping() -> String {
    let start = MAPPING.find("[counter]").unwrap();
    let end = MAPPING.find("[watermarks]").unwrap();
    format!(
        "{}[counter]\nshape = \"per_message\"\ncolumn = \"unread_count\"\n\n[[evidence]]\nkind = \"position\"\ntable = \"read_receipts\"\nuser = \"user_id\"\nconversation = \"conv_id\"\ncolumn = \"message_id\"\n\n{}",
        &MAPPING[..start],
        &MAPPING[end..]
    )
}

/// How each table's key columns are declared: (messages, receipts, members and counters) as
/// the column type with its collation, and MySQL's table options.
struct Declared {
    messages: &'static str,
    receipts: &'static str,
    members: &'static str,
    table_options: [&'static str; 4],
}

fn declared(backend: Backend, mixed: bool) -> Declared {
    match (backend, mixed) {
        (Backend::Postgres, true) => Declared {
            messages: "TEXT COLLATE \"en-x-icu\"",
            receipts: "TEXT",
            members: "TEXT",
            table_options: [""; 4],
        },
        (Backend::Postgres, false) => Declared {
            messages: "TEXT",
            receipts: "TEXT",
            members: "TEXT",
            table_options: [""; 4],
        },
        (Backend::Mysql, mixed) => {
            let ci = if mixed {
                " DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci"
            } else {
                " DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
            };
            let bin = " DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin";
            Declared {
                messages: "VARCHAR(16)",
                receipts: "VARCHAR(16)",
                members: "VARCHAR(16)",
                table_options: [ci, ci, bin, bin],
            }
        }
        (Backend::Sqlite, mixed) => Declared {
            messages: if mixed { "TEXT COLLATE NOCASE" } else { "TEXT" },
            receipts: "TEXT",
            members: "TEXT",
            table_options: [""; 4],
        },
    }
}

/// The schema and the data: every member has the messages of the others to read; alice read
/// up to the 5th message and bob up to the 3rd (receipts), carol has only her counter. Five
/// counters drift, one of each kind the classes tell apart.
fn schema_and_data(backend: Backend, mixed: bool) -> Vec<String> {
    let d = declared(backend, mixed);
    let [o_msg, o_rcp, o_mem, o_ctr] = d.table_options;
    let mut sql = vec![
        format!(
            "CREATE TABLE messages (conv_id {} NOT NULL, id BIGINT NOT NULL, sender_id VARCHAR(16) NOT NULL, created_at BIGINT NOT NULL, unread_count INT NULL, PRIMARY KEY (conv_id, id)){o_msg}",
            d.messages
        ),
        format!(
            "CREATE TABLE read_receipts (conv_id {} NOT NULL, user_id VARCHAR(16) NOT NULL, message_id BIGINT NOT NULL){o_rcp}",
            d.receipts
        ),
        "CREATE INDEX read_receipts_by_member ON read_receipts (conv_id, user_id)".to_string(),
        format!(
            "CREATE TABLE members (conv_id {} NOT NULL, user_id VARCHAR(16) NOT NULL, PRIMARY KEY (conv_id, user_id)){o_mem}",
            d.members
        ),
        format!(
            "CREATE TABLE unread_counters (conv_id {} NOT NULL, user_id VARCHAR(16) NOT NULL, unread_count INT NULL, PRIMARY KEY (conv_id, user_id)){o_ctr}",
            d.members
        ),
    ];
    let senders = ["alice", "bob", "carol", "alice", "bob", "carol"];
    for (i, c) in CONVERSATIONS.iter().enumerate() {
        let base = 10 * (i as i64 + 1);
        for (j, s) in senders.iter().enumerate() {
            let id = base + j as i64 + 1;
            // Unix seconds; c's last message is recent (`--min-age` leaves c out).
            let created = if id == 36 { now_s() } else { 1_000_000 + id };
            sql.push(format!(
                "INSERT INTO messages VALUES ('{c}', {id}, '{s}', {created}, {})",
                j % 3
            ));
        }
        for (user, read) in [("alice", 2), ("alice", 5), ("bob", 3)] {
            sql.push(format!(
                "INSERT INTO read_receipts VALUES ('{c}', '{user}', {})",
                base + read
            ));
        }
        let stored = |user: &str| match (*c, user) {
            ("a", "bob") => 3,    // own_messages_counted: 2 unread + bob's own 5th
            ("B", "alice") => 0,  // cleared: the 6th is unread
            ("D", "bob") => 5,    // exceeds_history: bob has 4 messages of others
            ("e", "alice") => 3,  // overcount
            ("F", "carol") => -1, // negative (and, as evidence, "read everything")
            (_, "alice") => 1,
            (_, "bob") => 2,
            _ => 1,
        };
        for user in ["alice", "bob", "carol"] {
            sql.push(format!("INSERT INTO members VALUES ('{c}', '{user}')"));
            sql.push(format!(
                "INSERT INTO unread_counters VALUES ('{c}', '{user}', {})",
                stored(user)
            ));
        }
    }
    sql
}

fn now_s() -> i64 {
    tidemark::values::now_ms() / 1000
}

/// The watermarks worked out by hand: alice and bob from their newest receipt, carol from her
/// counter (1: the newest message of the others unread, so the 4th; in F her -1 reads up to
/// the 6th).
fn expected_watermarks() -> BTreeMap<(String, String), (i64, String)> {
    let mut want = BTreeMap::new();
    for (i, c) in CONVERSATIONS.iter().enumerate() {
        let base = 10 * (i as i64 + 1);
        let carol = if *c == "F" { base + 6 } else { base + 4 };
        for (user, v, src) in [
            ("alice", base + 5, "position"),
            ("bob", base + 3, "position"),
            ("carol", carol, "counter"),
        ] {
            want.insert((c.to_string(), user.to_string()), (v, src.to_string()));
        }
    }
    want
}

/// The drifting rows worked out by hand, in the report's order (conversations byte by byte).
const EXPECTED_REPORT: [&str; 5] = [
    "B,alice,0,1,-1,cleared,25,position",
    "D,bob,5,2,3,exceeds_history,43,position",
    "F,carol,-1,0,-1,negative,66,counter",
    "a,bob,3,2,1,own_messages_counted,13,position",
    "e,alice,3,1,2,overcount,55,position",
];

/// (conversation, user) -> (last_read_id, source) of the watermark table.
async fn watermarks(conn: &mut AnyConnection) -> BTreeMap<(String, String), (i64, String)> {
    let rows =
        sqlx::query("SELECT conversation_id, user_id, last_read_id, source FROM read_watermarks")
            .fetch_all(&mut *conn)
            .await
            .unwrap();
    rows.iter()
        .map(|r| {
            (
                (
                    text(r, 0).unwrap().unwrap_or_default(),
                    text(r, 1).unwrap().unwrap_or_default(),
                ),
                (
                    r.try_get(2).unwrap(),
                    text(r, 3).unwrap().unwrap_or_default(),
                ),
            )
        })
        .collect()
}

/// What one database gave: its watermarks, its audit report (bytes), its archive CSV (bytes)
/// and the notices the stages gave about the key columns' collations.
struct Outcome {
    watermarks: BTreeMap<(String, String), (i64, String)>,
    report: Vec<u8>,
    per_message: Vec<u8>,
    archive: Vec<u8>,
    notices: Vec<String>,
}

/// Loads the schema, then expand, backfill, audit, the counters repaired from the report, a
/// clean audit and `contract --execute`, all in batches of one conversation.
async fn pipeline(db: &TestDb, mixed: bool, dir: &Path) -> Outcome {
    let dsn = Dsn::parse(&db.url).unwrap();
    let dialect: Dialect = dsn.dialect;
    let mut conn = dsn.connect().await.unwrap();
    exec_all(&mut conn, &schema_and_data(db.backend, mixed)).await;
    let path = dir.join("tidemark.toml");
    std::fs::write(&path, MAPPING).unwrap();
    let mapping = Mapping::load(&path).expect("the mapping loads");
    expand::run(&mut conn, &mapping, dialect, false)
        .await
        .unwrap();

    let b = backfill::run(
        &mut conn,
        &mapping,
        dialect,
        &backfill::BackfillOptions {
            batch_size: 3,
            chunk_time: std::time::Duration::ZERO,
            ..Default::default()
        },
    )
    .await
    .expect("backfill");
    let mut notices = b.notices.clone();
    let report = dir.join("drift.csv");
    let a = audit::run(
        &mut conn,
        &mapping,
        dialect,
        &audit::AuditOptions {
            report: report.clone(),
            batch_size: 3,
            ..Default::default()
        },
    )
    .await
    .expect("audit");
    notices.extend(a.summary.notices.iter().cloned());
    // Two conversations a batch (batches of several keys), leaving c out by `--min-age`.
    let recent = dir.join("recent.csv");
    let r = audit::run(
        &mut conn,
        &mapping,
        dialect,
        &audit::AuditOptions {
            report: recent.clone(),
            batch_size: 6,
            min_age: Some(std::time::Duration::from_secs(600)),
            scope_description: vec!["min-age 10m".into()],
            ..Default::default()
        },
    )
    .await
    .expect("audit --min-age");
    assert_eq!(
        (r.summary.left_out_recent, r.summary.rows_checked),
        (1, 15),
        "mixed = {mixed}: c left out"
    );
    assert_eq!(
        std::fs::read(&recent).unwrap(),
        std::fs::read(&report).unwrap(),
        "mixed = {mixed}: c has no drifting row, so the same report"
    );
    let pm_path = dir.join("per_message.toml");
    std::fs::write(&pm_path, per_message_mapping()).unwrap();
    let per_message = Mapping::load(&pm_path).expect("the per-message mapping loads");
    let pm_report = dir.join("per_message.csv");
    audit::run(
        &mut conn,
        &per_message,
        dialect,
        &audit::AuditOptions {
            report: pm_report.clone(),
            batch_size: 6,
            ledger: false,
            ..Default::default()
        },
    )
    .await
    .expect("per-message audit");
    let drift = csv::read(&report);
    // Repair each drifting counter to the recomputed value: then a clean audit opens the gate.
    for row in &drift.rows {
        exec_all(
            &mut conn,
            &[format!(
                "UPDATE unread_counters SET unread_count = {} WHERE conv_id = '{}' AND user_id = '{}'",
                row[3], row[0], row[1]
            )],
        )
        .await;
    }
    let clean = audit::run(
        &mut conn,
        &mapping,
        dialect,
        &audit::AuditOptions {
            report: dir.join("clean.csv"),
            batch_size: 3,
            ..Default::default()
        },
    )
    .await
    .expect("clean audit");
    let archive = dir.join("archive.csv");
    let done = contract::run(
        &mut conn,
        &mapping,
        dialect,
        &ContractOptions {
            execute: true,
            archive_csv: Some(archive.clone()),
            audit_report: Some(dir.join("final.csv")),
            batch_size: 3,
            lock_timeout: std::time::Duration::from_secs(2),
            ..Default::default()
        },
    )
    .await;
    let archive = match &done {
        Ok(done) if done.executed => std::fs::read(&archive).unwrap(),
        _ => Vec::new(),
    };
    assert!(
        clean.summary.passed,
        "mixed = {mixed}: the audit after the repair still drifts: {:?}",
        clean.summary.by_class
    );
    let done = done.expect("contract --execute");
    assert!(done.executed, "{:?}", done.notes);
    notices.extend(
        done.notes
            .iter()
            .filter(|n| n.contains("collations differ"))
            .cloned(),
    );
    let out = Outcome {
        watermarks: watermarks(&mut conn).await,
        report: std::fs::read(&report).unwrap(),
        per_message: std::fs::read(&pm_report).unwrap(),
        archive,
        notices,
    };
    drop(conn);
    out
}

async fn mixed_collations_give_the_one_collation_answer(backend: Backend) {
    let Some(mixed_db) = TestDb::create(backend, "coll_mixed").await else {
        return;
    };
    let Some(one_db) = TestDb::create(backend, "coll_one").await else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let (mixed_dir, one_dir) = (tmp.path().join("mixed"), tmp.path().join("one"));
    std::fs::create_dir_all(&mixed_dir).unwrap();
    std::fs::create_dir_all(&one_dir).unwrap();

    // `inspect` and `plan` on the mixed database name the columns, before any stage runs.
    let mut conn = mixed_db.connect().await;
    exec_all(&mut conn, &schema_and_data(backend, true)).await;
    drop(conn);
    let inspect = bin::run(&mixed_dir, &["inspect", "--database", &mixed_db.url]);
    let differ = match backend {
        Backend::Postgres => "messages.conv_id (en-x-icu)",
        Backend::Mysql => "messages.conv_id (utf8mb4_general_ci)",
        Backend::Sqlite => "messages.conv_id (NOCASE)",
    };
    assert!(
        inspect.stdout.contains(differ) && inspect.stderr.contains(differ),
        "inspect names {differ}:\n--- stdout\n{}\n--- stderr\n{}",
        inspect.stdout,
        inspect.stderr
    );
    std::fs::write(mixed_dir.join("tidemark.toml"), MAPPING).unwrap();
    let plan = bin::run(&mixed_dir, &["plan", "--database", &mixed_db.url]);
    plan.expect_code(0);
    assert!(
        plan.stdout.contains(differ),
        "plan names {differ}:\n{}",
        plan.stdout
    );
    // Start the mixed database over: the pipeline loads it itself.
    mixed_db.cleanup().await;
    let Some(mixed_db) = TestDb::create(backend, "coll_mixed").await else {
        return;
    };

    let one = pipeline(&one_db, false, &one_dir).await;
    let mixed = pipeline(&mixed_db, true, &mixed_dir).await;

    // The one-collation copy gives the values worked out by hand…
    assert_eq!(one.watermarks, expected_watermarks(), "one collation");
    let rows: Vec<String> = csv::read(&one_dir.join("drift.csv"))
        .rows
        .iter()
        .map(|r| r.join(","))
        .collect();
    assert_eq!(rows, EXPECTED_REPORT, "one collation: the drifting rows");
    assert!(one.notices.is_empty(), "one collation: {:?}", one.notices);
    // …and the mixed database the same, byte for byte.
    assert_eq!(
        mixed.watermarks, one.watermarks,
        "mixed collations: watermarks"
    );
    assert_eq!(
        String::from_utf8_lossy(&mixed.report),
        String::from_utf8_lossy(&one.report),
        "mixed collations: the audit report"
    );
    assert!(
        csv::read(&one_dir.join("per_message.csv")).rows.len() > 10,
        "one collation: the per-message audit finds drift"
    );
    // Per message the batches are the messages' conversations, found in the messages table's
    // own order (its index gives them so): on PostgreSQL that is en-x-icu's (a B c D e F,
    // the one-collation copy B D F a c e); on MariaDB and SQLite, whose messages compare
    // case-insensitively, the bytes'. The rows are the same.
    let lines = |csv: &[u8]| {
        String::from_utf8_lossy(csv)
            .lines()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let mut mixed_rows = lines(&mixed.per_message);
    let mut one_rows = lines(&one.per_message);
    let order = |rows: &[String]| {
        let mut convs: Vec<String> = rows[1..]
            .iter()
            .map(|r| r.split(',').next().unwrap().to_string())
            .collect();
        convs.dedup();
        convs
    };
    let bytes = ["B", "D", "F", "a", "c", "e"];
    assert_eq!(order(&one_rows), bytes, "one collation: per message");
    let expected = match backend {
        Backend::Postgres => vec!["a", "B", "c", "D", "e", "F"],
        _ => bytes.to_vec(),
    };
    assert_eq!(
        order(&mixed_rows),
        expected,
        "mixed collations: per message"
    );
    mixed_rows.sort();
    one_rows.sort();
    assert_eq!(
        mixed_rows, one_rows,
        "mixed collations: the per-message audit report"
    );
    // The archive holds the same rows; their order is the order its INSERT … SELECT read them
    // in (on PostgreSQL the heap's, which the repair's UPDATEs changed), so compare them sorted.
    let sorted = |csv: &[u8]| {
        let text = String::from_utf8_lossy(csv).into_owned();
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        lines[1..].sort();
        lines
    };
    assert_eq!(
        sorted(&one.archive).len(),
        1 + 18,
        "one collation: the archive"
    );
    assert_eq!(
        sorted(&mixed.archive),
        sorted(&one.archive),
        "mixed collations: the contract's archive"
    );
    // Every stage named the column whose collation differs (backfill, audit twice, contract).
    for notice in &mixed.notices {
        assert!(notice.contains(differ), "{notice}");
    }
    assert!(mixed.notices.len() >= 3, "{:?}", mixed.notices);

    mixed_db.cleanup().await;
    one_db.cleanup().await;
}
