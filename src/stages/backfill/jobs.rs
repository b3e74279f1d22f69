//! `backfill --jobs N` ([`crate::stages::parallel`]): N batches written at once, each on a
//! worker connection in its own write transaction (the plan, the forward-only write, the
//! tally, the change count), and the checkpoint written by the run's own connection once every
//! earlier batch is committed: it never passes a batch that is not. A kill -9 then resumes at
//! the last batch of that contiguous run; a batch committed after it is written again, which
//! the forward-only upsert makes a no-op for the watermarks (its counts then say `unchanged`
//! where they said `written` or `advanced`). A stop (Ctrl-C, SIGTERM) lets the batches in flight
//! commit and records them all, so a run stopped that way resumes exactly.

use anyhow::Result;
use sqlx::AnyConnection;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::evidence::{run_batch, Record, Settle};
use super::summary::{BackfillSummary, Checkpoint, FlagCounts};
use super::throttle::{lock_wait_backoff, next_size, throttle_delay};
use crate::dialect::SqlContext;
use crate::mapping::Mapping;
use crate::progress::Progress;
use crate::schema::KeyKind;
use crate::stages::batch::{next_batch, Batch, BatchUnit, Key, Scope};
use crate::stages::keepalive::Session;
use crate::stages::parallel::{drive, Ended, InOrder, Jobs, Throttles, Times, Work};

/// What a parallel backfill runs with: the run's resolved state and its options (built by
/// `super::parallel_run`).
pub(super) struct Run<'a> {
    pub ctx: &'a SqlContext,
    pub mapping: &'a Mapping,
    pub settle: &'a Settle,
    pub conv_kind: KeyKind,
    /// The ledger run (None: a dry run, which writes nothing).
    pub ledger_id: Option<i64>,
    pub count_changes: bool,
    /// `--audit-form`: the form of each batch's change count, chosen per batch as in one job.
    pub audit_form: crate::stages::audit::AuditForm,
    pub retries: usize,
    /// `--batch-size`, and the size of the first batch.
    pub batch_size: (u64, u64),
    pub chunk_time: Duration,
    pub max_rows_per_second: Option<f64>,
    pub pause_file: Option<&'a Path>,
    pub stop: Option<&'a AtomicBool>,
    /// `--pause-between-batches`: each connection rests this long after each of its batches.
    pub rest: Duration,
    pub jobs: &'a Jobs,
    pub lock_timeout: Duration,
}

/// Where the run stands, as `run_batches` keeps it for its error: the last batch recorded
/// (`lo`), the batch that failed (`hi`) and why it gave up (`why`).
pub(super) type Place<'p> = (&'p mut Option<Key>, &'p mut Option<Key>, &'p mut String);

/// What the recorded batches go into: the run's counts, its progress, its session.
pub(super) type Sinks<'p, 's> = (
    &'p mut BackfillSummary,
    &'p mut Progress,
    &'p mut Session<'s>,
);

/// Runs the batches after `lo` on `opts.jobs` worker connections, recording each in key order
/// into `summary` and the ledger's checkpoint; a stop sets `summary.interrupted`.
///
/// Errors: the first failure in key order (every batch before it committed and recorded);
/// `hi` and `why` then say where and why.
pub(super) async fn batches(
    conn: &mut AnyConnection,
    run: &Run<'_>,
    (lo, hi, why): Place<'_>,
    (summary, progress, session): Sinks<'_, '_>,
) -> Result<()> {
    let workers = run.jobs.open(run.lock_timeout).await?;
    let writer = Writer {
        run,
        zero: BackfillSummary {
            read_flags: summary.read_flags.map(|_| FlagCounts::default()),
            ..Default::default()
        },
        why: Mutex::new(String::new()),
    };
    let start = lo.clone();
    let mut orderer = Orderer {
        run,
        members_at_start: summary.members,
        summary,
        progress,
        lo,
        size: run.batch_size.1,
        started: Instant::now(),
    };
    let throttles = Throttles {
        pause_file: run.pause_file,
        stop: run.stop,
        deadline: None,
        rest: run.rest,
    };
    let ended = drive(
        conn,
        workers,
        session,
        (&mut orderer, &writer),
        start,
        &throttles,
    )
    .await;
    match ended {
        Ok(Ended::Covered) => Ok(()),
        Ok(Ended::Stopped(_)) => {
            orderer.summary.interrupted = true;
            Ok(())
        }
        Err(failure) => {
            *hi = failure.hi;
            *why = writer.why.into_inner().unwrap_or_default();
            Err(failure.error)
        }
    }
}

/// One batch on a worker connection: written (and counted) in its transaction, retried after
/// a lost lock wait with the run's backoff; hands over its counts and its retries.
struct Writer<'a> {
    run: &'a Run<'a>,
    /// An empty summary of the run's kind (read flags counted or not).
    zero: BackfillSummary,
    /// Why a batch gave up, for the run's error.
    why: Mutex<String>,
}

impl Work for Writer<'_> {
    type Out = (BackfillSummary, u64);

    async fn run(&self, conn: &mut AnyConnection, batch: &mut Batch) -> Result<Self::Out> {
        let run = self.run;
        let mut backoff = lock_wait_backoff(run.retries);
        let mut retried = 0;
        loop {
            let mut counts = self.zero.clone();
            let record = run.ledger_id.map(|ledger_id| Record {
                ledger_id,
                checkpoint: None,
                count_changes: run.count_changes,
                audit_form: run.audit_form,
            });
            let step = run_batch(
                conn,
                run.ctx,
                run.mapping,
                run.settle,
                batch,
                &mut counts,
                record,
            )
            .await;
            match step {
                Ok(()) => return Ok((counts, retried)),
                Err(e) if crate::lock::is_lock_wait(&e) => match backoff.next() {
                    Some(delay) => {
                        retried += 1;
                        Session::new(None).wait(conn, delay).await?;
                    }
                    None => {
                        let mut why = self.why.lock().unwrap_or_else(|p| p.into_inner());
                        *why = format!(", still meeting lock waits after {} retries", run.retries);
                        return Err(e);
                    }
                },
                Err(e) => return Err(e),
            }
        }
    }
}

/// The run's own connection: finds the batches (sized to `--chunk-time`) and records them in
/// key order (the counts, the checkpoint, the progress, the rate throttle).
struct Orderer<'a, 'p> {
    run: &'a Run<'a>,
    summary: &'p mut BackfillSummary,
    progress: &'p mut Progress,
    lo: &'p mut Option<Key>,
    size: u64,
    started: Instant,
    members_at_start: u64,
}

impl InOrder for Orderer<'_, '_> {
    type Out = (BackfillSummary, u64);

    async fn find(&mut self, conn: &mut AnyConnection, lo: Option<Key>) -> Result<Option<Batch>> {
        let run = self.run;
        let (unit, scope) = (BatchUnit::Subjects, &Scope::default());
        next_batch(conn, run.ctx, unit, run.conv_kind, lo, self.size, scope).await
    }

    async fn apply(
        &mut self,
        conn: &mut AnyConnection,
        batch: Batch,
        (counts, retried): Self::Out,
        times: Times,
    ) -> Result<Option<Instant>> {
        let run = self.run;
        add(self.summary, &counts);
        self.summary.retried_batches += retried;
        if let Some(id) = run.ledger_id {
            let checkpoint = serde_json::to_value(Checkpoint {
                lo: Some(batch.hi.clone()),
                summary: self.summary.clone(),
            })?;
            crate::ledger::save_checkpoint(conn, run.ctx.dialect, id, &checkpoint).await?;
        }
        self.progress.advance(batch.rows);
        *self.lo = Some(batch.hi);
        // Size the next batches to the time target, as one job at a time does.
        let (max, chunk) = (run.batch_size.0, run.chunk_time);
        self.size = next_size(self.size, max, chunk, batch.rows, times.took);
        let Some(limit) = run.max_rows_per_second.filter(|l| *l > 0.0) else {
            return Ok(None);
        };
        let done = self.summary.members - self.members_at_start;
        let active = self.started.elapsed().saturating_sub(times.paused);
        let ahead = throttle_delay(done, active, limit);
        Ok((!ahead.is_zero()).then(|| Instant::now() + ahead))
    }

    fn progress(&mut self) -> &mut Progress {
        self.progress
    }
}

/// Adds one batch's counts (`d`, counted from zero) to the run's: what `add_tally` and the
/// change count add in a run of one job, so that the sums are the same.
fn add(s: &mut BackfillSummary, d: &BackfillSummary) {
    s.members += d.members;
    s.batches += d.batches;
    s.written += d.written;
    s.advanced += d.advanced;
    s.unchanged += d.unchanged;
    s.no_evidence += d.no_evidence;
    s.left_without_evidence += d.left_without_evidence;
    for (kind, n) in &d.by_source {
        *s.by_source.entry(kind.clone()).or_default() += n;
    }
    s.unrepresentable_counters += d.unrepresentable_counters;
    s.times_not_times += d.times_not_times;
    s.kept_over_counter += d.kept_over_counter;
    s.counted_changes |= d.counted_changes;
    s.unread_changes += d.unread_changes;
    s.left_unsettled += d.left_unsettled;
    s.left_unsettled_members += d.left_unsettled_members;
    s.not_positions += d.not_positions;
    if let (Some(f), Some(g)) = (s.read_flags.as_mut(), d.read_flags) {
        f.members += g.members;
        f.read_out_of_order += g.read_out_of_order;
        f.unread_marked_read += g.unread_marked_read;
    }
}
