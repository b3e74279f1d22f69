//! `tidemark inspect` (issue 10): the mapping it proposes for the scenario schema, used
//! unedited, audits exactly like the hand-written one on every backend; on the Synapse fixture
//! its comments name the counter candidates and the receipts table; its warnings count what
//! they say (a missing `(conversation, position)` index, rows whose id order disagrees with
//! their creation order); `--output` never overwrites without `--force`.

use std::path::Path;

use sqlx::{AnyConnection, Row};

use crate::common::{bin, csv, exec_all, on_every_backend, Backend, TestDb};
use crate::scenario;
use crate::synapse::{fixture_dir, statements};
use tidemark::mapping::Mapping;

on_every_backend!(
    scenario_mapping_audits_like_the_hand_written_one,
    synapse_comments_name_the_alternatives,
    warnings_are_counted_and_fixable,
    views_and_event_lookups
);

/// The per-member scenarios (no cap), side by side in one database of the legacy schema.
async fn load_scenarios(conn: &mut AnyConnection) {
    exec_all(conn, &scenario::schema_sql()).await;
    let scenarios: Vec<_> = scenario::load_all()
        .unwrap()
        .into_iter()
        .filter(|s| !s.is_per_message() && s.options.cap.is_none())
        .collect();
    assert!(scenarios.len() > 5, "scenarios loaded: {}", scenarios.len());
    for (j, s) in scenarios.iter().enumerate() {
        exec_all(conn, &scenario::data_sql(s, (j as i64 + 1) * 100)).await;
    }
}

/// expand, backfill and audit through the binary with `mapping`; the audit's exit code and its
/// drift report's rows, sorted.
fn pipeline(dir: &Path, url: &str, mapping: &str, report: &str) -> (Option<i32>, Vec<Vec<String>>) {
    for cmd in ["expand", "backfill"] {
        let mut args = vec![cmd, "--database", url, "--mapping", mapping];
        if cmd == "backfill" {
            args.push("--quiet");
        }
        bin::run(dir, &args).expect_code(0);
    }
    let run = bin::run(
        dir,
        &[
            "audit",
            "--database",
            url,
            "--mapping",
            mapping,
            "--report",
            report,
            "--quiet",
        ],
    );
    assert!(
        matches!(run.code, Some(0 | 1)),
        "audit with {mapping}: {run:?}"
    );
    let mut rows = csv::read(&dir.join(report)).rows;
    rows.sort();
    (run.code, rows)
}

async fn scenario_mapping_audits_like_the_hand_written_one(backend: Backend) {
    let Some(proposed_db) = TestDb::create(backend, "insp_proposed").await else {
        return;
    };
    let Some(hand_db) = TestDb::create(backend, "insp_hand").await else {
        return;
    };
    for db in [&proposed_db, &hand_db] {
        let mut conn = db.connect().await;
        load_scenarios(&mut conn).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = bin::run(
        dir.path(),
        &[
            "inspect",
            "--database",
            &proposed_db.url,
            "--output",
            "proposed.toml",
        ],
    );
    run.expect_code(0);
    assert!(run.stdout.contains("proposed.toml"), "{}", run.stdout);
    assert!(
        !run.stdout.contains("warning"),
        "no warning expected: {}",
        run.stdout
    );
    let text = std::fs::read_to_string(dir.path().join("proposed.toml")).unwrap();
    let mapping = Mapping::parse(&text, "proposed.toml").expect("the proposal parses");
    // The choices, and the alternative it saw: the per-message column on messages.
    assert_eq!(mapping.messages.table, "messages");
    assert_eq!(mapping.counter.table.as_deref(), Some("unread_counters"));
    assert_eq!(
        mapping.messages.countable.as_deref(),
        Some("is_deleted = 0 AND is_system = 0")
    );
    assert!(
        text.contains("# counter candidate: messages.unread_count"),
        "{text}"
    );
    assert!(
        text.contains("# receipts table seen: read_receipts"),
        "{text}"
    );

    std::fs::write(
        dir.path().join("hand.toml"),
        scenario::mapping_toml("per_member", false),
    )
    .unwrap();
    let proposed = pipeline(
        dir.path(),
        &proposed_db.url,
        "proposed.toml",
        "proposed.csv",
    );
    let hand = pipeline(dir.path(), &hand_db.url, "hand.toml", "hand.csv");
    assert!(!hand.1.is_empty(), "the scenarios drift");
    assert_eq!(
        proposed, hand,
        "the proposed mapping audits like the hand-written one"
    );
    proposed_db.cleanup().await;
    hand_db.cleanup().await;
}

async fn synapse_comments_name_the_alternatives(backend: Backend) {
    let Some(db) = TestDb::create(backend, "insp_synapse").await else {
        return;
    };
    let mut conn = db.connect().await;
    let file = fixture_dir().join(format!("synapse.{}.sql", backend.name()));
    exec_all(&mut conn, &statements(&file)).await;
    // Without event_json it is no longer Synapse as `inspect` knows it (inspect_known.rs):
    // the proposal is inspect's own, by structure and data.
    exec_all(
        &mut conn,
        &["ALTER TABLE event_json RENAME TO event_bodies".to_string()],
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let run = bin::run(dir.path(), &["inspect", "--database", &db.url]);
    assert!(matches!(run.code, Some(0 | 1)), "{run:?}");
    let text = &run.stdout;
    assert!(!text.contains("recognised as"), "{text}");
    for fact in [
        // The messages table: the events, by room, at their stream ordering.
        "table = \"events\"",
        "id = \"stream_ordering\"",
        "conversation = \"room_id\"",
        // The counter and the other candidate beside it.
        "# chosen: event_push_summary.unread_count",
        "# counter candidate: event_push_summary.notif_count",
        // One summary row per thread: the key is not (user, room) alone.
        "no unique index on (user_id, room_id) alone",
        // Membership by its values.
        "membership takes the values",
        "active = \"membership = 'join'\"",
        // The receipts table, used as the first evidence.
        "# receipts table seen: receipts_linearized",
        "table = \"receipts_linearized\"",
    ] {
        assert!(text.contains(fact), "missing {fact:?} in:\n{text}");
    }
    let receipts = text.find("table = \"receipts_linearized\"").unwrap();
    let summary = text
        .find("column = \"last_receipt_stream_ordering\"")
        .unwrap();
    assert!(receipts < summary, "receipts come first:\n{text}");
    if run.code == Some(0) {
        Mapping::parse(text, "synapse").expect("a complete proposal parses");
    }
    drop(conn);
    db.cleanup().await;
}

/// The `# WARNING:` line of `text` that contains `needle`, with its `#   fix:` line.
fn warning<'a>(text: &'a str, needle: &str) -> Option<(&'a str, Option<&'a str>)> {
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("# WARNING:") && l.contains(needle))?;
    let fix = lines.get(at + 1).and_then(|l| l.strip_prefix("#   fix: "));
    Some((lines[at], fix))
}

async fn warnings_are_counted_and_fixable(backend: Backend) {
    let Some(db) = TestDb::create(backend, "insp_warn").await else {
        return;
    };
    let mut conn = db.connect().await;
    // The legacy schema without the messages table's primary key (conv_id, id): no index
    // serves the audit's reads by (conversation, position).
    let schema: Vec<String> = scenario::schema_sql()
        .into_iter()
        .map(|s| s.replace(", PRIMARY KEY (conv_id, id))", ")"))
        .collect();
    exec_all(&mut conn, &schema).await;
    let clean = scenario::load_all().unwrap();
    for (j, s) in clean
        .iter()
        .filter(|s| !s.is_per_message())
        .take(4)
        .enumerate()
    {
        exec_all(&mut conn, &scenario::data_sql(s, (j as i64 + 1) * 100)).await;
    }
    // Creation times in id order, then exactly `bad` rows made earlier than the row before
    // them: the newest message of `bad` conversations that have at least two.
    exec_all(
        &mut conn,
        &["UPDATE messages SET created_at = id * 10".to_string()],
    )
    .await;
    let rows = sqlx::query("SELECT conv_id, id FROM messages ORDER BY conv_id, id")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    let pairs: Vec<(i64, i64)> = rows
        .iter()
        .map(|r| (r.try_get(0).unwrap(), r.try_get(1).unwrap()))
        .collect();
    let mut newest: Vec<(i64, i64)> = Vec::new();
    for w in pairs.windows(2) {
        if w[0].0 == w[1].0 {
            match newest.last_mut() {
                Some(last) if last.0 == w[1].0 => last.1 = w[1].1,
                _ => newest.push(w[1]),
            }
        }
    }
    let bad = newest.len().min(3);
    assert!(bad >= 2, "conversations with two messages: {newest:?}");
    for (conv, id) in &newest[..bad] {
        exec_all(
            &mut conn,
            &[format!(
                "UPDATE messages SET created_at = 0 WHERE conv_id = {conv} AND id = {id}"
            )],
        )
        .await;
    }

    let dir = tempfile::tempdir().unwrap();
    let run = bin::run(dir.path(), &["inspect", "--database", &db.url]);
    run.expect_code(0);
    let text = run.stdout.clone();
    let (line, fix) = warning(&text, "no index on messages (conv_id, id)")
        .unwrap_or_else(|| panic!("no index warning in:\n{text}"));
    let fix = fix.expect("the index warning has a fix").to_string();
    assert!(fix.starts_with("CREATE INDEX "), "{fix}");
    let (order, _) = warning(&text, "created_at earlier than the row before them")
        .unwrap_or_else(|| panic!("no order warning in:\n{text}"));
    assert!(
        order.starts_with(&format!("# WARNING: {bad} rows of messages ")),
        "{order}"
    );
    assert!(run.stderr.contains("warning: no index"), "{}", run.stderr);
    let _ = line;

    // The fix, run as printed, removes the index warning.
    exec_all(&mut conn, &[fix.trim_end_matches(';').to_string()]).await;
    let again = bin::run(dir.path(), &["inspect", "--database", &db.url]);
    again.expect_code(0);
    assert!(
        warning(&again.stdout, "no index on").is_none(),
        "{}",
        again.stdout
    );

    // --output never overwrites without --force (exit 2, the file untouched).
    let out = dir.path().join("mapping.toml");
    std::fs::write(&out, "keep me\n").unwrap();
    let refused = bin::run(
        dir.path(),
        &["inspect", "--database", &db.url, "--output", "mapping.toml"],
    );
    refused.expect_code(2);
    assert!(refused.stderr.contains("--force"), "{}", refused.stderr);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "keep me\n");
    bin::run(
        dir.path(),
        &[
            "inspect",
            "--database",
            &db.url,
            "--output",
            "mapping.toml",
            "--force",
        ],
    )
    .expect_code(0);
    let written = std::fs::read_to_string(&out).unwrap();
    assert!(
        written.starts_with("# Proposed by `tidemark inspect`"),
        "{written}"
    );
    Mapping::parse(&written, "mapping.toml").expect("the written proposal parses");
    drop(conn);
    db.cleanup().await;
}

/// A database with nothing to map: exit 1, the missing parts named; bad usage exits 2.
#[test]
fn nothing_to_map_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}?mode=rwc", dir.path().join("empty.db").display());
    let run = bin::run(dir.path(), &["inspect", "--database", &url]);
    run.expect_code(1);
    assert!(
        run.stderr.contains("missing:") && run.stderr.contains("a messages table"),
        "{}",
        run.stderr
    );
    assert!(
        run.stdout.contains("# MISSING: a counter column"),
        "{}",
        run.stdout
    );
    bin::run(dir.path(), &["inspect", "--database", &url, "--force"]).expect_code(2);
    bin::run(dir.path(), &["inspect", "--database", "nope://x"]).expect_code(2);
}

/// A schema with views and receipts that name an event by its text id: the comments say which
/// messages candidate is a view and why it was chosen over the table, and for each reference by
/// event id the `CREATE VIEW` that looks the position up (through the events table, so a read of
/// a state event still counts). Created as printed, the lookup view is proposed as the first
/// evidence, and the backfill reads the read position through it.
async fn views_and_event_lookups(backend: Backend) {
    let Some(db) = TestDb::create(backend, "insp_views").await else {
        return;
    };
    let mut conn = db.connect().await;
    let schema: Vec<String> = [
        "CREATE TABLE events (event_id VARCHAR(64) NOT NULL PRIMARY KEY, room_id VARCHAR(64) NOT NULL, \
         sender VARCHAR(64) NOT NULL, stream_ordering BIGINT NOT NULL, type VARCHAR(64) NOT NULL)",
        "CREATE INDEX events_room ON events (room_id, stream_ordering)",
        "CREATE VIEW messages_view AS SELECT event_id, room_id, sender, stream_ordering FROM events \
         WHERE type = 'm.room.message'",
        "CREATE TABLE room_members (room_id VARCHAR(64) NOT NULL, user_id VARCHAR(64) NOT NULL, \
         membership VARCHAR(16) NOT NULL, PRIMARY KEY (room_id, user_id))",
        "CREATE TABLE receipts (room_id VARCHAR(64) NOT NULL, user_id VARCHAR(64) NOT NULL, \
         event_id VARCHAR(64) NOT NULL)",
        "CREATE TABLE room_summaries (user_id VARCHAR(64) NOT NULL, room_id VARCHAR(64) NOT NULL, \
         last_read_event_id VARCHAR(64) NULL, PRIMARY KEY (user_id, room_id))",
        "CREATE TABLE unread_counts (user_id VARCHAR(64) NOT NULL, room_id VARCHAR(64) NOT NULL, \
         unread_count INT NOT NULL, PRIMARY KEY (user_id, room_id))",
        "INSERT INTO events (event_id, room_id, sender, stream_ordering, type) VALUES \
         ('$1', '!r', '@a', 1, 'm.room.message'), ('$2', '!r', '@a', 2, 'm.room.message'), \
         ('$3', '!r', '@a', 3, 'm.room.member'), ('$4', '!r', '@a', 4, 'm.room.message'), \
         ('$5', '!r', '@a', 5, 'm.room.message')",
        "INSERT INTO room_members (room_id, user_id, membership) VALUES ('!r', '@a', 'join'), ('!r', '@b', 'join')",
        // @b's receipt is on the state event $3: only the events table resolves it.
        "INSERT INTO receipts (room_id, user_id, event_id) VALUES ('!r', '@b', '$3')",
        "INSERT INTO room_summaries (user_id, room_id, last_read_event_id) VALUES ('@b', '!r', '$3')",
        "INSERT INTO unread_counts (user_id, room_id, unread_count) VALUES ('@a', '!r', 0), ('@b', '!r', 2)",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    exec_all(&mut conn, &schema).await;
    let dir = tempfile::tempdir().unwrap();
    let run = bin::run(dir.path(), &["inspect", "--database", &db.url]);
    let text = run.stdout.clone();
    for fact in [
        "# chosen: view messages_view (conversation room_id, sender sender, position stream_ordering",
        "# alternative: events (conversation room_id",
        "# a view is chosen by its name over the tables above",
        "# also seen: receipts.event_id (",
        "names a message by events.event_id, not by its position",
        "`CREATE VIEW receipts_positions AS SELECT r.user_id AS user_id, r.room_id AS room_id, \
         m.stream_ordering AS stream_ordering FROM receipts r JOIN events m ON m.event_id = \
         r.event_id AND m.room_id = r.room_id`",
        "# also seen: room_summaries.last_read_event_id (",
        "JOIN events m ON m.event_id = r.last_read_event_id AND m.room_id = r.room_id`",
        "table = \"room_summaries_positions\", column = \"stream_ordering\"",
    ] {
        assert!(text.contains(fact), "missing {fact:?} in:\n{text}");
    }

    // The lookup view, created as printed, is proposed as the first evidence.
    let statement = text
        .split('`')
        .find(|part| part.starts_with("CREATE VIEW receipts_positions"))
        .unwrap()
        .to_string();
    exec_all(&mut conn, &[statement]).await;
    let run = bin::run(
        dir.path(),
        &[
            "inspect",
            "--database",
            &db.url,
            "--output",
            "proposed.toml",
        ],
    );
    run.expect_code(0);
    let text = std::fs::read_to_string(dir.path().join("proposed.toml")).unwrap();
    assert!(
        text.contains("# receipts table seen: receipts_positions (view)"),
        "{text}"
    );
    let mapping = Mapping::parse(&text, "proposed.toml").expect("the proposal parses");
    let first = mapping.evidence[0]
        .source()
        .expect("a position evidence first");
    assert_eq!(first.table, "receipts_positions", "{text}");
    assert_eq!(first.column, "stream_ordering");
    assert!(
        text.contains(
            "the view receipts_positions (used as evidence above) may already be such a lookup"
        ),
        "{text}"
    );

    // Used unedited: @b's watermark is the state event's position, read through the view.
    for cmd in [
        &["expand"][..],
        &["backfill", "--quiet", "--settle-time", "0"],
    ] {
        let mut args = cmd.to_vec();
        args.extend(["--database", &db.url, "--mapping", "proposed.toml"]);
        bin::run(dir.path(), &args).expect_code(0);
    }
    let row = sqlx::query(
        "SELECT last_read_id, source FROM read_watermarks WHERE user_id = '@b' AND conversation_id = '!r'",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    let last: i64 = row
        .try_get::<i64, _>(0)
        .unwrap_or_else(|_| i64::from(row.get::<i32, _>(0)));
    assert_eq!(last, 3, "read through the lookup view");
    drop(conn);
    db.cleanup().await;
}
