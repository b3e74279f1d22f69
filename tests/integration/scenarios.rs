//! Every shared scenario (`tests/data/scenarios.json`, a copy of `shared/spec/scenarios.json`)
//! on every backend: load the legacy database, expand, add the application's existing
//! watermarks, backfill, audit, and compare with what the scenario expects.
//!
//! Each scenario runs in a fresh database, once with batches of 1000 rows and once with batches
//! of 1 (one conversation per batch, the smallest batch the stages make). Then the scenarios
//! that share a shape and options run together in one database, each shifted to conversations
//! of its own (as `demo` loads them), so that batches of 1 cross many conversations. Failures
//! are collected and reported together at the end, one line per mismatch.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{bail, Context, Result};
use sqlx::{AnyConnection, Connection, Row};

use crate::common::{csv, exec_all, on_every_backend, Backend, TestDb};
use crate::scenario::{self, Scenario};
use tidemark::db::Dsn;
use tidemark::dialect::Dialect;
use tidemark::mapping::Mapping;
use tidemark::stages::{audit, backfill, expand};

on_every_backend!(all_scenarios);

/// The batch sizes every scenario runs with.
const BATCH_SIZES: [u64; 2] = [1000, 1];

/// The CSV report headers (`shared/spec/interface.md`, a contract).
const PER_MEMBER_HEADER: &str =
    "conversation_id,user_id,stored_unread,recomputed_unread,drift,class,last_read_id,watermark_source";
const PER_MESSAGE_HEADER: &str =
    "conversation_id,message_id,stored_unread,recomputed_unread,drift,class";

/// The drift classes of semantics.md.
const CLASSES: [&str; 9] = [
    "null_counter",
    "orphan",
    "negative",
    "own_messages_counted",
    "excluded_counted",
    "cleared",
    "exceeds_history",
    "overcount",
    "undercount",
];

#[test]
fn scenarios_file_matches_shared_spec() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let shared = manifest.join("../shared/spec/scenarios.json");
    let Ok(spec) = std::fs::read(&shared) else {
        eprintln!("{} not found: nothing to compare", shared.display());
        return;
    };
    let copy = std::fs::read(manifest.join("tests/data/scenarios.json"))
        .expect("tests/data/scenarios.json");
    assert!(
        spec == copy,
        "tests/data/scenarios.json differs from {}: copy it again (byte for byte)",
        shared.display()
    );
    assert_eq!(
        scenario::SCENARIOS_JSON.as_bytes(),
        &copy[..],
        "the embedded copy is stale: rebuild"
    );
}

/// Runs every scenario with every batch size on `backend` and asserts that none failed: each
/// scenario alone in a fresh database, then the scenarios of each (shape, options) group
/// together in one database, shifted by [`GROUP_OFFSET`] each (as `demo` loads them), so that
/// batches of 1 cross many conversations.
async fn all_scenarios(backend: Backend) {
    let scenarios = scenario::load_all().expect("loading the scenarios");
    let mut failures = Vec::new();
    let mut failed_runs = 0;
    let mut runs = 0;
    let mut groups: BTreeMap<(String, Option<i64>, bool), Vec<&Scenario>> = BTreeMap::new();
    for s in &scenarios {
        groups
            .entry((
                s.shape.clone(),
                s.options.cap,
                s.options.own_message_lower_bound,
            ))
            .or_default()
            .push(s);
    }
    for batch_size in BATCH_SIZES {
        let mut cases: Vec<(String, Vec<(&Scenario, i64)>)> = scenarios
            .iter()
            .map(|s| (s.id.clone(), vec![(s, 0)]))
            .collect();
        for ((shape, cap, own), members) in &groups {
            if members.len() > 1 {
                let name = format!(
                    "together[{shape}{}{}: {}]",
                    cap.map(|c| format!(", cap {c}")).unwrap_or_default(),
                    if *own { ", own_message" } else { "" },
                    members.len()
                );
                let shifted = members
                    .iter()
                    .enumerate()
                    .map(|(i, s)| (*s, (i as i64 + 1) * GROUP_OFFSET))
                    .collect();
                cases.push((name, shifted));
            }
        }
        for (name, case) in &cases {
            let short = name.split(['-', '[']).next().unwrap_or(name);
            let Some(db) = TestDb::create(backend, &format!("{short}_b{batch_size}")).await else {
                return; // skipped: the note is on stderr
            };
            runs += 1;
            let problems = match run_case(&db, case, batch_size).await {
                Ok(problems) => problems,
                Err(e) => vec![format!("error: {e:#}")],
            };
            if !problems.is_empty() {
                failed_runs += 1;
            }
            failures.extend(
                problems
                    .into_iter()
                    .map(|p| format!("{name} [{} batch {batch_size}]: {p}", backend.name())),
            );
            db.cleanup().await;
        }
    }
    assert!(
        failures.is_empty(),
        "{failed_runs} of {runs} scenario runs on {} failed:\n  {}",
        backend.name(),
        failures.join("\n  ")
    );
    eprintln!("{}: {runs} scenario runs passed", backend.name());
}

/// The forms of the audit statement every case's audit runs in (the default, `Auto`, picks one
/// of these per batch).
const AUDIT_FORMS: [audit::AuditForm; 3] = [
    audit::AuditForm::OnePass,
    audit::AuditForm::Probe,
    audit::AuditForm::Auto,
];

/// Conversation id shift between scenarios loaded into one database.
const GROUP_OFFSET: i64 = 1000;

/// One audit report row, as compared: (conversation, user or message id, stored, recomputed,
/// drift, class).
type AuditKey = (i64, String, Option<i64>, i64, Option<i64>, String);

/// Loads `case` (scenarios of one shape and options, each with its conversation offset) into
/// `db`, runs expand, the existing watermarks, backfill (twice), audit; returns the mismatches
/// (empty: it passed).
async fn run_case(db: &TestDb, case: &[(&Scenario, i64)], batch_size: u64) -> Result<Vec<String>> {
    let (first, _) = case[0];
    let dsn = Dsn::parse(&db.url)?;
    let dialect = dsn.dialect;
    let mut conn = dsn.connect().await?;
    exec_all(&mut conn, &scenario::schema_sql()).await;
    for (s, offset) in case {
        exec_all(&mut conn, &scenario::data_sql(s, *offset)).await;
    }

    let mapping = Mapping::parse(&first.mapping_toml(), &format!("<{}>", first.id))?;
    expand::run(&mut conn, &mapping, dialect, false)
        .await
        .context("expand")?;
    for (s, offset) in case {
        exec_all(
            &mut conn,
            &scenario::existing_watermarks_sql(s, *offset, scenario::WATERMARK_TABLE),
        )
        .await;
    }

    // Which scenario a conversation belongs to, to name it in messages of a combined run.
    let owner = |conv: i64| -> String {
        if case.len() == 1 {
            return String::new();
        }
        case.iter()
            .rev()
            .find(|(_, offset)| conv >= *offset)
            .map(|(s, offset)| format!("{} (conv {}): ", s.id, conv - offset))
            .unwrap_or_default()
    };

    let mut problems = Vec::new();
    // The change count in the one-pass form, then (the second run) in the index-probe form.
    let options = backfill::BackfillOptions {
        batch_size,
        audit_form: audit::AuditForm::OnePass,
        ..Default::default()
    };
    let first_run = backfill::run(&mut conn, &mapping, dialect, &options)
        .await
        .context("backfill")?;
    // Batches hold whole conversations: with batches of 1, each scenario is one at least.
    if batch_size == 1 && first_run.batches < case.len() as u64 {
        problems.push(format!(
            "backfill ran {} batches of 1 for {} scenarios' conversations",
            first_run.batches,
            case.len()
        ));
    }
    let after_first = watermarks(&mut conn).await?;

    // (a) every expected watermark, with its provenance (other rows may exist).
    check_watermarks(case, &after_first, &owner, &mut problems);

    // A second backfill changes nothing (forward-only writes, seed 000 §3), and counts the
    // same changes in the other form of the audit statement (issue 30).
    let options = backfill::BackfillOptions {
        audit_form: audit::AuditForm::Probe,
        ..options
    };
    let second_run = backfill::run(&mut conn, &mapping, dialect, &options)
        .await
        .context("second backfill")?;
    if second_run.unread_changes != first_run.unread_changes {
        problems.push(format!(
            "change count: {} in the one-pass form, {} in the index-probe form",
            first_run.unread_changes, second_run.unread_changes
        ));
    }
    let after_second = watermarks(&mut conn).await?;
    for (key, (id, _)) in &after_first {
        match after_second.get(key) {
            Some((again, _)) if again == id => {}
            other => problems.push(format!(
                "{}second backfill moved watermark ({}, {}) from {id} to {:?}",
                owner(key.0),
                key.0,
                key.1,
                other.map(|(v, _)| v)
            )),
        }
    }

    // (b) the report rows are exactly the expected drifting rows, and (c) the summary
    // agrees, in every form of the audit statement (issue 30: the probe form where the
    // mapping has one, else the one pass).
    for form in AUDIT_FORMS {
        let before = problems.len();
        let found = (&after_second, &owner as &dyn Fn(i64) -> String);
        let db = (&mapping, dialect);
        check_audit(
            &mut conn,
            db,
            (case, batch_size),
            form,
            found,
            &mut problems,
        )
        .await?;
        for p in &mut problems[before..] {
            *p = format!("{form:?} form: {p}");
        }
    }
    let _ = conn.close().await;
    Ok(problems)
}

/// (b) and (c) of [`run_case`] in one form of the audit statement: the report rows of `case`'s
/// audit are exactly the expected drifting rows (`after_second`: the watermarks the report's
/// `last_read_id` are checked against) and its summary agrees.
async fn check_audit(
    conn: &mut AnyConnection,
    (mapping, dialect): (&Mapping, Dialect),
    (case, batch_size): (&[(&Scenario, i64)], u64),
    form: audit::AuditForm,
    (after_second, owner): (&Watermarks, &dyn Fn(i64) -> String),
    problems: &mut Vec<String>,
) -> Result<()> {
    let (first, _) = case[0];
    // (b) the report rows are exactly the expected drifting rows.
    let dir = tempfile::tempdir()?;
    let report = dir.path().join("drift.csv");
    let outcome = audit::run(
        conn,
        mapping,
        dialect,
        &audit::AuditOptions {
            cap: first.options.cap,
            report: report.clone(),
            batch_size,
            form,
            ..Default::default()
        },
    )
    .await
    .with_context(|| format!("audit ({form:?} form)"))?;

    let mut expected: BTreeSet<AuditKey> = BTreeSet::new();
    let mut want_classes: BTreeMap<&str, u64> = BTreeMap::new();
    for (s, offset) in case {
        for r in &s.expected.audit {
            let subject = match (&r.user, r.message_id) {
                (Some(u), _) => u.clone(),
                (None, Some(m)) => m.to_string(),
                (None, None) => String::new(),
            };
            expected.insert((
                r.conv + offset,
                subject,
                r.stored,
                r.recomputed,
                r.drift,
                r.class.clone(),
            ));
            *want_classes.entry(r.class.as_str()).or_default() += 1;
        }
    }
    let actual = read_report(&report, first.is_per_message(), after_second, problems)?;
    let actual_set: BTreeSet<AuditKey> = actual.iter().cloned().collect();
    if actual_set.len() != actual.len() {
        problems.push(format!("the report repeats a row: {actual:?}"));
    }
    for missing in expected.difference(&actual_set) {
        problems.push(format!(
            "{}report: missing expected row {}",
            owner(missing.0),
            show(missing)
        ));
    }
    for extra in actual_set.difference(&expected) {
        problems.push(format!(
            "{}report: unexpected row {}",
            owner(extra.0),
            show(extra)
        ));
    }

    // (c) the summary agrees.
    check_summary(
        &outcome.summary,
        case.len(),
        batch_size,
        expected.len(),
        &want_classes,
        problems,
    );
    Ok(())
}

/// (a) of [`run_case`]: every expected watermark of `case` is in `found`, with its provenance.
fn check_watermarks(
    case: &[(&Scenario, i64)],
    found: &Watermarks,
    owner: &dyn Fn(i64) -> String,
    problems: &mut Vec<String>,
) {
    for (s, offset) in case {
        for w in &s.expected.watermarks {
            let conv = w.conv + offset;
            match found.get(&(conv, w.user.clone())) {
                None => problems.push(format!(
                    "{}watermark ({conv}, {}): expected {} from {}, found no row",
                    owner(conv),
                    w.user,
                    w.last_read_id,
                    w.source
                )),
                Some((id, source))
                    if *id != w.last_read_id || source.as_deref() != Some(w.source.as_str()) =>
                {
                    problems.push(format!(
                        "{}watermark ({conv}, {}): expected {} from {}, found {id} from {}",
                        owner(conv),
                        w.user,
                        w.last_read_id,
                        w.source,
                        source.as_deref().unwrap_or("NULL")
                    ))
                }
                Some(_) => {}
            }
        }
    }
}

/// (c) of [`run_case`]: the audit's summary agrees with the `expected` drifting rows and
/// classes, and with batches of 1 ran one batch per scenario at least.
fn check_summary(
    summary: &audit::AuditSummary,
    scenarios: usize,
    batch_size: u64,
    expected: usize,
    want_classes: &BTreeMap<&str, u64>,
    problems: &mut Vec<String>,
) {
    if batch_size == 1 && summary.batches < scenarios as u64 {
        problems.push(format!(
            "audit ran {} batches of 1 for {} scenarios' conversations",
            summary.batches, scenarios
        ));
    }
    if summary.drifting_rows != expected as u64 {
        problems.push(format!(
            "summary: drifting_rows = {}, expected {}",
            summary.drifting_rows, expected
        ));
    }
    if summary.rows_checked < summary.drifting_rows {
        problems.push(format!(
            "summary: rows_checked = {} < drifting_rows = {}",
            summary.rows_checked, summary.drifting_rows
        ));
    }
    for class in CLASSES {
        let got = summary.by_class.get(class).copied().unwrap_or(0);
        let want = want_classes.get(class).copied().unwrap_or(0);
        if got != want {
            problems.push(format!(
                "summary: by_class[{class}] = {got}, expected {want}"
            ));
        }
    }
}

/// Every watermark row: (conversation, user) -> (last_read_id, source).
type Watermarks = BTreeMap<(i64, String), (i64, Option<String>)>;

/// The watermark table as [`Watermarks`].
async fn watermarks(
    conn: &mut AnyConnection,
) -> Result<BTreeMap<(i64, String), (i64, Option<String>)>> {
    let sql = format!(
        "SELECT conversation_id, user_id, last_read_id, source FROM {}",
        scenario::WATERMARK_TABLE
    );
    let rows = sqlx::query(&sql)
        .fetch_all(&mut *conn)
        .await
        .context("reading the watermarks")?;
    let mut out = BTreeMap::new();
    for row in rows {
        let conv: i64 = row.try_get(0)?;
        let user: String = row.try_get(1)?;
        let id: i64 = row.try_get(2)?;
        let source: Option<String> = row.try_get(3)?;
        out.insert((conv, user), (id, source));
    }
    Ok(out)
}

/// Parses the CSV report: checks its header and, for per_member, that each row's
/// `last_read_id`/`watermark_source` are the member's watermark (an empty cell: no watermark
/// row, or 0). Returns the rows as [`AuditKey`]s.
fn read_report(
    path: &Path,
    per_message: bool,
    wms: &BTreeMap<(i64, String), (i64, Option<String>)>,
    problems: &mut Vec<String>,
) -> Result<Vec<AuditKey>> {
    let file = csv::try_read(path).context("reading the report")?;
    let header = file.columns.join(",");
    let want_header = if per_message {
        PER_MESSAGE_HEADER
    } else {
        PER_MEMBER_HEADER
    };
    if header != want_header {
        bail!("report header is {header:?}, expected {want_header:?}");
    }
    let int = |cell: &str, what: &str| -> Result<Option<i64>> {
        if cell.is_empty() {
            Ok(None)
        } else {
            Ok(Some(cell.parse::<i64>().with_context(|| {
                format!("report: {what} = {cell:?} is not an integer")
            })?))
        }
    };
    let mut rows = Vec::new();
    for record in &file.rows {
        let conv = int(&record[0], "conversation_id")?.context("report: empty conversation_id")?;
        let subject = record[1].to_string();
        let stored = int(&record[2], "stored_unread")?;
        let recomputed =
            int(&record[3], "recomputed_unread")?.context("report: empty recomputed_unread")?;
        let drift = int(&record[4], "drift")?;
        let class = record[5].to_string();
        if !per_message {
            let last_read = int(&record[6], "last_read_id")?;
            let source = &record[7];
            let wm = wms.get(&(conv, subject.clone()));
            let consistent = match (wm, last_read) {
                (Some((id, src)), Some(lr)) => {
                    *id == lr && (source.is_empty() || src.as_deref() == Some(source))
                }
                (Some((0, _)), None) => true,
                (Some(_), None) => false,
                (None, lr) => lr.unwrap_or(0) == 0 && source.is_empty(),
            };
            if !consistent {
                problems.push(format!(
                    "report row ({conv}, {subject}): last_read_id {:?} / watermark_source {source:?} do not match the watermark {wm:?}",
                    last_read
                ));
            }
        }
        rows.push((conv, subject, stored, recomputed, drift, class));
    }
    Ok(rows)
}

fn show(row: &AuditKey) -> String {
    let opt = |v: Option<i64>| v.map_or_else(|| "NULL".to_string(), |v| v.to_string());
    format!(
        "(conv {}, {}, stored {}, recomputed {}, drift {}, {})",
        row.0,
        row.1,
        opt(row.2),
        row.3,
        opt(row.4),
        row.5
    )
}
