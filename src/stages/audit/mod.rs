//! Stage 3, audit: recompute unread from the watermarks, compare it with the stored counters,
//! classify every drifting row (semantics.md, "Drift classes") and write the CSV drift report.
//!
//! Batches of whole conversations, each one set-based statement in a consistent snapshot that
//! returns only the drifting rows; rows stream into the report, so memory does not grow with the
//! table. The summary goes into the ledger with the report's SHA-256.
//!
//! Split by job: this file holds the options, the summary and [`run`] (checks, ledger,
//! resume); [`batches`] the batch loop and the statements it runs; [`rows`] the decoding and
//! classification of one drifting row; [`summary`] the tolerances, the empty-scope error and
//! the metrics file; [`min_age`] the `--min-age` filter.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use sqlx::AnyConnection;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{Key, Scope};
use crate::dialect::{Dialect, SqlContext};
use crate::error::input_error;
use crate::ledger::{
    self,
    records::{AuditOptionsRecord, Checked},
    RunStatus, Stage,
};
use crate::mapping::{Mapping, Shape};
use crate::progress::Reporter;
use crate::schema;

mod batches;
mod min_age;
mod rows;
mod summary;

pub use batches::statements;
pub(crate) use batches::{batch_statement, bind_batch};
pub use summary::write_metrics;

use batches::{audit_batches, BatchRun};
pub(crate) use min_age::quiescence;
use summary::{crossed, empty_scope};

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
    /// Set by the command line on Ctrl-C or SIGTERM: stop after the current batch, as
    /// `--run-time` does (the rows so far kept in `REPORT.partial`, the run recorded as
    /// incomplete, exit 4; `--resume` continues it).
    pub stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
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
            stop: None,
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
    /// What stopped an incomplete run: `"signal"` (Ctrl-C or SIGTERM) or `"run_time"`
    /// (`--run-time` reached); None for a complete run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<String>,
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
    for setting in dialect.sessions().audit_session() {
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
        if !schema::table_exists(conn, dialect, crate::tables::LEDGER_TABLE).await? {
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
        let (filter, left_out) = quiescence(conn, mapping, dialect, &opts.scope, age).await?;
        opts.scope.min_age = Some(filter);
        summary.left_out_recent = left_out;
        if !summary.scope.iter().any(|s| s.starts_with("min-age")) {
            summary
                .scope
                .push(format!("min-age {}", humantime::format_duration(age)));
        }
    }
    let opts = &opts;
    let batch_run = BatchRun {
        ctx: &ctx,
        shape,
        opts,
        user_kind,
        conv_kind,
    };
    let result = audit_batches(conn, &batch_run, lo, &mut summary).await;
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
