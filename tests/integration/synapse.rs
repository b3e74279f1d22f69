//! A real schema: Matrix Synapse's unread counters (`tests/fixtures/synapse/`, the project's own
//! copy of the tables and rows of `../shared/fixtures/synapse.*.sql` that matter), mapped as in
//! The book's "Worked example: mapping Matrix Synapse" (`docs/src/synapse.md`): Synapse's own tables, and one view per
//! engine for the unread rule that reads the event's JSON.
//!
//! On every backend: load the Synapse tables, create the view, run expand, backfill (twice) and
//! audit (batches of 5000 and of 1), and check every (user, room) row of the fixture's expected
//! table: the stored counter, the watermark, and, in the drift report, recomputed, drift and class.
//! A row that does not drift must be absent from the report (stored = recomputed). Then the
//! contract: an audit that accepts the fixture's drift as a tolerance, `contract --execute`, the
//! archive equal to the dropped column (count, sum, per row), the column gone and the rest of
//! `event_push_summary` kept.
//!
//! A last test checks the project's fixture against `../shared/fixtures/` when it is present.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sqlx::{AnyConnection, Connection, Row};

use crate::common::{csv, exec_all, on_every_backend, Backend, TestDb};
use tidemark::db::Dsn;
use tidemark::mapping::Mapping;
use tidemark::stages::{audit, backfill, expand};
use tidemark::values::text;

on_every_backend!(synapse);
on_every_backend!(thread_rows_are_refused_by_the_contract);

const R1: &str = "!3-LbdJdeCqn2_dTWHe:example.org"; // general
const R2: &str = "!NMb87KdeRW8l5-mVMe:example.org"; // dev
const R3: &str = "!N85o7aEuyHnbLMQShk:example.org"; // DM alice/bob
const R4: &str = "!pBWrXMF8jAk8AVzNt-:example.org"; // random

/// One row of the fixture's expected table (the header of `synapse.<dialect>.sql`).
struct Expected {
    room: &'static str,
    user: &'static str,
    stored: i64,
    recomputed: i64,
    drift: i64,
    /// The watermark the backfill writes (the stream ordering of evN is N); None: no watermark
    /// row, because tidemark backfills active members only.
    last_read: Option<i64>,
    /// The drift class semantics.md gives the row (None: no drift).
    class: Option<&'static str>,
}

const fn row(
    room: &'static str,
    user: &'static str,
    stored: i64,
    recomputed: i64,
    drift: i64,
    last_read: Option<i64>,
    class: Option<&'static str>,
) -> Expected {
    Expected {
        room,
        user,
        stored,
        recomputed,
        drift,
        last_read,
        class,
    }
}

/// Every (user, room) of the fixture. Classes are the first of semantics.md's order that
/// applies (the views decide countable / legacy_countable: see views.<dialect>.sql).
const EXPECTED: [Expected; 12] = [
    row(R1, "@alice:example.org", 1, 1, 0, Some(10), None),
    // Watermark ev7. Countable for bob after it: ev9, ev10, ev13 = 3. The fixture's cause is a
    // duplicate increment of ev10, but bob's own ev12 ("thanks", a message the legacy rule
    // counts) is also after his watermark, and 4 = 3 + 1 own: `own_messages_counted` comes
    // before `overcount` in semantics.md, so it is the class. Not `exceeds_history`: 4 is not
    // more than the 4 messages countable for bob in the room (ev6, ev9, ev10, ev13).
    row(
        R1,
        "@bob:example.org",
        4,
        3,
        1,
        Some(7),
        Some("own_messages_counted"),
    ),
    // Watermark ev7. Countable for carol after it: ev10, ev12, ev13 = 3; her own ev9 was counted
    // (the corrupt push action). Own messages after the watermark that the legacy rule counts:
    // ev9 only (her ev8 is an m.notice), so 4 = 3 + 1: `own_messages_counted`.
    row(
        R1,
        "@carol:example.org",
        4,
        3,
        1,
        Some(7),
        Some("own_messages_counted"),
    ),
    // Left the room (membership 'leave'): owed 0, the summary row survived the leave: `orphan`.
    // A member who left keeps the read position of his receipt (ev6, stream ordering 6), so a
    // rejoin does not bring every message back as unread (semantics.md "Backfill", S10).
    row(R1, "@dave:example.org", 3, 0, 3, Some(6), Some("orphan")),
    row(R2, "@alice:example.org", 1, 1, 0, Some(21), None),
    // Watermark ev19; ev21 (alice) arrived and is unread, ev20 is an edit, ev22 bob's own:
    // stored 0 < recomputed 1, not own/excluded arithmetic: `cleared`.
    row(R2, "@bob:example.org", 0, 1, -1, Some(19), Some("cleared")),
    row(R2, "@erin:example.org", 2, 2, 0, Some(18), None),
    // Watermark ev28. After it: ev29 (redacted: legacy_countable, not countable), ev30 (the
    // redaction event: neither), ev31 (countable). 2 = 1 + 1 redacted message the summary still
    // counts: `excluded_counted` (no own message of alice after ev28).
    row(
        R3,
        "@alice:example.org",
        2,
        1,
        1,
        Some(28),
        Some("excluded_counted"),
    ),
    // stored -1 < 0 (bob is a member): `negative`.
    row(
        R3,
        "@bob:example.org",
        -1,
        0,
        -1,
        Some(31),
        Some("negative"),
    ),
    // No read receipt: the second evidence, the join event ev33, is the watermark.
    row(R4, "@alice:example.org", 4, 4, 0, Some(33), None),
    row(R4, "@carol:example.org", 2, 2, 0, Some(37), None),
    row(R4, "@erin:example.org", 0, 0, 0, Some(40), None),
];

pub(crate) fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/synapse")
}

/// The statements of an SQL file: whole-line `--` comments dropped, a statement ends with a
/// line ending in `;`.
pub(crate) fn statements(path: &Path) -> Vec<String> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    split_sql(&text, &path.display().to_string())
}

/// [`statements`] of a text; `what` names it in the panic message.
fn split_sql(text: &str, what: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("--") {
            continue;
        }
        current.push_str(line);
        current.push('\n');
        if line.trim_end().ends_with(';') {
            out.push(std::mem::take(&mut current));
        }
    }
    assert!(current.trim().is_empty(), "{what}: unterminated statement");
    out
}

/// The fenced blocks tagged `lang` in the book's chapter "Worked example: mapping Matrix
/// Synapse" (`docs/src/synapse.md`), in order.
fn readme_blocks(lang: &str) -> Vec<String> {
    let section =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/synapse.md"))
            .expect("docs/src/synapse.md");
    let mut blocks = Vec::new();
    let mut open: Option<String> = None;
    for line in section.lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(tag)) if tag.trim() == lang => open = Some(String::new()),
            (None, Some(_)) => open = Some(String::from("\u{0}")), // another language: skipped
            (Some(block), Some("")) => {
                if !block.starts_with('\u{0}') {
                    blocks.push(std::mem::take(block));
                }
                open = None;
            }
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            _ => {}
        }
    }
    blocks
}

/// docs/src/synapse.md (the worked example) shows this fixture's views and mapping (the report is checked by
/// `synapse_sqlite`).
#[test]
fn readme_shows_the_fixture() {
    let sql = readme_blocks("sql");
    assert_eq!(sql.len(), 1, "one sql block in the section");
    let views = std::fs::read_to_string(crate::common::known_mapping_file(
        "synapse",
        "views.sqlite.sql",
    ))
    .unwrap();
    let trimmed = |v: Vec<String>| v.iter().map(|s| s.trim().to_string()).collect::<Vec<_>>();
    assert_eq!(
        trimmed(split_sql(&sql[0], "docs/src/synapse.md")),
        trimmed(split_sql(&views, "views.sqlite.sql")),
        "docs/src/synapse.md's views differ from contrib/mappings/synapse/views.sqlite.sql (comments aside)"
    );
    let toml = readme_blocks("toml");
    assert_eq!(toml.len(), 1, "one toml block in the section");
    let file = std::fs::read_to_string(crate::common::known_mapping("synapse")).unwrap();
    let body: String = file
        .lines()
        .skip_while(|l| l.starts_with('#') || l.trim().is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        toml[0], body,
        "docs/src/synapse.md's mapping differs from contrib/mappings/synapse/tidemark.toml"
    );
}

/// (room, user) -> (last_read_id, source).
type Watermarks = BTreeMap<(String, String), (i64, Option<String>)>;

async fn watermarks(conn: &mut AnyConnection) -> Watermarks {
    let rows =
        sqlx::query("SELECT conversation_id, user_id, last_read_id, source FROM read_watermarks")
            .fetch_all(&mut *conn)
            .await
            .expect("reading read_watermarks");
    rows.iter()
        .map(|r| {
            (
                (
                    text(r, 0).unwrap().unwrap_or_default(),
                    text(r, 1).unwrap().unwrap_or_default(),
                ),
                (r.try_get::<i64, _>(2).unwrap(), text(r, 3).unwrap()),
            )
        })
        .collect()
}

/// One report row: (stored, recomputed, drift, class, last_read_id, watermark_source), cells as
/// written (empty: NULL).
type ReportRow = (String, String, String, String, String, String);

fn read_report(path: &Path) -> BTreeMap<(String, String), ReportRow> {
    let file = csv::read(path);
    let header = file.header;
    assert_eq!(
        header,
        "conversation_id,user_id,stored_unread,recomputed_unread,drift,class,last_read_id,watermark_source"
    );
    let mut out = BTreeMap::new();
    for r in &file.rows {
        let key = (r[0].to_string(), r[1].to_string());
        let value = (
            r[2].to_string(),
            r[3].to_string(),
            r[4].to_string(),
            r[5].to_string(),
            r[6].to_string(),
            r[7].to_string(),
        );
        assert!(
            out.insert(key.clone(), value).is_none(),
            "report repeats {key:?}"
        );
    }
    out
}

/// A new database `tag` holding the fixture (its dump and the view), with its dialect and a
/// connection; None when the backend is skipped.
async fn loaded(
    backend: Backend,
    tag: &str,
) -> Option<(TestDb, tidemark::dialect::Dialect, AnyConnection)> {
    let db = TestDb::create(backend, tag).await?;
    let dsn = Dsn::parse(&db.url).expect("test URL");
    let mut conn = dsn.connect().await.expect("connecting");
    let dir = fixture_dir();
    let name = backend.name();
    exec_all(
        &mut conn,
        &statements(&dir.join(format!("synapse.{name}.sql"))),
    )
    .await;
    exec_all(
        &mut conn,
        &statements(&crate::common::known_mapping_file(
            "synapse",
            &format!("views.{name}.sql"),
        )),
    )
    .await;
    Some((db, dsn.dialect, conn))
}

async fn synapse(backend: Backend) {
    let Some((db, dialect, mut conn)) = loaded(backend, "synapse").await else {
        return; // skipped: the note is on stderr
    };
    let name = backend.name();
    let mapping =
        Mapping::load(&crate::common::known_mapping("synapse")).expect("the mapping loads");
    let mut problems: Vec<String> = Vec::new();

    // The stored counters, the main timeline's rows: exactly the expected table.
    let rows = sqlx::query(
        "SELECT room_id, user_id, unread_count FROM event_push_summary WHERE thread_id = 'main'",
    )
    .fetch_all(&mut conn)
    .await
    .expect("reading event_push_summary");
    let stored: BTreeMap<(String, String), i64> = rows
        .iter()
        .map(|r| {
            (
                (
                    text(r, 0).unwrap().unwrap_or_default(),
                    text(r, 1).unwrap().unwrap_or_default(),
                ),
                r.try_get::<i64, _>(2).unwrap(),
            )
        })
        .collect();
    if stored.len() != EXPECTED.len() {
        problems.push(format!(
            "event_push_summary has {} main-timeline rows, the fixture {}",
            stored.len(),
            EXPECTED.len()
        ));
    }

    // The mapping's tables, columns and predicates, as every stage checks them first.
    mapping
        .check_predicates(dialect.sql_parser_dialect(), dialect.name())
        .expect("predicates parse");
    tidemark::schema::preflight(&mut conn, &mapping, dialect)
        .await
        .expect("preflight");
    // expand: the watermark table takes the key types of local_current_membership.
    expand::run(&mut conn, &mapping, dialect, false)
        .await
        .expect("expand");

    let first = backfill::run(&mut conn, &mapping, dialect, &Default::default())
        .await
        .expect("backfill");
    // 11 joined members, every one with a receipt or a membership event, and dave, who left
    // and keeps the read position of his receipt (stream ordering 6): a member who rejoins must
    // not find every message unread (semantics.md "Backfill", scenario S10).
    assert_eq!(first.members, 12, "backfill members: {first:?}");
    assert_eq!(first.no_evidence, 0, "backfill: {first:?}");
    assert_eq!(
        first.by_source.get("position"),
        Some(&12),
        "backfill: {first:?}"
    );
    let wms = watermarks(&mut conn).await;
    backfill::run(&mut conn, &mapping, dialect, &Default::default())
        .await
        .expect("second backfill");
    if watermarks(&mut conn).await != wms {
        problems.push("a second backfill changed the watermarks".into());
    }
    if wms.len() != 12 {
        problems.push(format!("{} watermarks, expected 12: {wms:?}", wms.len()));
    }
    let dave = wms
        .iter()
        .find(|((_, user), _)| user == "@dave:example.org")
        .map(|(_, wm)| wm.0);
    if dave != Some(6) {
        problems.push(format!(
            "dave (left) should keep his receipt's position 6: {dave:?}"
        ));
    }

    let tmp = tempfile::tempdir().unwrap();
    let mut reports = Vec::new();
    for batch_size in [5000, 1] {
        let report = tmp.path().join(format!("drift-{batch_size}.csv"));
        let outcome = audit::run(
            &mut conn,
            &mapping,
            dialect,
            &audit::AuditOptions {
                report: report.clone(),
                batch_size,
                ..Default::default()
            },
        )
        .await
        .expect("audit");
        let s = &outcome.summary;
        let want_drifting = EXPECTED.iter().filter(|e| e.drift != 0).count() as u64;
        if (s.rows_checked, s.drifting_rows, s.complete, s.passed)
            != (EXPECTED.len() as u64, want_drifting, true, false)
        {
            problems.push(format!(
                "audit (batch {batch_size}): rows_checked {}, drifting {}, complete {}, passed {}; expected {}, {want_drifting}, true, false",
                s.rows_checked, s.drifting_rows, s.complete, s.passed, EXPECTED.len()
            ));
        }
        if batch_size == 1 && s.batches < 4 {
            problems.push(format!(
                "audit with batches of 1 ran {} batches for 4 rooms",
                s.batches
            ));
        }
        let mut want_classes: BTreeMap<String, u64> = BTreeMap::new();
        for e in &EXPECTED {
            if let Some(c) = e.class {
                *want_classes.entry(c.to_string()).or_default() += 1;
            }
        }
        let got_classes: BTreeMap<String, u64> = s
            .by_class
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        if got_classes != want_classes {
            problems.push(format!(
                "audit (batch {batch_size}): classes {got_classes:?}, expected {want_classes:?}"
            ));
        }
        reports.push(read_report(&report));
    }
    if reports[0] != reports[1] {
        problems.push(format!(
            "the reports of batches of 5000 and of 1 differ:\n{:?}\n{:?}",
            reports[0], reports[1]
        ));
    }
    let report = &reports[0];
    if backend == Backend::Sqlite {
        // docs/src/synapse.md's worked example ends with this report, produced on SQLite.
        let csv = readme_blocks("csv");
        let written = std::fs::read_to_string(tmp.path().join("drift-5000.csv")).unwrap();
        if csv.len() != 1 || csv[0] != written {
            problems.push(format!(
                "docs/src/synapse.md's report differs from the audit's:\n{written}\ndocs/src/synapse.md:\n{}",
                csv.join("\n")
            ));
        }
    }

    for e in &EXPECTED {
        let key = (e.room.to_string(), e.user.to_string());
        let who = format!("{} in {}", e.user, e.room);
        match stored.get(&key) {
            Some(v) if *v == e.stored => {}
            other => problems.push(format!("{who}: stored {other:?}, expected {}", e.stored)),
        }
        let wm = wms.get(&key);
        match (wm, e.last_read) {
            (None, None) => {}
            (Some((id, source)), Some(want))
                if *id == want && source.as_deref() == Some("position") => {}
            (got, want) => problems.push(format!(
                "{who}: watermark {got:?}, expected {want:?} from position"
            )),
        }
        assert_eq!(e.stored - e.recomputed, e.drift, "the table itself: {who}");
        match (report.get(&key), e.class) {
            (None, None) => {} // not drifting: the audit recomputed the stored value
            (Some(got), Some(class)) => {
                let want: ReportRow = (
                    e.stored.to_string(),
                    e.recomputed.to_string(),
                    e.drift.to_string(),
                    class.to_string(),
                    e.last_read.map(|v| v.to_string()).unwrap_or_default(),
                    if e.last_read.is_some() {
                        "position".into()
                    } else {
                        String::new()
                    },
                );
                if *got != want {
                    problems.push(format!("{who}: report row {got:?}, expected {want:?}"));
                }
            }
            (got, _) => problems.push(format!(
                "{who}: report row {got:?}, expected {}",
                if e.class.is_some() {
                    "a drifting row"
                } else {
                    "none (no drift)"
                }
            )),
        }
    }
    for key in report.keys() {
        if !EXPECTED
            .iter()
            .any(|e| (e.room, e.user) == (key.0.as_str(), key.1.as_str()))
        {
            problems.push(format!("unexpected report row {key:?}"));
        }
    }

    if problems.is_empty() {
        contract(&mut conn, &mapping, dialect, tmp.path(), &mut problems).await;
    }

    let _ = conn.close().await;
    db.cleanup().await;
    assert!(
        problems.is_empty(),
        "synapse on {name}:\n  {}",
        problems.join("\n  ")
    );
}

/// The contract on the fixture. Its drift is real (Synapse's counters are wrong where the table
/// says), so the DBA accepts it as the tolerance of an audit (6 rows, |drift| up to 3, ratio
/// 0.5) and `--accept-tolerance` lets that audit count; `contract --execute` runs its final
/// audit with the same tolerance, archives `event_push_summary.unread_count` and drops it.
async fn contract(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: tidemark::dialect::Dialect,
    dir: &Path,
    problems: &mut Vec<String>,
) {
    use tidemark::stages::contract::{self, ContractOptions};
    let tolerated = audit::run(
        conn,
        mapping,
        dialect,
        &audit::AuditOptions {
            report: dir.join("tolerated.csv"),
            max_drift_rows: 6,
            max_abs_drift: 3,
            max_drift_ratio: 0.5,
            ..Default::default()
        },
    )
    .await
    .expect("audit with a tolerance");
    assert!(tolerated.summary.passed, "{:?}", tolerated.summary);

    // Every row of the table (every thread's, though the fixture has only 'main'): the
    // column is dropped from all of them.
    let read_all = "SELECT room_id, user_id, unread_count FROM event_push_summary";
    let before: BTreeMap<(String, String), Option<i64>> = sqlx::query(read_all)
        .fetch_all(&mut *conn)
        .await
        .expect("event_push_summary")
        .iter()
        .map(|r| {
            (
                (
                    text(r, 0).unwrap().unwrap_or_default(),
                    text(r, 1).unwrap().unwrap_or_default(),
                ),
                r.try_get::<Option<i64>, _>(2).unwrap(),
            )
        })
        .collect();
    let archive_csv = dir.join("archive.csv");
    let outcome = contract::run(
        conn,
        mapping,
        dialect,
        &ContractOptions {
            execute: true,
            gate: tidemark::gate::GateOptions {
                accept_tolerance: true,
                ..Default::default()
            },
            archive_csv: Some(archive_csv.clone()),
            ..Default::default()
        },
    )
    .await
    .expect("contract --execute");
    if !outcome.executed || outcome.gate_closed() {
        problems.push(format!("contract --execute did not drop: {outcome:?}"));
        return;
    }
    // The archive: one row per counter row, the dropped values.
    let archived: BTreeMap<(String, String), Option<i64>> =
        sqlx::query("SELECT conversation_id, user_id, counter_value FROM tidemark_counter_archive")
            .fetch_all(&mut *conn)
            .await
            .expect("tidemark_counter_archive")
            .iter()
            .map(|r| {
                (
                    (
                        text(r, 0).unwrap().unwrap_or_default(),
                        text(r, 1).unwrap().unwrap_or_default(),
                    ),
                    r.try_get::<Option<i64>, _>(2).unwrap(),
                )
            })
            .collect();
    let sum = |m: &BTreeMap<(String, String), Option<i64>>| m.values().flatten().sum::<i64>();
    assert_eq!(before.len(), EXPECTED.len());
    assert_eq!(sum(&before), EXPECTED.iter().map(|e| e.stored).sum::<i64>());
    if archived != before {
        problems.push(format!(
            "the archive ({} rows, sum {}) differs from the dropped column ({} rows, sum {}):\n{archived:?}\n{before:?}",
            archived.len(),
            sum(&archived),
            before.len(),
            sum(&before)
        ));
    }
    let from_csv = csv::read(&archive_csv);
    if from_csv.rows.len() != before.len() {
        problems.push(format!(
            "archive CSV: {} rows, expected {}",
            from_csv.rows.len(),
            before.len()
        ));
    }
    // The column is gone; the rest of the table stays, every row.
    if sqlx::query(read_all).fetch_all(&mut *conn).await.is_ok() {
        problems.push("event_push_summary.unread_count is still there".into());
    }
    let kept: i64 = sqlx::query("SELECT COUNT(notif_count) FROM event_push_summary")
        .fetch_one(&mut *conn)
        .await
        .expect("event_push_summary keeps its other columns")
        .try_get(0)
        .unwrap();
    if kept != EXPECTED.len() as i64 {
        problems.push(format!("event_push_summary kept {kept} rows"));
    }
}

/// The project's fixture holds the shared fixture's rows (the columns it keeps), its three
/// dialect files hold the same data, and EXPECTED is the shared header's table. Skipped without
/// `../shared`.
#[tokio::test]
async fn fixture_matches_shared() {
    let dir = fixture_dir();
    // The data is the same in every dialect: from the first INSERT on, the files are equal.
    let data = |d: &str| {
        let t = std::fs::read_to_string(dir.join(format!("synapse.{d}.sql"))).unwrap();
        let at = t.find("INSERT INTO").expect("data");
        t[at..].to_string()
    };
    assert_eq!(
        data("sqlite"),
        data("postgres"),
        "synapse.postgres.sql data"
    );
    assert_eq!(data("sqlite"), data("mysql"), "synapse.mysql.sql data");

    let shared_path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/synapse.sqlite.sql");
    let Ok(shared_sql) = std::fs::read_to_string(&shared_path) else {
        eprintln!("{} not found: nothing to compare", shared_path.display());
        return;
    };

    // EXPECTED is the shared header's table.
    let header: Vec<Vec<String>> = shared_sql
        .lines()
        .filter(|l| l.starts_with("-- | R"))
        .map(|l| l[3..].split('|').map(|c| c.trim().to_string()).collect())
        .collect();
    assert_eq!(
        header.len(),
        EXPECTED.len(),
        "rows of the shared expected table"
    );
    for cells in &header {
        // | room | user | room_id | user_id | stored | recomputed | drift | notif | last_read | kind |
        let (room, user) = (cells[3].as_str(), cells[4].as_str());
        let e = EXPECTED
            .iter()
            .find(|e| e.room == room && e.user == user)
            .unwrap_or_else(|| panic!("shared row {user} in {room} is not in EXPECTED"));
        let ev: i64 = cells[9]
            .split_whitespace()
            .find_map(|w| {
                w.trim_start_matches('(')
                    .strip_prefix("ev")?
                    .trim_end_matches(')')
                    .parse()
                    .ok()
            })
            .expect("evN");
        let nums: Vec<i64> = cells[5..8].iter().map(|c| c.parse().unwrap()).collect();
        assert_eq!(
            nums,
            vec![e.stored, e.recomputed, e.drift],
            "{user} in {room}"
        );
        // The watermark the shared table names (dave's receipt ev6 included: tidemark writes none
        // for a member who left, and owes him 0 whatever it is).
        assert_eq!(e.last_read.unwrap_or(6), ev, "{user} in {room}: watermark");
    }

    // The rows: load both files into SQLite and compare the columns the project keeps.
    let tmp = tempfile::tempdir().unwrap();
    let open = |file: &str| format!("sqlite:{}?mode=rwc", tmp.path().join(file).display());
    let mut shared = crate::common::connect(&open("shared.db")).await;
    sqlx::raw_sql(&shared_sql)
        .execute(&mut shared)
        .await
        .expect("loading the shared fixture");
    let mut ours = crate::common::connect(&open("ours.db")).await;
    exec_all(&mut ours, &statements(&dir.join("synapse.sqlite.sql"))).await;
    let tables = [
        ("events", "stream_ordering, event_id, type, room_id, sender, state_key, outlier, rejection_reason", "stream_ordering"),
        ("redactions", "event_id, redacts", "event_id"),
        ("local_current_membership", "room_id, user_id, event_id, membership, event_stream_ordering", "user_id, room_id"),
        ("receipts_linearized", "stream_id, room_id, receipt_type, user_id, event_id, thread_id, event_stream_ordering", "stream_id"),
        ("event_push_summary", "user_id, room_id, notif_count, stream_ordering, unread_count, last_receipt_stream_ordering, thread_id", "user_id, room_id, thread_id"),
        ("event_json", "event_id, room_id, json", "event_id"),
    ];
    for (table, cols, order) in tables {
        let quoted = cols
            .split(", ")
            .map(|c| format!("quote({c})"))
            .collect::<Vec<_>>()
            .join(" || '|' || ");
        let sql = format!("SELECT {quoted} FROM {table} ORDER BY {order}");
        let read = |rows: Vec<sqlx::any::AnyRow>| -> Vec<String> {
            rows.iter()
                .map(|r| r.try_get::<String, _>(0).unwrap())
                .collect()
        };
        let a = read(sqlx::query(&sql).fetch_all(&mut shared).await.unwrap());
        let b = read(sqlx::query(&sql).fetch_all(&mut ours).await.unwrap());
        assert!(!a.is_empty(), "{table}: no rows in the shared fixture");
        if table != "event_json" {
            assert_eq!(
                a, b,
                "{table}: the project's rows differ from the shared fixture's"
            );
            continue;
        }
        // event_json: the same events; the project keeps the keys that decide unread, equal.
        assert_eq!(a.len(), b.len(), "event_json rows");
        let json_of = |quoted_row: &str| -> serde_json::Value {
            let json = quoted_row.splitn(3, '|').nth(2).unwrap();
            let inner = &json[1..json.len() - 1];
            serde_json::from_str(&inner.replace("''", "'")).unwrap()
        };
        for (full, kept) in a.iter().zip(&b) {
            let prefix = |s: &str| s.splitn(3, '|').take(2).collect::<Vec<_>>().join("|");
            assert_eq!(prefix(full), prefix(kept), "event_json keys");
            let (full, kept) = (json_of(full), json_of(kept));
            for key in [
                "type",
                "room_id",
                "sender",
                "state_key",
                "content",
                "redacts",
            ] {
                assert_eq!(
                    full.get(key),
                    kept.get(key),
                    "event_json.json {key}: {full}"
                );
            }
        }
    }
    let _ = shared.close().await;
    let _ = ours.close().await;
}

/// A member with a thread's summary row beside the main timeline's (the fixture has only
/// 'main' rows): the archive keys values by (room, user), so it could not tell the two rows'
/// values apart; the contract (dry run or not) refuses with exit 2 before archiving anything,
/// naming the table and the room, and the column stays.
async fn thread_rows_are_refused_by_the_contract(backend: Backend) {
    use tidemark::stages::contract::{self, ContractOptions};
    let Some((db, dialect, mut conn)) = loaded(backend, "synapse_threads").await else {
        return;
    };
    let (room, user): (String, String) = {
        let row = sqlx::query(
            "SELECT room_id, user_id FROM event_push_summary WHERE thread_id = 'main' ORDER BY room_id, user_id",
        )
        .fetch_one(&mut conn)
        .await
        .expect("a main row");
        (row.get(0), row.get(1))
    };
    exec_all(
        &mut conn,
        &[format!(
            "INSERT INTO event_push_summary (user_id, room_id, notif_count, stream_ordering, unread_count, thread_id) \
             VALUES ('{user}', '{room}', 0, 1, 7, '$thread1')"
        )],
    )
    .await;
    let mapping =
        Mapping::load(&crate::common::known_mapping("synapse")).expect("the mapping loads");
    expand::run(&mut conn, &mapping, dialect, false)
        .await
        .expect("expand");
    for execute in [false, true] {
        let err = contract::run(
            &mut conn,
            &mapping,
            dialect,
            &ContractOptions {
                execute,
                force: true,
                reason: Some("test".into()),
                ..Default::default()
            },
        )
        .await
        .expect_err("the contract refuses keys with several rows");
        let text = format!("{err:#}");
        assert!(
            text.contains("1 key(s) of the archive") && text.contains(&room),
            "{text}"
        );
        assert_eq!(tidemark::cli::Outcome::code_of(&err), 2, "{text}");
    }
    let n: i64 = sqlx::query_scalar("SELECT COUNT(unread_count) FROM event_push_summary")
        .fetch_one(&mut conn)
        .await
        .expect("the column is still there");
    assert!(n > 0);
    let archived: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tidemark_counter_archive")
        .fetch_one(&mut conn)
        .await
        .expect("the archive table");
    assert_eq!(archived, 0, "nothing archived");
    let _ = conn.close().await;
    db.cleanup().await;
}
