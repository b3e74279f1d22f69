//! Issue 12's evidence forms, on every backend, with the expected watermarks worked out by hand
//! below (not by running tidemark):
//!
//! - a `filter` on an evidence entry (only receipts of type `m.read` / `m.read.private`);
//! - position evidence through a `lookup` (a receipt names an event id; its position is that
//!   event's id in the messages table, of the same conversation);
//! - timestamp evidence keyed by the user alone (a users table's "mark all as read" time,
//!   resolved in each of the user's conversations);
//! - `[members] join_time` (the join position is the highest position created at or before the
//!   join time, 0 when none), in the backfill's counter ranks and in the audit.
//!
//! The data (times are integers, epoch-like):
//!
//! | conv | id | event | sender | created_at |
//! |------|----|-------|--------|------------|
//! | 1    | 1  | e1    | alice  | 100        |
//! | 1    | 2  | e2    | bob    | 200        |
//! | 1    | 3  | e3    | carol  | 300        |
//! | 1    | 4  | e4    | alice  | 400        |
//! | 1    | 5  | e5    | bob    | 500        |
//! | 1    | 6  | e6    | carol  | 600        |
//! | 2    | 7  | e7    | alice  | 150        |
//! | 2    | 8  | e8    | bob    | 350        |
//! | 2    | 9  | e9    | alice  | 700        |
//!
//! Members (conv, user, joined_at → join position): (1, alice, 50 → 0), (1, bob, 250 → 2),
//! (1, carol, NULL → none), (1, dave, 650 → 6), (2, alice, 100 → 0), (2, bob, 400 → 8).

use std::collections::BTreeMap;

use sqlx::{AnyConnection, Connection, Row};

use crate::common::{csv, exec_all, on_every_backend, Backend, TestDb};
use tidemark::dialect::Dialect;
use tidemark::mapping::Mapping;
use tidemark::stages::{audit, backfill, expand};
use tidemark::values::text;

on_every_backend!(
    filter_and_lookup,
    filter_reads_conv,
    filter_reads_lookup,
    user_timestamp,
    highest_of_both,
    join_time,
    join_time_per_message
);

const SCHEMA: &[&str] = &[
    "CREATE TABLE messages (id BIGINT NOT NULL, event_id VARCHAR(32) NOT NULL, conv_id BIGINT NOT NULL, \
     sender_id VARCHAR(32) NULL, created_at BIGINT NOT NULL, unread_by INTEGER NULL, PRIMARY KEY (id))",
    "CREATE TABLE convs (conv_id BIGINT NOT NULL, archived INTEGER NOT NULL, PRIMARY KEY (conv_id))",
    "INSERT INTO convs (conv_id, archived) VALUES (1, 0), (2, 1)",
    "CREATE TABLE members (conv_id BIGINT NOT NULL, user_id VARCHAR(32) NOT NULL, joined_at BIGINT NULL, \
     PRIMARY KEY (conv_id, user_id))",
    "CREATE TABLE counters (conv_id BIGINT NOT NULL, user_id VARCHAR(32) NOT NULL, unread_count INTEGER NOT NULL, \
     PRIMARY KEY (conv_id, user_id))",
    "CREATE TABLE receipts (conv_id BIGINT NOT NULL, user_id VARCHAR(32) NOT NULL, event_id VARCHAR(32) NOT NULL, \
     receipt_type VARCHAR(32) NOT NULL)",
    "CREATE TABLE users (id VARCHAR(32) NOT NULL, marked_all_read_at BIGINT NULL, deleted INTEGER NOT NULL, \
     PRIMARY KEY (id))",
    // unread_by: a per-message counter, for join_time_per_message (see there).
    "INSERT INTO messages (id, event_id, conv_id, sender_id, created_at, unread_by) VALUES \
     (1, 'e1', 1, 'alice', 100, 1), (2, 'e2', 1, 'bob', 200, 2), (3, 'e3', 1, 'carol', 300, 2), \
     (4, 'e4', 1, 'alice', 400, 2), (5, 'e5', 1, 'bob', 500, 2), (6, 'e6', 1, 'carol', 600, 3), \
     (7, 'e7', 2, 'alice', 150, 1), (8, 'e8', 2, 'bob', 350, 1), (9, 'e9', 2, 'alice', 700, 1)",
    "INSERT INTO members (conv_id, user_id, joined_at) VALUES \
     (1, 'alice', 50), (1, 'bob', 250), (1, 'carol', NULL), (1, 'dave', 650), \
     (2, 'alice', 100), (2, 'bob', 400)",
    // Stored counters, for the join_time test (see there).
    "INSERT INTO counters (conv_id, user_id, unread_count) VALUES \
     (1, 'alice', 2), (1, 'bob', 3), (1, 'carol', 4), (1, 'dave', 0), (2, 'alice', 1), (2, 'bob', 1)",
    // alice/1: e3 is a read receipt; e5 is 'm.fully_read' (filtered out).
    // bob/1: e4 private, e2 public: the highest, 4.
    // carol/1: e8 is an event of conversation 2 (the lookup's conversation rejects it), 'gone'
    //          names no event: no evidence.
    // alice/2: e9.
    "INSERT INTO receipts (conv_id, user_id, event_id, receipt_type) VALUES \
     (1, 'alice', 'e3', 'm.read'), (1, 'alice', 'e5', 'm.fully_read'), \
     (1, 'bob', 'e4', 'm.read.private'), (1, 'bob', 'e2', 'm.read'), \
     (1, 'carol', 'e8', 'm.read'), (1, 'carol', 'gone', 'm.read'), \
     (2, 'alice', 'e9', 'm.read')",
    // alice marked everything read at 450: conv 1 -> 4 (created 400), conv 2 -> 8 (created 350).
    // bob never did; carol's row is deleted (filtered out); dave at 300: conv 1 -> 3.
    "INSERT INTO users (id, marked_all_read_at, deleted) VALUES \
     ('alice', 450, 0), ('bob', NULL, 0), ('carol', 10000, 1), ('dave', 300, 0)",
];

const HEAD: &str = r#"
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
"#;

const COUNTER: &str = r#"
[counter]
shape = "per_member"
table = "counters"
user = "user_id"
conversation = "conv_id"
column = "unread_count"
"#;

const RECEIPTS: &str = r#"
[[evidence]]
kind = "position"
table = "receipts"
user = "user_id"
conversation = "conv_id"
column = "event_id"
filter = "this.receipt_type IN ('m.read', 'm.read.private')"
lookup = { table = "messages", key = "event_id", position = "id", conversation = "conv_id" }
"#;

const MARK_ALL_READ: &str = r#"
[[evidence]]
kind = "timestamp"
table = "users"
user = "id"
column = "marked_all_read_at"
filter = "deleted = 0"
"#;

const WATERMARKS: &str = "\n[watermarks]\ntable = \"read_watermarks\"\n";

/// (conv, user) -> (last_read_id, source).
type Watermarks = BTreeMap<(i64, String), (i64, String)>;

fn wm(rows: &[(i64, &str, i64, &str)]) -> Watermarks {
    rows.iter()
        .map(|(c, u, v, s)| ((*c, u.to_string()), (*v, s.to_string())))
        .collect()
}

/// A database with the schema and data above, connected; None when the backend is skipped.
async fn setup(backend: Backend, label: &str) -> Option<(TestDb, AnyConnection, Dialect)> {
    let db = TestDb::create(backend, label).await?;
    let mut conn = db.connect().await;
    exec_all(
        &mut conn,
        &SCHEMA.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
    )
    .await;
    let dialect = tidemark::db::Dsn::parse(&db.url).expect("url").dialect;
    Some((db, conn, dialect))
}

async fn watermarks(conn: &mut AnyConnection) -> Watermarks {
    sqlx::query("SELECT conversation_id, user_id, last_read_id, source FROM read_watermarks")
        .fetch_all(&mut *conn)
        .await
        .expect("reading read_watermarks")
        .iter()
        .map(|r| {
            (
                (
                    r.try_get::<i64, _>(0).unwrap(),
                    text(r, 1).unwrap().unwrap_or_default(),
                ),
                (
                    r.try_get::<i64, _>(2).unwrap(),
                    text(r, 3).unwrap().unwrap_or_default(),
                ),
            )
        })
        .collect()
}

/// expand, then backfill twice (the second writes nothing new); the watermarks.
async fn expand_backfill(
    conn: &mut AnyConnection,
    dialect: Dialect,
    toml: &str,
) -> (Watermarks, backfill::BackfillSummary) {
    let mapping = Mapping::parse(toml, "evidence_forms.toml").expect("mapping");
    mapping
        .check_predicates(dialect.sql_parser_dialect(), dialect.name())
        .expect("predicates parse");
    tidemark::schema::preflight(conn, &mapping, dialect)
        .await
        .expect("preflight");
    expand::run(conn, &mapping, dialect, false)
        .await
        .expect("expand");
    let summary = backfill::run(conn, &mapping, dialect, &Default::default())
        .await
        .expect("backfill");
    let first = watermarks(conn).await;
    backfill::run(conn, &mapping, dialect, &Default::default())
        .await
        .expect("second backfill");
    assert_eq!(
        watermarks(conn).await,
        first,
        "a second backfill changed the watermarks"
    );
    (first, summary)
}

async fn filter_and_lookup(backend: Backend) {
    let Some((db, mut conn, dialect)) = setup(backend, "evfilter").await else {
        return;
    };
    let toml = format!("{HEAD}{COUNTER}{RECEIPTS}{WATERMARKS}");
    let (got, summary) = expand_backfill(&mut conn, dialect, &toml).await;
    assert_eq!(
        got,
        wm(&[
            (1, "alice", 3, "position"),
            (1, "bob", 4, "position"),
            (2, "alice", 9, "position"),
        ]),
        "{}",
        backend.name()
    );
    // carol (a receipt of another conversation, a receipt naming no event), dave and bob/2
    // (no receipt at all).
    assert_eq!(summary.no_evidence, 3, "{summary:?}");

    // Without the lookup's conversation, carol's receipt of e8 (conversation 2) would count: the
    // key is resolved in the whole table.
    let loose = toml.replace(", conversation = \"conv_id\" }", " }");
    let mapping = Mapping::parse(&loose, "loose.toml").unwrap();
    sqlx::query("DELETE FROM read_watermarks")
        .execute(&mut conn)
        .await
        .unwrap();
    backfill::run(&mut conn, &mapping, dialect, &Default::default())
        .await
        .expect("backfill");
    assert_eq!(
        watermarks(&mut conn).await.get(&(1, "carol".into())),
        Some(&(8, "position".into()))
    );
    let _ = conn.close().await;
    db.cleanup().await;
}

/// A filter that reads the looked-up row, named `lookup` (issue 22): only receipts of an event
/// created before 400 count. alice/1: e3 (created 300) -> 3; bob/1: e4 (400) is left out, e2
/// (200) -> 2; alice/2: e9 (700) is left out: no evidence; carol as in `filter_and_lookup`.
/// The preflight resolves the filter with the lookup row joined (it exited 2 "no such column"
/// before the row had a name).
async fn filter_reads_lookup(backend: Backend) {
    let Some((db, mut conn, dialect)) = setup(backend, "evflookup").await else {
        return;
    };
    let toml = format!(
        "{HEAD}{COUNTER}{}{WATERMARKS}",
        RECEIPTS.replace(
            "IN ('m.read', 'm.read.private')\"",
            "IN ('m.read', 'm.read.private') AND lookup.created_at < 400\""
        )
    );
    assert!(toml.contains("lookup.created_at"));
    let (got, summary) = expand_backfill(&mut conn, dialect, &toml).await;
    assert_eq!(
        got,
        wm(&[(1, "alice", 3, "position"), (1, "bob", 2, "position")]),
        "{}",
        backend.name()
    );
    assert_eq!(summary.no_evidence, 4, "{summary:?}");
    // A column the looked-up row does not have is named by the filter's key (exit 2).
    let bad = toml.replace("lookup.created_at", "lookup.no_such_col");
    let mapping = Mapping::parse(&bad, "bad.toml").unwrap();
    let e = tidemark::schema::preflight(&mut conn, &mapping, dialect)
        .await
        .unwrap_err();
    assert_eq!(
        tidemark::error::kind(&e),
        tidemark::error::ErrorKind::BadInput,
        "{e:#}"
    );
    assert!(format!("{e:#}").contains("evidence[1].filter"), "{e:#}");
    let _ = conn.close().await;
    db.cleanup().await;
}

/// A filter that reads the conversation row: conversation 2 is archived (`convs`), so alice's
/// receipt there is no evidence; the rest as in `filter_and_lookup`.
async fn filter_reads_conv(backend: Backend) {
    let Some((db, mut conn, dialect)) = setup(backend, "evfconv").await else {
        return;
    };
    let toml = format!(
        "{HEAD}\n[conversations]\ntable = \"convs\"\nkey = \"conv_id\"\n{COUNTER}{}{WATERMARKS}",
        RECEIPTS.replace(
            "IN ('m.read', 'm.read.private')\"",
            "IN ('m.read', 'm.read.private') AND conv.archived = 0\""
        )
    );
    assert!(toml.contains("conv.archived"));
    let (got, _) = expand_backfill(&mut conn, dialect, &toml).await;
    assert_eq!(
        got,
        wm(&[(1, "alice", 3, "position"), (1, "bob", 4, "position")]),
        "{}",
        backend.name()
    );
    let _ = conn.close().await;
    db.cleanup().await;
}

async fn user_timestamp(backend: Backend) {
    let Some((db, mut conn, dialect)) = setup(backend, "evusrts").await else {
        return;
    };
    let toml = format!("{HEAD}{COUNTER}{MARK_ALL_READ}{WATERMARKS}");
    let (got, _) = expand_backfill(&mut conn, dialect, &toml).await;
    assert_eq!(
        got,
        wm(&[
            (1, "alice", 4, "timestamp"),
            (2, "alice", 8, "timestamp"),
            (1, "dave", 3, "timestamp"),
        ]),
        "{}",
        backend.name()
    );
    let _ = conn.close().await;
    db.cleanup().await;
}

/// Both, under `[backfill] policy = "highest"`: the receipt where it is ahead (alice/2: 9 over
/// 8; bob/1: 4, no time), the time where it is (alice/1: 4 over 3; dave: 3).
async fn highest_of_both(backend: Backend) {
    let Some((db, mut conn, dialect)) = setup(backend, "evhighest").await else {
        return;
    };
    let toml = format!(
        "{HEAD}{COUNTER}{RECEIPTS}{MARK_ALL_READ}{WATERMARKS}\n[backfill]\npolicy = \"highest\"\n"
    );
    let (got, _) = expand_backfill(&mut conn, dialect, &toml).await;
    assert_eq!(
        got,
        wm(&[
            (1, "alice", 4, "timestamp"),
            (1, "bob", 4, "position"),
            (1, "dave", 3, "timestamp"),
            (2, "alice", 9, "position"),
        ]),
        "{}",
        backend.name()
    );
    let _ = conn.close().await;
    db.cleanup().await;
}

/// `join_time`: join positions (1, alice) 0, (1, bob) 2, (1, carol) none, (1, dave) 6,
/// (2, alice) 0, (2, bob) 8. Every message counts (no predicate).
///
/// Audit before any watermark (threshold = join position): countable messages after it, not
/// the member's own: alice/1 m2 m3 m5 m6 = 4 (stored 2: drift -2); bob/1 m3 m4 m6 = 3; carol/1
/// m1 m2 m4 m5 = 4; dave/1 0; alice/2 m8 = 1; bob/2 m9 = 1. Without the join positions bob/1
/// would be owed 4 and bob/2 2.
///
/// Backfill from the counter k (the k-th newest message not the member's own above the join
/// position is the watermark; k at or past their number: 0, nothing read): alice/1 k=2 over
/// m6 m5 m3 m2 -> 3; bob/1 k=3 over m6 m4 m3 -> 0 (without the join: m1, 1); carol/1 k=4 over
/// m5 m4 m2 m1 -> 0; dave/1 k=0 -> the newest, 6; alice/2 k=1 over m8 -> 0; bob/2 k=1 over m9
/// -> 0 (without the join: m7, 7). Then the audit finds no drift.
async fn join_time(backend: Backend) {
    let Some((db, mut conn, dialect)) = setup(backend, "evjoin").await else {
        return;
    };
    let toml = format!(
        "{}{COUNTER}\n[[evidence]]\nkind = \"counter\"\n{WATERMARKS}",
        HEAD.replace(
            "[members]\ntable = \"members\"\nuser = \"user_id\"\nconversation = \"conv_id\"\n",
            "[members]\ntable = \"members\"\nuser = \"user_id\"\nconversation = \"conv_id\"\njoin_time = \"joined_at\"\n",
        )
    );
    let mapping = Mapping::parse(&toml, "join_time.toml").expect("mapping");
    assert_eq!(
        mapping.members.as_ref().unwrap().join_time.as_deref(),
        Some("joined_at")
    );
    expand::run(&mut conn, &mapping, dialect, false)
        .await
        .expect("expand");
    let tmp = tempfile::tempdir().unwrap();
    let audit_once = |name: &str| audit::AuditOptions {
        report: tmp.path().join(name),
        ..Default::default()
    };
    let before = audit::run(&mut conn, &mapping, dialect, &audit_once("before.csv"))
        .await
        .expect("audit");
    assert_eq!(
        (before.summary.rows_checked, before.summary.drifting_rows),
        (6, 1),
        "{:?}",
        before.summary
    );
    let report = csv::read(&tmp.path().join("before.csv"));
    let rows: Vec<Vec<String>> = report
        .rows
        .iter()
        .map(|r| r[..5].iter().map(|c| c.to_string()).collect())
        .collect();
    assert_eq!(
        rows,
        vec![vec!["1", "alice", "2", "4", "-2"]],
        "{}",
        backend.name()
    );

    backfill::run(&mut conn, &mapping, dialect, &Default::default())
        .await
        .expect("backfill");
    assert_eq!(
        watermarks(&mut conn).await,
        wm(&[
            (1, "alice", 3, "counter"),
            (1, "bob", 0, "counter"),
            (1, "carol", 0, "counter"),
            (1, "dave", 6, "counter"),
            (2, "alice", 0, "counter"),
            (2, "bob", 0, "counter"),
        ]),
        "{}",
        backend.name()
    );
    let after = audit::run(&mut conn, &mapping, dialect, &audit_once("after.csv"))
        .await
        .expect("audit");
    assert_eq!(
        (after.summary.rows_checked, after.summary.drifting_rows),
        (6, 0),
        "{:?}",
        after.summary
    );
    let _ = conn.close().await;
    db.cleanup().await;
}

/// `join_time` in the per-message audit: a member counts for a message when active, not its
/// sender, joined before it (join position < its id) and their watermark (none here) is below
/// it. Conversation 1 (alice 0, bob 2, carol none, dave 6): m1 carol = 1; m2 alice carol = 2; m3
/// alice bob = 2; m4 bob carol = 2; m5 alice carol = 2; m6 alice bob = 2 (stored 3). Conversation
/// 2 (alice 0, bob 8): m7 nobody = 0 (stored 1); m8 alice = 1; m9 bob = 1. Without the join
/// positions m6 (dave too) and m7 (bob) would not drift and m1..m5 would.
async fn join_time_per_message(backend: Backend) {
    let Some((db, mut conn, dialect)) = setup(backend, "evjoinpm").await else {
        return;
    };
    let toml = format!(
        "{}\n[counter]\nshape = \"per_message\"\ncolumn = \"unread_by\"\n{RECEIPTS}{WATERMARKS}",
        HEAD.replace(
            "[members]\ntable = \"members\"\nuser = \"user_id\"\nconversation = \"conv_id\"\n",
            "[members]\ntable = \"members\"\nuser = \"user_id\"\nconversation = \"conv_id\"\njoin_time = \"joined_at\"\n",
        )
    );
    let mapping = Mapping::parse(&toml, "join_time_pm.toml").expect("mapping");
    expand::run(&mut conn, &mapping, dialect, false)
        .await
        .expect("expand");
    let tmp = tempfile::tempdir().unwrap();
    let report = tmp.path().join("pm.csv");
    let outcome = audit::run(
        &mut conn,
        &mapping,
        dialect,
        &audit::AuditOptions {
            report: report.clone(),
            ..Default::default()
        },
    )
    .await
    .expect("audit");
    assert_eq!(
        (outcome.summary.rows_checked, outcome.summary.drifting_rows),
        (9, 2),
        "{:?}",
        outcome.summary
    );
    let file = csv::read(&report);
    let rows: Vec<Vec<String>> = file
        .rows
        .iter()
        .map(|r| r[..5].iter().map(|c| c.to_string()).collect())
        .collect();
    assert_eq!(
        rows,
        vec![vec!["1", "6", "3", "2", "1"], vec!["2", "7", "1", "0", "1"]],
        "{}: {}",
        backend.name(),
        file.header
    );
    let _ = conn.close().await;
    db.cleanup().await;
}

on_every_backend!(plan_shows_the_forms, bad_filter_is_named);

/// A filter that does not parse in the database's SQL, or a lookup on a timestamp: exit 2 with
/// the file, line and key, before any statement runs.
async fn bad_filter_is_named(backend: Backend) {
    let Some(db) = TestDb::create(backend, "evbadf").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let good = format!("{HEAD}{COUNTER}{RECEIPTS}{WATERMARKS}");
    let line = good.lines().position(|l| l.starts_with("filter")).unwrap() + 1;
    for (name, text, want) in [
        (
            "unparsable.toml",
            good.replace("IN ('m.read'", "IN IN ('m.read'"),
            format!("unparsable.toml:{line}:10: evidence[1].filter: "),
        ),
        (
            "two.toml",
            good.replace(
                "'m.read.private')",
                "'m.read.private'); DELETE FROM receipts",
            ),
            format!("two.toml:{line}:10: evidence.filter: "),
        ),
    ] {
        std::fs::write(dir.path().join(name), text).unwrap();
        for args in [&["backfill", "--quiet"][..], &["plan"]] {
            let mut all = args.to_vec();
            all.extend(["--database", &db.url, "--mapping", name]);
            let out = crate::common::bin::run(dir.path(), &all);
            out.expect_code(2);
            assert!(
                out.stderr.contains(&want),
                "{args:?}: want {want:?} in\n{}",
                out.stderr
            );
        }
    }
    db.cleanup().await;
}

/// `tidemark plan` prints the statements with every form in them: the filter, the lookup's
/// join, the per-user timestamp (no conversation condition on its table) and the join position
/// from the join time, in the backfill's read and in the audit.
async fn plan_shows_the_forms(backend: Backend) {
    let Some((db, conn, _)) = setup(backend, "evplan").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "{}{COUNTER}{RECEIPTS}{MARK_ALL_READ}{WATERMARKS}",
        HEAD.replace(
            "[members]\ntable = \"members\"\nuser = \"user_id\"\nconversation = \"conv_id\"\n",
            "[members]\ntable = \"members\"\nuser = \"user_id\"\nconversation = \"conv_id\"\njoin_time = \"joined_at\"\n",
        )
    );
    std::fs::write(dir.path().join("forms.toml"), &toml).unwrap();
    let out = crate::common::bin::run(
        dir.path(),
        &["plan", "--database", &db.url, "--mapping", "forms.toml"],
    );
    out.expect_code(0);
    let q = |s: &str| match backend {
        Backend::Mysql => format!("`{s}`"),
        _ => format!("\"{s}\""),
    };
    for want in [
        // The receipts' filter and lookup.
        "this.receipt_type IN ('m.read', 'm.read.private')".to_string(),
        format!(
            "FROM {} this JOIN {} lookup ON lookup.{} = this.{} AND lookup.{} = this.{}",
            q("receipts"),
            q("messages"),
            q("event_id"),
            q("event_id"),
            q("conv_id"),
            q("conv_id")
        ),
        // The per-user time: its table is matched on the user alone.
        format!(
            "FROM {} this WHERE this.{} = tm_s.usr AND (deleted = 0)",
            q("users"),
            q("id")
        ),
        // The join position from the join time.
        format!("CASE WHEN this.{} IS NULL THEN NULL", q("joined_at")),
    ] {
        assert!(
            out.stdout.contains(&want),
            "{}: plan lacks {want:?}:\n{}",
            backend.name(),
            out.stdout
        );
    }
    let _ = conn.close().await;
    db.cleanup().await;
}
