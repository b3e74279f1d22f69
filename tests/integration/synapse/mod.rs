//! A real schema: Matrix Synapse's unread counters (`tests/fixtures/synapse/`, the project's own
//! copy of the tables and rows of `../shared/fixtures/synapse.*.sql` that matter), mapped as in
//! the book's "Worked example: mapping Matrix Synapse" (`docs/src/synapse.md`): Synapse's own tables, and one view per
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

use crate::common::fixture::Fixture;
use crate::common::{csv, exec_all, on_every_backend, Backend};
use tidemark::mapping::Mapping;
use tidemark::stages::{audit, expand};
use tidemark::values::text;

mod contract;
mod copies;

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

/// The drift report: (room, user) -> its row.
type Report = BTreeMap<(String, String), ReportRow>;

fn read_report(path: &Path) -> Report {
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

async fn synapse(backend: Backend) {
    // The runner loads the Synapse tables and the view (`synapse.<engine>.sql`,
    // `views.<engine>.sql`) and the mapping, its predicates checked.
    let Some(mut f) = Fixture::load_files(backend, "synapse", &["synapse", "views"]).await else {
        return; // skipped: the note is on stderr
    };
    let name = backend.name();
    let mut problems: Vec<String> = Vec::new();
    let stored = stored_counters(&mut f.conn, &mut problems).await;

    // The mapping's tables, columns and predicates, as every stage checks them first.
    tidemark::schema::preflight(&mut f.conn, &f.mapping, f.dialect)
        .await
        .expect("preflight");
    // expand: the watermark table takes the key types of local_current_membership.
    f.expand().await;
    let first = f.backfill().await;
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
    let wms = watermarks(&mut f.conn).await;
    f.backfill().await;
    if watermarks(&mut f.conn).await != wms {
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

    let report = audits(&mut f, backend, &mut problems).await;
    check_rows(&stored, &wms, &report, &mut problems);

    if problems.is_empty() {
        let tmp = f.tmp.path().to_path_buf();
        contract::contract(&mut f.conn, &f.mapping, f.dialect, &tmp, &mut problems).await;
    }
    f.finish().await;
    assert!(
        problems.is_empty(),
        "synapse on {name}:\n  {}",
        problems.join("\n  ")
    );
}

/// The stored counters, the main timeline's rows: exactly the expected table (a problem
/// noted otherwise). (room, user) -> unread_count.
async fn stored_counters(
    conn: &mut AnyConnection,
    problems: &mut Vec<String>,
) -> BTreeMap<(String, String), i64> {
    let rows = sqlx::query(
        "SELECT room_id, user_id, unread_count FROM event_push_summary WHERE thread_id = 'main'",
    )
    .fetch_all(&mut *conn)
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

    stored
}

/// The audit in batches of 5000 and of 1: the summary and classes of the expected table each
/// time, the same report both times, and on SQLite the report the book shows. Returns the
/// report (problems noted).
async fn audits(f: &mut Fixture, backend: Backend, problems: &mut Vec<String>) -> Report {
    let mut reports = Vec::new();
    for batch_size in [5000, 1] {
        let report = f.path(&format!("drift-{batch_size}.csv"));
        let outcome = f
            .audit(&audit::AuditOptions {
                report: report.clone(),
                batch_size,
                ..Default::default()
            })
            .await;
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
    if backend == Backend::Sqlite {
        // docs/src/synapse.md's worked example ends with this report, produced on SQLite.
        let csv = readme_blocks("csv");
        let written = std::fs::read_to_string(f.path("drift-5000.csv")).unwrap();
        if csv.len() != 1 || csv[0] != written {
            problems.push(format!(
                "docs/src/synapse.md's report differs from the audit's:\n{written}\nthe book:\n{}",
                csv.join("\n")
            ));
        }
    }
    reports.swap_remove(0)
}

/// Every row of the expected table: the stored counter, the watermark, and in the report
/// recomputed, drift and class (a row that does not drift is absent); no other report row.
fn check_rows(
    stored: &BTreeMap<(String, String), i64>,
    wms: &Watermarks,
    report: &Report,
    problems: &mut Vec<String>,
) {
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
}

on_every_backend!(synapse);
