//! Stage 3, audit: recompute unread from the watermarks, compare it with the stored counters,
//! classify every drifting row (semantics.md, "Drift classes") and write the CSV drift report.
//!
//! Batches of whole conversations, each one set-based statement in a consistent snapshot that
//! returns only the drifting rows; rows stream into the report, so memory does not grow with the
//! table. The summary goes into the ledger with the report's SHA-256.

use anyhow::{Context, Result};
use serde::Serialize;
use sqlx::{AnyConnection, Row};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use super::{begin_snapshot, commit, next_batch, rollback, BatchUnit, Key};
use crate::dialect::{render, Dialect, SqlContext};
use crate::drift::{classify, Facts, Membership};
use crate::error::input_error;
use crate::ledger;
use crate::mapping::{Mapping, Shape};
use crate::progress::Progress;
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
    /// No progress output.
    pub quiet: bool,
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
            quiet: true,
        }
    }
}

/// An example row of a class, for the human summary.
#[derive(Debug, Clone, Serialize)]
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
#[derive(Debug, Clone, Default, Serialize)]
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
}

/// The outcome of [`run`].
#[derive(Debug, Clone)]
pub struct AuditOutcome {
    /// The summary.
    pub summary: AuditSummary,
}

/// Runs the audit and writes the report.
///
/// Errors: exit 2 when the mapping does not match the database or the watermark table is
/// missing (run `expand`); exit 3 on database or I/O failure (no report appears under the final
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
    let options = serde_json::json!({
        "cap": opts.cap, "report": opts.report.display().to_string(), "batch_size": opts.batch_size,
        "max_drift_rows": opts.max_drift_rows, "max_drift_ratio": opts.max_drift_ratio,
        "max_abs_drift": opts.max_abs_drift,
    });
    let ledger_id = if opts.ledger {
        if !schema::table_exists(conn, dialect, ledger::LEDGER_TABLE).await? {
            return Err(input_error(
                "the ledger table tidemark_ledger does not exist: run `tidemark expand`, or audit with --no-ledger",
            ));
        }
        Some(ledger::start(conn, dialect, "audit", &mapping.fingerprint, &options).await?)
    } else {
        None
    };
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
        ledger_id,
        ..Default::default()
    };
    let result = audit_batches(conn, &ctx, shape, opts, user_kind, conv_kind, &mut summary).await;
    summary.duration_ms = started.elapsed().as_millis() as u64;
    match result {
        Ok(sha) => {
            summary.report_sha256 = sha;
            summary.crossed = crossed(&summary, opts);
            summary.passed = summary.crossed.is_empty();
            if let Some(id) = ledger_id {
                ledger::finish(
                    conn,
                    dialect,
                    id,
                    "done",
                    &serde_json::to_value(&summary)?,
                    Some(summary.passed),
                    Some(&summary.report),
                    Some(&summary.report_sha256),
                )
                .await?;
            }
            Ok(AuditOutcome { summary })
        }
        Err(e) => {
            if let Some(id) = ledger_id {
                let _ = ledger::finish(
                    conn,
                    dialect,
                    id,
                    "failed",
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

/// The tolerance limits the summary crosses, each as a sentence.
fn crossed(s: &AuditSummary, opts: &AuditOptions) -> Vec<String> {
    let mut out = Vec::new();
    if s.drifting_rows > opts.max_drift_rows {
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
    if ratio > opts.max_drift_ratio {
        out.push(format!(
            "drift ratio {ratio:.6} > --max-drift-ratio {}",
            opts.max_drift_ratio
        ));
    }
    if s.max_abs_drift > opts.max_abs_drift {
        out.push(format!(
            "largest |drift| {} > --max-abs-drift {}",
            s.max_abs_drift, opts.max_abs_drift
        ));
    }
    out
}

async fn audit_batches(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    shape: Shape,
    opts: &AuditOptions,
    user_kind: KeyKind,
    conv_kind: KeyKind,
    summary: &mut AuditSummary,
) -> Result<String> {
    let mut report = ReportWriter::create(&opts.report, shape)?;
    let unit = match shape {
        Shape::PerMember => BatchUnit::Counters,
        Shape::PerMessage => BatchUnit::Messages,
    };
    let template = match shape {
        Shape::PerMember => "audit_per_member.sql",
        Shape::PerMessage => "audit_per_message.sql",
    };
    let total = {
        let sql = render(
            "audit_count.sql",
            ctx,
            minijinja::context! { range => crate::dialect::RangeParams::default() },
        )?;
        let n: i64 = sqlx::query_scalar(&sql).fetch_one(&mut *conn).await?;
        n.max(0) as u64
    };
    let mut progress = Progress::new("audit", "rows", total, opts.quiet);
    let mut lo: Option<Key> = None;
    let result: Result<()> = async {
        while let Some(batch) =
            next_batch(conn, ctx, unit, conv_kind, lo.clone(), opts.batch_size).await?
        {
            let range = batch.params(ctx.dialect, 1);
            let count_sql = render(
                "audit_count.sql",
                ctx,
                minijinja::context! { range => range },
            )?;
            let sql = render(
                template,
                ctx,
                minijinja::context! { range => range, cap => opts.cap },
            )?;
            begin_snapshot(conn, ctx.dialect).await?;
            let read: Result<_> = async {
                let checked: i64 = batch
                    .bind(sqlx::query(&count_sql))
                    .fetch_one(&mut *conn)
                    .await?
                    .try_get(0)?;
                let rows = batch
                    .bind(sqlx::query(&sql))
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
            for row in &rows {
                record_row(
                    row,
                    shape,
                    opts.cap,
                    user_kind,
                    conv_kind,
                    summary,
                    &mut report,
                )?;
            }
            summary.batches += 1;
            progress.advance(checked.max(0) as u64);
            lo = Some(batch.hi);
        }
        Ok(())
    }
    .await;
    progress.finish();
    match result {
        Ok(()) => report.finish(),
        Err(e) => {
            report.abandon();
            Err(e)
        }
    }
}

fn record_row(
    row: &sqlx::any::AnyRow,
    shape: Shape,
    cap: Option<i64>,
    user_kind: KeyKind,
    conv_kind: KeyKind,
    summary: &mut AuditSummary,
    report: &mut ReportWriter,
) -> Result<()> {
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
        return Ok(());
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
    report.row(&cells)
}
