//! Stage 3, audit: recompute unread from the watermarks, compare it with the stored counters,
//! classify every drifting row (semantics.md, "Drift classes") and write the CSV drift report.
//!
//! Batches of whole conversations, each one set-based statement in a consistent snapshot that
//! returns only the drifting rows; rows stream into the report, so memory does not grow with the
//! table. The summary goes into the ledger with the report's SHA-256.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use sqlx::{AnyConnection, Row};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{begin_snapshot, commit, next_batch, rollback, BatchUnit, Key, Scope};
use crate::dialect::{render, Dialect, SqlContext};
use crate::drift::{classify, Facts, Membership};
use crate::error::input_error;
use crate::ledger::{
    self,
    records::{AuditOptionsRecord, Checked},
    RunStatus, Stage,
};
use crate::mapping::{Mapping, Shape};
use crate::progress::Reporter;
use crate::report::{cell, ReportWriter};
use crate::schema::{self, KeyKind};

/// Options of an audit run.
#[derive(Debug, Clone)]
pub struct AuditOptions {
    /// `--cap N`: compare as "N+" (counting stops at N+1).
    pub cap: Option<i64>,
    /// Where the CSV report goes.
    pub report: PathBuf,
    /// Rows per batch (counter rows, or messages for per_message), whole conversations.
    pub batch_size: u64,
    /// Record the run in the ledger (false: `--no-ledger`, writes nothing to the database).
    pub ledger: bool,
    /// Tolerance: drifting rows allowed (default 0).
    pub max_drift_rows: u64,
    /// Tolerance: drifting rows / rows checked allowed (default 0).
    pub max_drift_ratio: f64,
    /// Tolerance: largest |drift| allowed (default 0; NULL counters count as drifting rows).
    pub max_abs_drift: i64,
    /// Which of the three limits above are checked (interface.md: all when no tolerance
    /// option is given; once any is given, only those given).
    pub checked: Checked,
    /// Accept an audit whose scope checks no row (`--allow-empty`); without it such an audit
    /// is an error (exit 2), so a mistyped range in a cron job does not stay green.
    pub allow_empty: bool,
    /// No progress output.
    pub quiet: bool,
    /// Where progress goes (default: nowhere; the command line shows a bar).
    pub progress: Reporter,
    /// Stop after the batch that crosses this much time; the run is recorded as incomplete
    /// (exit 4) and `resume` continues it.
    pub run_time: Option<Duration>,
    /// Continue the newest incomplete audit of this mapping with the same options.
    pub resume: bool,
    /// Write a Prometheus text-format file (node_exporter's textfile collector) at the end.
    pub metrics_file: Option<PathBuf>,
    /// Also write every drifting row into `tidemark_drift_rows` with the run id.
    pub store_rows: bool,
    /// `--conversations FROM..TO` and `--sample`.
    pub scope: Scope,
    /// How the scope was given, for the summary and the ledger (e.g. "conversations 1..500").
    pub scope_description: Vec<String>,
    /// The longest lock wait of one statement.
    pub lock_timeout: Duration,
    /// Leave out conversations whose newest message is younger than this (writes still in
    /// flight in the application are not drift). Needs `messages.created_at`.
    pub min_age: Option<Duration>,
}

impl Default for AuditOptions {
    fn default() -> Self {
        AuditOptions {
            cap: None,
            report: PathBuf::from("tidemark-drift.csv"),
            batch_size: 5000,
            ledger: true,
            max_drift_rows: 0,
            max_drift_ratio: 0.0,
            max_abs_drift: 0,
            checked: Checked::default(),
            allow_empty: false,
            quiet: true,
            progress: Reporter::default(),
            run_time: None,
            resume: false,
            metrics_file: None,
            store_rows: false,
            scope: Scope::default(),
            scope_description: Vec::new(),
            lock_timeout: Duration::from_secs(2),
            min_age: None,
        }
    }
}

/// An example row of a class, for the human summary.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Example {
    /// Conversation key.
    pub conversation: String,
    /// User key (per_member) or message position (per_message).
    pub subject: String,
    /// Stored value (clamped under a cap).
    pub stored: Option<i64>,
    /// Recomputed value (clamped under a cap).
    pub recomputed: i64,
}

/// The audit's result (what the ledger, `--format json` and the exit code rest on).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct AuditSummary {
    /// Shape audited.
    pub shape: String,
    /// Rows compared (counter rows, or messages).
    pub rows_checked: u64,
    /// Rows whose stored value differs from the recomputed one (NULL counters included).
    pub drifting_rows: u64,
    /// Sum of |drift| (rows checked in full; NULL counters add nothing).
    pub sum_abs_drift: i64,
    /// Largest |drift|.
    pub max_abs_drift: i64,
    /// Drifting rows per class, every class listed.
    pub by_class: BTreeMap<String, u64>,
    /// Up to 3 example rows per class.
    pub examples: BTreeMap<String, Vec<Example>>,
    /// `--cap`, if given.
    pub cap: Option<i64>,
    /// Tolerance limits crossed (empty when the audit passed).
    pub crossed: Vec<String>,
    /// Whether drift is within tolerance.
    pub passed: bool,
    /// The report's path.
    pub report: String,
    /// The report's SHA-256 (hex).
    pub report_sha256: String,
    /// Batches run.
    pub batches: u64,
    /// Wall time, milliseconds.
    pub duration_ms: u64,
    /// The ledger run id (None with `--no-ledger`).
    pub ledger_id: Option<i64>,
    /// Whether every row in scope was covered (false: stopped at `--run-time`).
    pub complete: bool,
    /// Parts the run took (1, plus one per `--resume`).
    pub parts: u64,
    /// The scope, when not the whole table (`--conversations`, `--sample`).
    pub scope: Vec<String>,
    /// Conversations left out by `--min-age` (their newest message was too young).
    pub left_out_recent: u64,
    /// The last conversation covered (the checkpoint), for an incomplete run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<Key>,
}

/// The outcome of [`run`].
#[derive(Debug, Clone)]
pub struct AuditOutcome {
    /// The summary (of every part of a resumed run).
    pub summary: AuditSummary,
}

impl AuditOutcome {
    /// The exit code: 1 when drift is above tolerance, else 4 when the run stopped at
    /// `--run-time` before covering every row, else 0.
    pub fn exit_code(&self) -> u8 {
        if !self.summary.passed {
            crate::error::EXIT_DRIFT
        } else if !self.summary.complete {
            crate::error::EXIT_INCOMPLETE
        } else {
            crate::error::EXIT_OK
        }
    }
}

/// The part report of an incomplete run, beside the final one.
fn partial_path(report: &Path) -> PathBuf {
    let mut name = report.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    report.with_file_name(name)
}

/// Runs the audit and writes the report.
///
/// Errors: exit 2 when the mapping does not match the database, the watermark table is
/// missing (run `expand`), or `--resume` finds no incomplete run with the same options; exit 3 on database or I/O failure (no report appears under the final
/// name, and the ledger records the run as failed).
pub async fn run(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
    opts: &AuditOptions,
) -> Result<AuditOutcome> {
    let started = Instant::now();
    if let Some(cap) = opts.cap {
        if cap < 0 {
            return Err(input_error(format!(
                "--cap {cap}: the cap is a count, 0 or more"
            )));
        }
    }
    crate::report::check_destination(&opts.report)?;
    if let Some(m) = &opts.metrics_file {
        crate::report::check_destination(m)?;
    }
    crate::lock::set_lock_timeout(conn, dialect, opts.lock_timeout).await?;
    for setting in dialect.audit_session() {
        sqlx::query(setting).execute(&mut *conn).await?;
    }
    schema::preflight(conn, mapping, dialect).await?;
    if !schema::table_exists(conn, dialect, &mapping.watermarks.table).await? {
        return Err(input_error(format!(
            "watermark table {:?} does not exist: run `tidemark expand` and `tidemark backfill` first",
            mapping.watermarks.table
        )));
    }
    let ctx = SqlContext::new(mapping, dialect);
    let (user_kind, conv_kind) = {
        let (u, c) = schema::watermark_key_types(conn, mapping, &ctx).await?;
        (u.kind, c.kind)
    };
    let shape = mapping.counter.shape;
    let options = serde_json::to_value(AuditOptionsRecord {
        cap: opts.cap,
        report: opts.report.display().to_string(),
        batch_size: opts.batch_size,
        max_drift_rows: opts.checked.rows.then_some(opts.max_drift_rows),
        max_drift_ratio: opts.checked.ratio.then_some(opts.max_drift_ratio),
        max_abs_drift: opts.checked.abs.then_some(opts.max_abs_drift),
        scope: opts.scope_description.clone(),
        min_age_s: opts.min_age.map(|a| a.as_secs()),
        store_rows: opts.store_rows,
    })?;
    if opts.store_rows && !opts.ledger {
        return Err(input_error(
            "--store-rows writes into the ledger: it cannot go with --no-ledger",
        ));
    }
    if opts.resume && !opts.ledger {
        return Err(input_error(
            "--resume continues a run recorded in the ledger: it cannot go with --no-ledger",
        ));
    }
    let mut summary = AuditSummary {
        shape: match shape {
            Shape::PerMember => "per_member".into(),
            Shape::PerMessage => "per_message".into(),
        },
        by_class: crate::drift::DriftClass::ALL
            .iter()
            .map(|c| (c.as_str().to_string(), 0))
            .collect(),
        cap: opts.cap,
        report: opts.report.display().to_string(),
        scope: opts.scope_description.clone(),
        parts: 1,
        ..Default::default()
    };
    let mut lo: Option<Key> = None;
    let ledger_id = if opts.ledger {
        if !schema::table_exists(conn, dialect, ledger::LEDGER_TABLE).await? {
            return Err(input_error(
                "the ledger table tidemark_ledger does not exist: run `tidemark expand`, or audit with --no-ledger",
            ));
        }
        crate::db::privileges::for_audit(conn, dialect, opts.store_rows).await?;
        if opts.resume {
            let (id, previous) =
                find_incomplete(conn, dialect, &mapping.fingerprint, &options).await?;
            lo = previous.checkpoint.clone();
            summary = previous;
            summary.parts += 1;
            ledger::set_status(conn, dialect, id, RunStatus::Running).await?;
            Some(id)
        } else {
            Some(ledger::start(conn, dialect, Stage::Audit, &mapping.fingerprint, &options).await?)
        }
    } else {
        None
    };
    summary.ledger_id = ledger_id;
    let previous_ms = summary.duration_ms;
    let mut opts = opts.clone();
    if let Some(age) = opts.min_age {
        let (quiet, left_out) = quiescence(conn, mapping, dialect, &opts.scope, age).await?;
        opts.scope.quiet_sql = Some(quiet);
        summary.left_out_recent = left_out;
        if !summary.scope.iter().any(|s| s.starts_with("min-age")) {
            summary
                .scope
                .push(format!("min-age {}", humantime::format_duration(age)));
        }
    }
    let opts = &opts;
    let result = audit_batches(
        conn,
        &ctx,
        shape,
        opts,
        user_kind,
        conv_kind,
        lo,
        &mut summary,
    )
    .await;
    summary.duration_ms = previous_ms + started.elapsed().as_millis() as u64;
    // An audit that checked no row proves nothing (interface.md): exit 2 unless --allow-empty.
    let result = result.and_then(|sha| {
        if summary.complete && summary.rows_checked == 0 && !opts.allow_empty {
            Err(empty_scope(mapping, &summary.scope))
        } else {
            Ok(sha)
        }
    });
    match result {
        Ok(sha) => {
            summary.report_sha256 = sha.unwrap_or_default();
            summary.crossed = crossed(&summary, opts);
            summary.passed = summary.crossed.is_empty();
            if let Some(id) = ledger_id {
                // A scoped audit (--conversations, --sample, --min-age) checks part of the
                // table: it is recorded as "scoped", which the contract gate never counts.
                let status = match (summary.complete, summary.scope.is_empty()) {
                    (false, _) => RunStatus::Incomplete,
                    (true, true) => RunStatus::Done,
                    (true, false) => RunStatus::Scoped,
                };
                let (path, sha) = if summary.complete {
                    (
                        Some(summary.report.as_str()),
                        Some(summary.report_sha256.as_str()),
                    )
                } else {
                    (None, None)
                };
                // An incomplete run has not passed yet: the gate must not count it.
                let passed = summary.complete.then_some(summary.passed);
                ledger::finish(
                    conn,
                    dialect,
                    id,
                    status,
                    &serde_json::to_value(&summary)?,
                    passed,
                    path,
                    sha,
                )
                .await?;
            }
            if let Some(path) = &opts.metrics_file {
                write_metrics(path, &summary, &mapping.fingerprint)?;
            }
            Ok(AuditOutcome { summary })
        }
        Err(e) => {
            if let Some(id) = ledger_id {
                let _ = ledger::finish(
                    conn,
                    dialect,
                    id,
                    RunStatus::Failed,
                    &serde_json::json!({ "error": e.to_string() }),
                    None,
                    None,
                    None,
                )
                .await;
            }
            Err(e)
        }
    }
}

/// The `--min-age` filter: a predicate over the conversation column `{col}` that keeps only
/// conversations with no message newer than now - `age`, and how many it leaves out now. An
/// integer `created_at` is read as Unix seconds, or milliseconds when its newest value is
/// above 10^11 (after 1973 in ms, beyond 5138 in s).
///
/// Errors (exit 2): the mapping has no `messages.created_at`.
pub(crate) async fn quiescence(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
    scope: &Scope,
    age: Duration,
) -> Result<(String, u64)> {
    let Some(created) = mapping.messages.created_at.as_deref() else {
        return Err(input_error(
            "--min-age needs messages.created_at in the mapping: the time of each message",
        ));
    };
    let ctx = SqlContext::new(mapping, dialect);
    let q = |s: &str| dialect.quote(s);
    let (table, conv, created_q) = (
        q(&mapping.messages.table),
        q(&mapping.messages.conversation),
        q(created),
    );
    let declared = schema::column_type(conn, &ctx, &mapping.messages.table, created)
        .await?
        .unwrap_or_default()
        .to_ascii_lowercase();
    let secs = age.as_secs();
    let cutoff = if declared.contains("int") {
        let newest: Option<i64> = sqlx::query(&format!(
            "SELECT CAST(MAX({created_q}) AS {}) FROM {table}",
            dialect.int_cast()
        ))
        .fetch_one(&mut *conn)
        .await?
        .try_get(0)?;
        let now_s = super::now_ms() / 1000;
        if newest.unwrap_or(0) > 100_000_000_000 {
            ((now_s - secs as i64) * 1000).to_string()
        } else {
            (now_s - secs as i64).to_string()
        }
    } else {
        dialect.seconds_ago(secs)
    };
    let quiet = format!(
        "NOT EXISTS (SELECT 1 FROM {table} tm_recent WHERE tm_recent.{conv} = {{col}} AND tm_recent.{created_q} > {cutoff})"
    );
    let mut in_scope = String::new();
    if let Some(sample) = &scope.sample_sql {
        in_scope = format!(" AND {}", sample.replace("{col}", &conv));
    }
    let mut binds = Vec::new();
    if let Some(from) = &scope.from {
        in_scope.push_str(&format!(
            " AND {conv} >= {}",
            dialect.placeholder(binds.len() + 1)
        ));
        binds.push(from.clone());
    }
    if let Some(to) = &scope.to {
        in_scope.push_str(&format!(
            " AND {conv} <= {}",
            dialect.placeholder(binds.len() + 1)
        ));
        binds.push(to.clone());
    }
    let sql = format!(
        "SELECT COUNT(DISTINCT {conv}) FROM {table} WHERE {created_q} > {cutoff}{in_scope}"
    );
    let mut query = sqlx::query(&sql);
    for k in &binds {
        query = k.bind(query);
    }
    let left_out: i64 = query.fetch_one(&mut *conn).await?.try_get(0)?;
    Ok((quiet, left_out.max(0) as u64))
}

/// The newest audit of this mapping, which must be incomplete and have the same options.
///
/// Errors (exit 2): no incomplete audit, or one with other options (the message names them).
async fn find_incomplete(
    conn: &mut AnyConnection,
    dialect: Dialect,
    fingerprint: &str,
    options: &serde_json::Value,
) -> Result<(i64, AuditSummary)> {
    let last = ledger::recent(conn, Stage::Audit, 1, dialect)
        .await?
        .into_iter()
        .next();
    let Some(last) = last.filter(|l| l.status == RunStatus::Incomplete) else {
        return Err(input_error(
            "--resume: the newest audit is not an incomplete one: run the audit without --resume",
        ));
    };
    if last.fingerprint != fingerprint {
        return Err(input_error(format!(
            "--resume: audit run #{} was made under another mapping: run the audit without --resume",
            last.id
        )));
    }
    let stored: serde_json::Value = last
        .options
        .as_deref()
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_default();
    if &stored != options {
        let differ: Vec<String> = options
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, v)| stored.get(k.as_str()) != Some(v))
            .map(|(k, v)| {
                format!(
                    "{k}: {} then, {v} now",
                    stored.get(k.as_str()).unwrap_or(&serde_json::Value::Null)
                )
            })
            .collect();
        return Err(input_error(format!(
            "--resume: audit run #{} ran with other options ({}); resume with the same options, or run without --resume",
            last.id,
            differ.join("; ")
        )));
    }
    let summary: AuditSummary = last
        .summary
        .as_deref()
        .map(serde_json::from_str)
        .transpose()
        .context("reading the incomplete audit's summary")?
        .unwrap_or_default();
    Ok((last.id, summary))
}

/// Writes the summary as Prometheus text format (atomically: a temporary file renamed into
/// place, as node_exporter's textfile collector asks).
pub fn write_metrics(path: &Path, s: &AuditSummary, fingerprint: &str) -> Result<()> {
    use std::fmt::Write as _;
    let labels = format!(
        "mapping=\"{}\",shape=\"{}\"",
        &fingerprint[..12.min(fingerprint.len())],
        s.shape
    );
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, extra: &str, value: String| {
        if !out.contains(&format!("# TYPE {name} ")) {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        }
        let _ = writeln!(out, "{name}{{{labels}{extra}}} {value}");
    };
    gauge(
        "tidemark_audit_rows_checked",
        "Rows compared by the last audit.",
        "",
        s.rows_checked.to_string(),
    );
    gauge(
        "tidemark_audit_drifting_rows_total",
        "Drifting rows found by the last audit.",
        "",
        s.drifting_rows.to_string(),
    );
    for (class, n) in &s.by_class {
        gauge(
            "tidemark_audit_drifting_rows",
            "Drifting rows per drift class.",
            &format!(",class=\"{class}\""),
            n.to_string(),
        );
    }
    gauge(
        "tidemark_audit_abs_drift_sum",
        "Sum of |stored - recomputed| over drifting rows.",
        "",
        s.sum_abs_drift.to_string(),
    );
    gauge(
        "tidemark_audit_abs_drift_max",
        "Largest |stored - recomputed|.",
        "",
        s.max_abs_drift.to_string(),
    );
    gauge(
        "tidemark_audit_duration_seconds",
        "Wall time of the audit (all parts).",
        "",
        format!("{:.3}", s.duration_ms as f64 / 1000.0),
    );
    gauge(
        "tidemark_audit_passed",
        "1 when drift was within tolerance.",
        "",
        u8::from(s.passed).to_string(),
    );
    gauge(
        "tidemark_audit_complete",
        "1 when every row in scope was covered.",
        "",
        u8::from(s.complete).to_string(),
    );
    gauge(
        "tidemark_audit_timestamp_seconds",
        "When the audit finished (Unix time).",
        "",
        format!("{:.3}", super::now_ms() as f64 / 1000.0),
    );
    crate::report::check_destination(path)?;
    let tmp = path.with_extension(format!("prom.{}.tmp", std::process::id()));
    std::fs::write(&tmp, out)
        .with_context(|| format!("writing the metrics file {}", tmp.display()))?;
    std::fs::rename(&tmp, path)
        .with_context(|| format!("moving the metrics file into place at {}", path.display()))?;
    Ok(())
}

/// The error of an audit whose scope checked no row: it names the scope.
fn empty_scope(mapping: &Mapping, scope: &[String]) -> anyhow::Error {
    let what = if scope.is_empty() {
        format!("the whole table {}", mapping.counter_table())
    } else {
        scope.join(", ")
    };
    input_error(format!(
        "the audit checked no row (scope: {what}): an empty scope proves nothing (a mistyped range?); --allow-empty accepts it"
    ))
}

/// The tolerance limits the summary crosses, each as a sentence (only the limits checked).
fn crossed(s: &AuditSummary, opts: &AuditOptions) -> Vec<String> {
    let mut out = Vec::new();
    if opts.checked.rows && s.drifting_rows > opts.max_drift_rows {
        out.push(format!(
            "drifting rows {} > --max-drift-rows {}",
            s.drifting_rows, opts.max_drift_rows
        ));
    }
    let ratio = if s.rows_checked == 0 {
        0.0
    } else {
        s.drifting_rows as f64 / s.rows_checked as f64
    };
    if opts.checked.ratio && ratio > opts.max_drift_ratio {
        out.push(format!(
            "drift ratio {ratio:.6} > --max-drift-ratio {}",
            opts.max_drift_ratio
        ));
    }
    if opts.checked.abs && s.max_abs_drift > opts.max_abs_drift {
        out.push(format!(
            "largest |drift| {} > --max-abs-drift {}",
            s.max_abs_drift, opts.max_abs_drift
        ));
    }
    out
}

#[allow(clippy::too_many_arguments)]
async fn audit_batches(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    shape: Shape,
    opts: &AuditOptions,
    user_kind: KeyKind,
    conv_kind: KeyKind,
    mut lo: Option<Key>,
    summary: &mut AuditSummary,
) -> Result<Option<String>> {
    let started = Instant::now();
    let partial = partial_path(&opts.report);
    let mut report = ReportWriter::create(&opts.report, shape)?;
    if lo.is_some() {
        // Rows of the earlier parts come first.
        if let Err(e) = report.append_rows_from(&partial) {
            report.abandon();
            return Err(e);
        }
    }
    let unit = match shape {
        Shape::PerMember => BatchUnit::Counters,
        Shape::PerMessage => BatchUnit::Messages,
    };
    let total = {
        let sql = render(
            "audit_count.sql",
            ctx,
            minijinja::context! { range => super::scope_params(ctx.dialect, &opts.scope) },
        )?;
        let n: i64 = super::bind_scope(&opts.scope, sqlx::query(&sql))
            .fetch_one(&mut *conn)
            .await?
            .try_get(0)?;
        n.max(0) as u64
    };
    let mut progress = opts.progress.start("audit", "rows", total, opts.quiet);
    progress.advance(summary.rows_checked);
    let mut stopped = false;
    let result: Result<()> = async {
        while let Some(batch) = next_batch(
            conn,
            ctx,
            unit,
            conv_kind,
            lo.clone(),
            opts.batch_size,
            &opts.scope,
        )
        .await?
        {
            let range = batch.params(ctx.dialect, 1);
            let count_sql = render(
                "audit_count.sql",
                ctx,
                minijinja::context! { range => range },
            )?;
            let sql = batch_statement(ctx, &batch, opts.cap, false)?;
            begin_snapshot(conn, ctx.dialect).await?;
            let read: Result<_> = async {
                let checked: i64 = batch
                    .bind(sqlx::query(&count_sql))
                    .fetch_one(&mut *conn)
                    .await?
                    .try_get(0)?;
                // Planned for this batch's range, not kept as a generic plan (see backfill.rs).
                let rows = bind_batch(&batch, shape, false, sqlx::query(&sql).persistent(false))
                    .fetch_all(&mut *conn)
                    .await
                    .context("running the audit statement")?;
                Ok((checked, rows))
            }
            .await;
            let (checked, rows) = match read {
                Ok(v) => {
                    commit(conn).await?;
                    v
                }
                Err(e) => {
                    rollback(conn).await;
                    return Err(e);
                }
            };
            summary.rows_checked += checked.max(0) as u64;
            let mut drifting = Vec::new();
            for row in &rows {
                if let Some(d) = record_row(
                    row,
                    shape,
                    opts.cap,
                    user_kind,
                    conv_kind,
                    summary,
                    &mut report,
                )? {
                    drifting.push(d);
                }
            }
            if opts.store_rows && !drifting.is_empty() {
                if let Some(id) = summary.ledger_id {
                    ledger::store_rows(conn, ctx.dialect, id, &drifting).await?;
                }
            }
            summary.batches += 1;
            progress.advance(checked.max(0) as u64);
            lo = Some(batch.hi);
            if opts
                .run_time
                .is_some_and(|limit| started.elapsed() >= limit)
            {
                // Out of time: incomplete only if a batch is left.
                stopped = next_batch(conn, ctx, unit, conv_kind, lo.clone(), 1, &opts.scope)
                    .await?
                    .is_some();
                break;
            }
        }
        Ok(())
    }
    .await;
    progress.finish();
    if let Err(e) = result {
        report.abandon();
        return Err(e);
    }
    if stopped {
        // Keep what this part covered for the next one; the final name stays untouched.
        summary.complete = false;
        summary.checkpoint = lo;
        report.finish_as(&partial)?;
        return Ok(None);
    }
    summary.complete = true;
    summary.checkpoint = None;
    let sha = report.finish()?;
    let _ = std::fs::remove_file(&partial);
    Ok(Some(sha))
}

fn record_row(
    row: &sqlx::any::AnyRow,
    shape: Shape,
    cap: Option<i64>,
    user_kind: KeyKind,
    conv_kind: KeyKind,
    summary: &mut AuditSummary,
    report: &mut ReportWriter,
) -> Result<Option<ledger::DriftRow>> {
    let conv = Key::read(row, 0, conv_kind)?;
    let (subject, stored, recomputed): (Key, Option<i64>, i64) = match shape {
        Shape::PerMember => (
            Key::read(row, 1, user_kind)?,
            row.try_get(2)?,
            row.try_get(3)?,
        ),
        Shape::PerMessage => (Key::Int(row.try_get(1)?), row.try_get(2)?, row.try_get(3)?),
    };
    let (facts, last_read, source) = match shape {
        Shape::PerMember => {
            let last_read: Option<i64> = row.try_get(4)?;
            let source = super::text(row, 5)?;
            let is_member: i64 = row.try_get(6)?;
            (
                Facts {
                    stored,
                    recomputed,
                    membership: Membership::PerMember {
                        is_member: is_member != 0,
                    },
                    own: row.try_get(7)?,
                    excluded: row.try_get(8)?,
                    total: row.try_get(9)?,
                },
                last_read,
                source,
            )
        }
        Shape::PerMessage => (
            Facts {
                stored,
                recomputed,
                membership: Membership::PerMessage {
                    orphans: row.try_get(4)?,
                },
                own: row.try_get(5)?,
                excluded: row.try_get(6)?,
                total: row.try_get(7)?,
            },
            None,
            None,
        ),
    };
    let Some(d) = classify(&facts, cap) else {
        return Ok(None);
    };
    summary.drifting_rows += 1;
    let abs = d.drift.map(i64::abs).unwrap_or(0);
    summary.sum_abs_drift += abs;
    summary.max_abs_drift = summary.max_abs_drift.max(abs);
    *summary
        .by_class
        .entry(d.class.as_str().to_string())
        .or_default() += 1;
    let examples = summary
        .examples
        .entry(d.class.as_str().to_string())
        .or_default();
    if examples.len() < 3 {
        examples.push(Example {
            conversation: conv.to_string(),
            subject: subject.to_string(),
            stored: d.stored,
            recomputed: d.recomputed,
        });
    }
    let mut cells = vec![
        conv.to_string(),
        subject.to_string(),
        cell(d.stored),
        d.recomputed.to_string(),
        cell(d.drift),
        d.class.as_str().to_string(),
    ];
    if shape == Shape::PerMember {
        cells.push(cell(last_read));
        cells.push(source.unwrap_or_default());
    }
    report.row(&cells)?;
    Ok(Some(ledger::DriftRow {
        conversation: conv.to_string(),
        subject: subject.to_string(),
        stored: d.stored,
        recomputed: d.recomputed,
        drift: d.drift,
        class: d.class.as_str(),
    }))
}

/// The statements one audit batch runs, rendered for this mapping and dialect with the batch's
/// range as placeholders (lo, hi): what `tidemark plan` prints.
pub fn statements(
    mapping: &Mapping,
    dialect: Dialect,
    cap: Option<i64>,
) -> Result<Vec<(&'static str, String)>> {
    let ctx = SqlContext::new(mapping, dialect);
    let range = crate::dialect::RangeParams {
        lo: Some(dialect.placeholder(1)),
        hi: Some(dialect.placeholder(2)),
        ..Default::default()
    };
    let copies = ranges(mapping.counter.shape, false, |n| {
        crate::dialect::RangeParams {
            lo: Some(dialect.placeholder(2 * n + 1)),
            hi: Some(dialect.placeholder(2 * n + 2)),
            ..Default::default()
        }
    });
    Ok(vec![
        (
            "rows checked, in a REPEATABLE READ snapshot",
            render(
                "audit_count.sql",
                &ctx,
                minijinja::context! { range => range },
            )?,
        ),
        (
            "the drifting rows with what classifies them, same snapshot",
            render(
                template(mapping.counter.shape),
                &ctx,
                minijinja::context! { cap => cap, count_only => false, ..copies },
            )?,
        ),
    ])
}

/// The audit template of a shape.
fn template(shape: Shape) -> &'static str {
    match shape {
        Shape::PerMember => "audit_per_member.sql",
        Shape::PerMessage => "audit_per_message.sql",
    }
}

/// How many times the audit statement of `shape` filters by the batch's range (the counter
/// rows, then the messages twice; or the messages, then the members): see the templates'
/// headers. The batch's keys are bound that many times in a row ([`bind_batch`]).
fn range_copies(shape: Shape, count_only: bool) -> usize {
    match (shape, count_only) {
        (Shape::PerMember, false) => 3,
        (Shape::PerMember, true) | (Shape::PerMessage, _) => 2,
    }
}

/// The template variables `range`, `range2`, `range3` (those the shape uses), copy `n`
/// (0-based) made by `params`.
fn ranges(
    shape: Shape,
    count_only: bool,
    params: impl Fn(usize) -> crate::dialect::RangeParams,
) -> minijinja::Value {
    let names = ["range", "range2", "range3"];
    minijinja::Value::from_iter(
        (0..range_copies(shape, count_only))
            .map(|n| (names[n], minijinja::Value::from_serialize(params(n))))
            .collect::<BTreeMap<_, _>>(),
    )
}

/// The one-pass audit statement of one batch (its drifting rows with their facts; with
/// `count_only`, only their number), capped at `cap`. Bind it with [`bind_batch`].
///
/// Errors: a template that fails to render (a bug, exit 3).
pub(crate) fn batch_statement(
    ctx: &SqlContext,
    batch: &super::Batch,
    cap: Option<i64>,
    count_only: bool,
) -> Result<String> {
    let n = batch.param_count();
    let copies = ranges(ctx.shape, count_only, |i| {
        batch.params(ctx.dialect, 1 + i * n)
    });
    render(
        template(ctx.shape),
        ctx,
        minijinja::context! { cap => cap, count_only => count_only, ..copies },
    )
}

/// Binds the batch's keys for [`batch_statement`]: once per range copy.
pub(crate) fn bind_batch<'q>(
    batch: &super::Batch,
    shape: Shape,
    count_only: bool,
    mut q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    for _ in 0..range_copies(shape, count_only) {
        q = batch.bind(q);
    }
    q
}
