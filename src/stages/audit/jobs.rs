//! `audit --jobs N` ([`crate::stages::parallel`]): N batches read at once, each in its own
//! snapshot on a worker connection, into a summary of its own and a report held in memory
//! (`batches.rs`, `Reader`); the run's own connection then takes them in key order: the
//! rows appended to the report, the batch's numbers added to the run's ([`add`]), its
//! drifting rows stored (`--store-rows`), the resume point moved past it. The report and the
//! summary are byte for byte those of `--jobs 1`: the rows in the same order, each number
//! summed, the examples and the top conversations kept in batch order.

use anyhow::Result;
use sqlx::AnyConnection;
use std::collections::BTreeMap;
use std::time::Instant;

use super::types::{AuditSummary, BatchRun, CounterSummary, Example, TOP_CONVERSATIONS};
use crate::ledger::{self, DriftRow};
use crate::progress::Progress;
use crate::report::ReportWriter;
use crate::stages::batch::{next_batch, Batch, BatchUnit, Key};
use crate::stages::keepalive::Session;
use crate::stages::parallel::{drive, Ended, InOrder, Throttles, Times, Work};

/// One batch read on a worker connection: its numbers (counted from [`empty_like`]), its
/// report rows (CSV bytes), the rows it checked and, with `--store-rows`, its drifting rows.
pub(super) struct Part {
    /// The batch's numbers, as the run's summary would add them.
    pub numbers: AuditSummary,
    /// Its report rows, formatted ([`ReportWriter::in_memory`]).
    pub rows: Vec<u8>,
    /// The rows it checked.
    pub checked: i64,
    /// Its drifting rows, kept under `--store-rows`.
    pub drifting: Vec<DriftRow>,
}

/// A summary with nothing counted, shaped as `s` (its counters, named, at zero): what a
/// batch of a parallel audit counts into.
pub(super) fn empty_like(s: &AuditSummary) -> AuditSummary {
    AuditSummary {
        shape: s.shape,
        counters: s
            .counters
            .iter()
            .map(|c| CounterSummary {
                name: c.name.clone(),
                value: c.value.clone(),
                mentions: c.mentions,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// Where the run stands, as `audit_batches` keeps it: the last batch written (`lo`), the
/// batch that failed (`hi`), and whether (and by what) it stopped before the end.
pub(super) type Place<'p> = (
    &'p mut Option<Key>,
    &'p mut Option<Key>,
    &'p mut bool,
    &'p mut Option<&'static str>,
);

/// What the recorded batches go into: the summary, the report, the progress, the session.
pub(super) type Sinks<'p, 's> = (
    &'p mut AuditSummary,
    &'p mut ReportWriter,
    &'p mut Progress,
    &'p mut Session<'s>,
);

/// Runs the batches of `unit` after `lo` on `run.opts.jobs` worker connections (`work`
/// reads one), recording each in key order; a stop or `--run-time` (counted from `started`)
/// ends it with `stopped` set when a batch is left, and `stopped_by` saying why.
///
/// Errors: the first failure in key order; `hi` then names its batch.
pub(super) async fn batches<W: Work<Out = Part>>(
    conn: &mut AnyConnection,
    (run, unit, started): (&BatchRun<'_>, BatchUnit, Instant),
    work: &W,
    (lo, hi, stopped, stopped_by): Place<'_>,
    (summary, report, progress, session): Sinks<'_, '_>,
) -> Result<()> {
    let opts = run.opts;
    let workers = opts.jobs.open(opts.lock_timeout).await?;
    let start = lo.clone();
    let mut orderer = Orderer {
        run,
        unit,
        lo,
        summary,
        report,
        progress,
    };
    let throttles = Throttles {
        pause_file: opts.pause_file.as_deref(),
        stop: opts.stop.as_deref(),
        deadline: opts.run_time.map(|limit| started + limit),
        rest: opts.pause_between_batches,
    };
    let pair = (&mut orderer, work);
    match drive(conn, workers, session, pair, start, &throttles).await {
        Ok(Ended::Covered) => Ok(()),
        Ok(Ended::Stopped(by)) => {
            // Incomplete only if a batch is left, as one job at a time decides.
            let (ctx, scope) = (run.ctx, &opts.scope);
            let lo = orderer.lo.clone();
            let left = next_batch(conn, ctx, unit, run.conv_kind, lo, 1, scope).await?;
            *stopped = left.is_some();
            *stopped_by = Some(by);
            Ok(())
        }
        Err(failure) => {
            *hi = failure.hi;
            Err(failure.error)
        }
    }
}

/// The run's own connection: finds the batches and records them in key order.
struct Orderer<'a, 'p> {
    run: &'a BatchRun<'a>,
    unit: BatchUnit,
    lo: &'p mut Option<Key>,
    summary: &'p mut AuditSummary,
    report: &'p mut ReportWriter,
    progress: &'p mut Progress,
}

impl InOrder for Orderer<'_, '_> {
    type Out = Part;

    async fn find(&mut self, conn: &mut AnyConnection, lo: Option<Key>) -> Result<Option<Batch>> {
        let (run, size) = (self.run, self.run.opts.batch_size);
        let scope = &run.opts.scope;
        next_batch(conn, run.ctx, self.unit, run.conv_kind, lo, size, scope).await
    }

    async fn apply(
        &mut self,
        conn: &mut AnyConnection,
        batch: Batch,
        part: Part,
        _: Times,
    ) -> Result<Option<Instant>> {
        let (run, summary) = (self.run, &mut *self.summary);
        add(summary, part.numbers);
        self.report.append_rows(&part.rows)?;
        let checked = part.checked.max(0) as u64;
        summary.rows_checked += checked;
        if run.opts.store_rows && !part.drifting.is_empty() {
            if let Some(id) = summary.ledger_id {
                ledger::store_rows(conn, run.ctx.dialect, id, &part.drifting).await?;
            }
        }
        summary.batches += 1;
        let per_row = run.counters.len().max(1) as u64;
        self.progress.advance(batch.rows.max(checked / per_row));
        *self.lo = Some(batch.hi);
        Ok(None)
    }

    fn progress(&mut self) -> &mut Progress {
        self.progress
    }
}

/// Adds one batch's numbers (`d`, counted from [`empty_like`]) to the run's summary `s`, as
/// counting its rows into `s` one by one would have: sums (saturated at `i64::MAX`, as each
/// row's), largest values, classes, the first 3 examples of each class, the |drift|
/// buckets, the top conversations (a stable sort of the kept ones and the batch's, as
/// `tally.rs` merges a batch), the members without a watermark, each counter's.
pub(super) fn add(s: &mut AuditSummary, d: AuditSummary) {
    s.drifting_rows += d.drifting_rows;
    s.sum_abs_drift = s.sum_abs_drift.saturating_add(d.sum_abs_drift);
    s.max_abs_drift = s.max_abs_drift.max(d.max_abs_drift);
    add_classes((&mut s.by_class, &mut s.examples), (d.by_class, d.examples));
    for b in d.abs_drift_buckets {
        match s.abs_drift_buckets.binary_search_by_key(&b.to, |x| x.to) {
            Ok(i) => s.abs_drift_buckets[i].rows += b.rows,
            Err(i) => s.abs_drift_buckets.insert(i, b),
        }
    }
    let top = &mut s.top_conversations;
    top.extend(d.top_conversations);
    top.sort_by_key(|c| std::cmp::Reverse((c.drifting_rows, c.sum_abs_drift)));
    top.truncate(TOP_CONVERSATIONS);
    s.members_without_watermark += d.members_without_watermark;
    for (c, dc) in s.counters.iter_mut().zip(d.counters) {
        c.rows_checked += dc.rows_checked;
        c.drifting_rows += dc.drifting_rows;
        c.sum_abs_drift = c.sum_abs_drift.saturating_add(dc.sum_abs_drift);
        c.max_abs_drift = c.max_abs_drift.max(dc.max_abs_drift);
        add_classes(
            (&mut c.by_class, &mut c.examples),
            (dc.by_class, dc.examples),
        );
    }
}

/// Rows per class, and the examples of each class (at most 3, the first ones).
type Classes = (BTreeMap<String, u64>, BTreeMap<String, Vec<Example>>);

/// Adds a batch's classes and examples to the run's (or a counter's).
fn add_classes(
    (by_class, examples): (
        &mut BTreeMap<String, u64>,
        &mut BTreeMap<String, Vec<Example>>,
    ),
    (d_class, d_examples): Classes,
) {
    for (class, n) in d_class {
        *by_class.entry(class).or_default() += n;
    }
    for (class, more) in d_examples {
        let kept = examples.entry(class).or_default();
        let room = 3usize.saturating_sub(kept.len());
        kept.extend(more.into_iter().take(room));
    }
}
