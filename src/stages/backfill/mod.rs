//! Stage 2, backfill: each member's `last_read_id` from the best evidence the database holds
//! (semantics.md, "Backfill: where each last_read_id comes from"), in batches of whole
//! conversations. Each batch reads in one consistent snapshot and writes with one forward-only
//! upsert per chunk of rows: a watermark never moves back (seed 000 §3).

use anyhow::{Context, Result};
use sqlx::AnyConnection;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::stages::keepalive::Session;
use crate::stages::parallel::Jobs;

use super::{next_batch, BatchUnit, Key, Scope};
use crate::dialect::{render, Dialect, RangeParams, SqlContext};
use crate::error::input_error;
use crate::ledger::records::BackfillOptionsRecord;
use crate::ledger::{self, RunStatus, Stage};
use crate::lock::{self, RunnerLock};
use crate::mapping::{EvidenceKind, EvidencePolicy, Mapping};
use crate::progress::Reporter;
use crate::schema::{self, KeyKind};

/// The settle time when none is given: longer than an application transaction stays open.
pub const DEFAULT_SETTLE_TIME: Duration = Duration::from_secs(300);

/// Options of a backfill run.
#[derive(Debug, Clone)]
pub struct BackfillOptions {
    /// Upper bound of members per batch (whole conversations: a batch may exceed it by one
    /// conversation).
    pub batch_size: u64,
    /// Time target per batch: the batch size follows the last batches' timings (as
    /// pt-online-schema-change's `--chunk-time`); zero keeps `batch_size` fixed.
    pub chunk_time: Duration,
    /// Compute the plan and write nothing.
    pub dry_run: bool,
    /// No progress output.
    pub quiet: bool,
    /// Where progress goes (default: nowhere; the command line shows a bar).
    pub progress: Reporter,
    /// Start over instead of resuming an unfinished run.
    pub restart: bool,
    /// Throttle: at most this many members per second.
    pub max_rows_per_second: Option<f64>,
    /// Throttle: a pause after every batch.
    pub pause_between_batches: Duration,
    /// Throttle: while this file exists the backfill waits.
    pub pause_file: Option<PathBuf>,
    /// The longest lock wait of one statement.
    pub lock_timeout: Duration,
    /// How often a batch that hit a lock wait is retried (with exponential backoff and
    /// jitter) before the run stops with exit 3, its checkpoint intact.
    pub retries: usize,
    /// Set by Ctrl-C: finish the current batch, record it, stop.
    pub stop: Option<Arc<AtomicBool>>,
    /// Count, in each batch's transaction after its write, the rows whose unread number will
    /// change once the counters are gone (the audit's one-pass count for the batch, committed
    /// with the batch and its checkpoint: about one audit's time in all).
    pub count_changes: bool,
    /// Settle time (semantics.md "Backfill", settle time; issue 29 row 19): a watermark the
    /// backfill derives (a counter of any value, a timestamp, an own message, read flags) is
    /// not written when it would newly cover a message younger than this (a position
    /// allocated by a transaction that has not committed yet, below that message, would be
    /// covered with it); such members are left for a later run and counted, per member (the
    /// others of the conversation are written). Needs `messages.created_at`; zero turns it
    /// off.
    pub settle_time: Duration,
    /// Run even when an evidence entry's values fit the messages' position space in under
    /// [`crate::schema::evidence_share::MIN_SHARE`] of a sample (issue 24; without it: exit 2
    /// before anything is written, the dry run included); the share is then not measured
    /// at all (issue 29 row 18) and the summary says so.
    pub accept_evidence_share: bool,
    /// `--jobs N`: N batches at once on N connections of their own ([`crate::stages::parallel`]);
    /// the checkpoint advances over the batches finished in key order.
    pub jobs: Jobs,
    /// `--audit-form`: the form of the change count's audit statement (issue 30; default:
    /// chosen per batch, [`crate::stages::audit::choose`]). Every form gives the same count.
    pub audit_form: crate::stages::audit::AuditForm,
}

impl Default for BackfillOptions {
    fn default() -> Self {
        BackfillOptions {
            batch_size: crate::stages::batch::DEFAULT_BATCH_SIZE,
            chunk_time: Duration::from_millis(500),
            dry_run: false,
            quiet: true,
            progress: Reporter::default(),
            restart: false,
            max_rows_per_second: None,
            pause_between_batches: Duration::ZERO,
            pause_file: None,
            lock_timeout: Duration::from_secs(2),
            retries: 5,
            stop: None,
            count_changes: true,
            audit_form: crate::stages::audit::AuditForm::Auto,
            settle_time: DEFAULT_SETTLE_TIME,
            accept_evidence_share: false,
            jobs: Jobs::one(),
        }
    }
}

/// Runs the backfill, resuming an unfinished run of the same mapping unless `restart`. With
/// `dry_run`, returns the plan's counts (what would be written) and writes nothing.
///
/// Errors: exit 2 for a mapping that does not match the database, a missing watermark or
/// ledger table (run `expand` first), or a resume under a changed mapping or tidemark version;
/// exit 3 when another backfill runs on this mapping, or on database failure after the retries
/// (the batch in flight is rolled back; finished batches and the checkpoint stay).
pub async fn run(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
    opts: &BackfillOptions,
) -> Result<BackfillSummary> {
    opts.jobs.check(dialect)?;
    // Bound every lock wait first: even the preflight must not queue behind a long lock.
    lock::set_lock_timeout(conn, dialect, opts.lock_timeout).await?;
    for setting in dialect.sessions().audit_session() {
        sqlx::query(setting).execute(&mut *conn).await?;
    }
    let collations = schema::preflight(conn, mapping, dialect).await?;
    // The counter evidence is the first counter's (issue 22), read through its view (its
    // own `countable`); the fingerprint is the mapping's.
    let view = mapping.evidence_view();
    let mapping = &view;
    for (table, what) in [
        (mapping.watermarks.table.as_str(), "watermark"),
        (crate::tables::LEDGER_TABLE, "ledger"),
    ] {
        if !crate::db::catalog::table_exists(conn, dialect, table).await? {
            return Err(input_error(format!(
                "the {what} table {table:?} does not exist: run `tidemark expand` first"
            )));
        }
    }
    let ctx = collations.apply(SqlContext::new(mapping, dialect), mapping);
    let conv_kind = schema::watermark_key_types(conn, mapping, &ctx)
        .await?
        .1
        .kind;
    let settle = settle_predicate(conn, mapping, &ctx, opts.settle_time).await?;
    // Issue 24: the mapping proven on the data before anything is written; accepted
    // unmeasured, not measured at all (issue 29 row 18: one sampled read per entry saved).
    let shares = if opts.accept_evidence_share {
        Vec::new()
    } else {
        let shares = schema::evidence_share::measure(conn, mapping, &ctx).await?;
        if let Some(refusal) = schema::evidence_share::refusal(mapping, &shares) {
            return Err(refusal);
        }
        shares
    };
    if opts.dry_run {
        return run_batches(
            conn,
            &ctx,
            mapping,
            opts,
            conv_kind,
            &settle,
            None,
            None,
            BackfillSummary {
                notices: collations.notices(),
                evidence_shares: shares,
                evidence_share_accepted: opts.accept_evidence_share,
                ..Default::default()
            },
            None,
        )
        .await;
    }
    crate::db::privileges::for_backfill(conn, dialect, &mapping.watermarks.table).await?;
    let lock = RunnerLock::acquire(conn, dialect, &lock_name(mapping)).await?;
    let result = async {
        let (id, lo, mut summary) = resume_or_start(conn, mapping, dialect, opts).await?;
        summary.notices = collations.notices();
        summary.evidence_shares = shares;
        summary.evidence_share_accepted = opts.accept_evidence_share;
        ledger::abandon_stale(conn, dialect, Stage::Backfill, &mapping.fingerprint, id).await?;
        let result = run_batches(
            conn,
            &ctx,
            mapping,
            opts,
            conv_kind,
            &settle,
            Some(id),
            lo,
            summary,
            Some(&lock),
        )
        .await;
        match &result {
            Ok(s) => {
                let status = if s.interrupted {
                    RunStatus::Interrupted
                } else {
                    RunStatus::Done
                };
                ledger::finish(
                    conn,
                    dialect,
                    id,
                    status,
                    &serde_json::to_value(s)?,
                    None,
                    None,
                    None,
                )
                .await?;
            }
            Err(e) => {
                let _ = ledger::set_status(conn, dialect, id, RunStatus::Failed).await;
                let _ = e;
            }
        }
        result
    }
    .await;
    let _ = lock.release(conn).await;
    result
}

/// The runner lock of backfills of this mapping ([`lock::runner_name`]).
pub fn lock_name(mapping: &Mapping) -> String {
    lock::runner_name(Stage::Backfill, &mapping.fingerprint)
}

/// Finds an unfinished run of this mapping to continue, or records a new one.
async fn resume_or_start(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
    opts: &BackfillOptions,
) -> Result<(i64, Option<Key>, BackfillSummary)> {
    let last = ledger::recent(conn, Stage::Backfill, 1, dialect)
        .await?
        .into_iter()
        .next();
    if let Some(last) = last.filter(|l| {
        matches!(
            l.status,
            RunStatus::Running | RunStatus::Failed | RunStatus::Interrupted
        )
    }) {
        if opts.restart {
            ledger::set_status(conn, dialect, last.id, RunStatus::Abandoned).await?;
        } else if let Some(cp) = &last.checkpoint {
            if last.fingerprint != mapping.fingerprint {
                return Err(input_error(format!(
                    "backfill run #{} stopped unfinished under another mapping (fingerprint {} vs {} now): \
                     resuming it would mix two plans; run again with --restart to start over",
                    last.id, &last.fingerprint[..12], &mapping.fingerprint[..12]
                )));
            }
            if last.tool_version != env!("CARGO_PKG_VERSION") {
                return Err(input_error(format!(
                    "backfill run #{} stopped unfinished under tidemark {} (this is {}): run again with --restart to start over",
                    last.id, last.tool_version, env!("CARGO_PKG_VERSION")
                )));
            }
            let cp: Checkpoint =
                serde_json::from_str(cp).context("reading the backfill checkpoint")?;
            ledger::set_status(conn, dialect, last.id, RunStatus::Running).await?;
            let mut summary = cp.summary;
            summary.resumed_after_batches = Some(summary.batches);
            summary.resumed_after = cp.lo.as_ref().map(|k| k.to_string());
            summary.interrupted = false;
            summary.ledger_id = Some(last.id);
            return Ok((last.id, cp.lo, summary));
        }
    }
    let options = serde_json::to_value(BackfillOptionsRecord {
        batch_size: opts.batch_size,
        chunk_time_ms: opts.chunk_time.as_millis() as u64,
        max_rows_per_second: opts.max_rows_per_second,
        pause_between_batches_ms: opts.pause_between_batches.as_millis() as u64,
        lock_timeout_ms: opts.lock_timeout.as_millis() as u64,
        retries: opts.retries,
    })?;
    let id = ledger::start(
        conn,
        dialect,
        Stage::Backfill,
        &mapping.fingerprint,
        &options,
    )
    .await?;
    let summary = BackfillSummary {
        ledger_id: Some(id),
        ..Default::default()
    };
    Ok((id, None, summary))
}

/// The batch loop: throttle, plan (snapshot read), write with the checkpoint, adapt the size.
#[allow(clippy::too_many_arguments)] // one call site (`run`): the run's resolved state
async fn run_batches(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    mapping: &Mapping,
    opts: &BackfillOptions,
    conv_kind: KeyKind,
    settle: &Settle,
    ledger_id: Option<i64>,
    mut lo: Option<Key>,
    mut summary: BackfillSummary,
    lock: Option<&RunnerLock>,
) -> Result<BackfillSummary> {
    start_summary(&mut summary, settle, mapping);
    let total = count_subjects(conn, ctx).await?;
    let mut progress = opts
        .progress
        .start("backfill", "members", total, opts.quiet);
    progress.advance(summary.members);
    let max = opts.batch_size.max(1);
    let mut size = if opts.chunk_time.is_zero() {
        max
    } else {
        max.min(1000)
    };
    let started = Instant::now();
    // Time spent paused (pause file, lock backoff, --pause-between-batches): not active time,
    // so it never counts toward --max-rows-per-second (issue 13 row 1).
    let mut paused = Duration::ZERO;
    let members_at_start = summary.members;
    let mut session = Session::new(lock);
    // The batch in flight (its last conversation) and why it stopped, for the error.
    let (mut hi, mut why): (Option<Key>, String) = (None, String::new());
    let result: Result<()> = async {
        if opts.jobs.parallel() {
            let run = parallel_run(ctx, mapping, opts, (conv_kind, settle, ledger_id, size));
            let sinks = (&mut summary, &mut progress, &mut session);
            return jobs::batches(conn, &run, (&mut lo, &mut hi, &mut why), sinks).await;
        }
        loop {
            if opts.stop.as_ref().is_some_and(|s| s.load(Ordering::SeqCst)) {
                summary.interrupted = true;
                break;
            }
            paused += session
                .wait_while_file(
                    conn,
                    opts.pause_file.as_deref(),
                    opts.stop.as_deref(),
                    &mut progress,
                )
                .await?;
            let found = next_batch(
                conn,
                ctx,
                BatchUnit::Subjects,
                conv_kind,
                lo.clone(),
                size,
                &Scope::default(),
            )
            .await?;
            let Some(batch) = found else {
                break;
            };
            hi = Some(batch.hi.clone());
            let t0 = Instant::now();
            let mut backoff = lock_wait_backoff(opts.retries);
            let mut next = loop {
                let mut attempt = summary.clone();
                let hi = batch.hi.clone();
                let checkpoint = move |s: &BackfillSummary| {
                    Ok(serde_json::to_value(&Checkpoint {
                        lo: Some(hi.clone()),
                        summary: s.clone(),
                    })?)
                };
                let step = run_batch(
                    conn,
                    ctx,
                    mapping,
                    settle,
                    &batch,
                    &mut attempt,
                    ledger_id.map(|ledger_id| Record {
                        ledger_id,
                        checkpoint: Some(&checkpoint as CheckpointOf<'_>),
                        count_changes: opts.count_changes,
                        audit_form: opts.audit_form,
                    }),
                )
                .await;
                match step {
                    Ok(()) => break attempt,
                    Err(e) if lock::is_lock_wait(&e) => match backoff.next() {
                        Some(delay) => {
                            summary.retried_batches += 1;
                            progress.message(&format!(
                                "lock wait, retrying in {} ms",
                                delay.as_millis()
                            ));
                            session.wait(conn, delay).await?;
                            paused += delay;
                        }
                        None => {
                            why = format!(
                                ", still meeting lock waits after {} retries",
                                opts.retries
                            );
                            return Err(e);
                        }
                    },
                    Err(e) => return Err(e),
                }
            };
            next.retried_batches = summary.retried_batches;
            summary = next;
            progress.message("");
            progress.advance(batch.rows);
            lo = Some(batch.hi.clone());
            hi = None;
            session.heartbeat(conn).await;
            // Size the next batch to the time target.
            size = next_size(size, max, opts.chunk_time, batch.rows, t0.elapsed());
            // Throttle.
            if let Some(limit) = opts.max_rows_per_second.filter(|l| *l > 0.0) {
                let done = summary.members - members_at_start;
                let active = started.elapsed().saturating_sub(paused);
                let ahead = throttle_delay(done, active, limit);
                if !ahead.is_zero() {
                    progress.message(&format!("throttled: --max-rows-per-second {limit}"));
                    session.wait(conn, ahead).await?;
                }
            }
            if !opts.pause_between_batches.is_zero() {
                progress.message(&format!(
                    "pause between batches ({})",
                    humantime::format_duration(opts.pause_between_batches)
                ));
                session.wait(conn, opts.pause_between_batches).await?;
                paused += opts.pause_between_batches;
            }
        }
        Ok(())
    }
    .await;
    progress.finish();
    let batch = summary.batches + 1;
    result.map_err(|e| stopped(e, ledger_id, batch, lo.as_ref(), hi.as_ref(), &why))?;
    Ok(summary)
}

/// The `--jobs` run of `opts` ([`jobs::batches`]) from the run's resolved state; `size`: the
/// first batch's.
fn parallel_run<'a>(
    ctx: &'a SqlContext,
    mapping: &'a Mapping,
    opts: &'a BackfillOptions,
    (conv_kind, settle, ledger_id, size): (KeyKind, &'a Settle, Option<i64>, u64),
) -> jobs::Run<'a> {
    jobs::Run {
        ctx,
        mapping,
        settle,
        conv_kind,
        ledger_id,
        count_changes: opts.count_changes,
        audit_form: opts.audit_form,
        retries: opts.retries,
        batch_size: (opts.batch_size.max(1), size),
        chunk_time: opts.chunk_time,
        max_rows_per_second: opts.max_rows_per_second,
        pause_file: opts.pause_file.as_deref(),
        stop: opts.stop.as_deref(),
        rest: opts.pause_between_batches,
        jobs: &opts.jobs,
        lock_timeout: opts.lock_timeout,
    }
}

/// The error of a backfill that stops in batch `batch` (1-based, over all parts of the run)
/// of the conversations after `lo` up to `hi`, with what is kept (issue 25, row 14): the
/// batches before it are committed with their checkpoint, so the same command continues
/// (`ledger_id` None: a dry run, which writes nothing). `why` follows the batch
/// (`, still meeting lock waits after 5 retries`); the database's error stays the cause.
fn stopped(
    e: anyhow::Error,
    ledger_id: Option<i64>,
    batch: u64,
    lo: Option<&Key>,
    hi: Option<&Key>,
    why: &str,
) -> anyhow::Error {
    let run = match ledger_id {
        Some(id) => format!("backfill run #{id}"),
        None => "backfill --dry-run".to_string(),
    };
    let range = crate::stages::batch::range_words(lo, hi);
    let kept = match (ledger_id, lo) {
        (None, _) => "a dry run writes nothing".to_string(),
        (Some(_), Some(lo)) => format!(
            "the batches up to conversation {lo} are committed; run `tidemark backfill` again to continue"
        ),
        (Some(_), None) => {
            "no batch of this run is committed yet; run `tidemark backfill` again".to_string()
        }
    };
    e.context(format!(
        "{run} stopped in batch {batch}{range}{why}: {kept}"
    ))
}

async fn count_subjects(conn: &mut AnyConnection, ctx: &SqlContext) -> Result<u64> {
    let sub = render(
        "subjects.sql",
        ctx,
        minijinja::context! { range => RangeParams::default() },
    )?;
    let n: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM ({sub}) tm_s"))
        .fetch_one(&mut *conn)
        .await?;
    Ok(n.max(0) as u64)
}

/// The statements one batch runs, rendered for this mapping and dialect with the batch's range
/// as placeholders (lo, hi): what `backfill --dry-run` prints, so a DBA reads exactly what
/// will run. For a database whose key columns are all in one collation; see
/// [`statements_in`].
pub fn statements(mapping: &Mapping, dialect: Dialect) -> Result<Vec<(&'static str, String)>> {
    statements_in(mapping, &SqlContext::new(mapping, dialect))
}

/// [`statements`] under `ctx` (a database's key collations applied:
/// [`crate::schema::KeyCollations::apply`]; a batch of keys shows two of its keys).
pub fn statements_in(mapping: &Mapping, ctx: &SqlContext) -> Result<Vec<(&'static str, String)>> {
    let dialect = ctx.dialect;
    // The settle predicate as a run with a settle time would have it (its cutoff is a
    // placeholder-free expression computed at the start of the run: shown here for 300 s).
    let settle = if mapping
        .evidence
        .iter()
        .any(|e| e.kind() != EvidenceKind::Position)
        && mapping.messages.created_at.is_some()
    {
        Settle::Quiet(
            dialect.seconds_ago(DEFAULT_SETTLE_TIME.as_secs()),
            DEFAULT_SETTLE_TIME.as_secs(),
        )
    } else {
        Settle::Off
    };
    let statements = evidence::write_statements(ctx, mapping, &settle, None)?;
    let whats: Vec<&'static str> = match (dialect.sessions().backfill_plan_drop_sql(), statements.len()) {
        (None, _) => vec![match mapping.policy {
            EvidencePolicy::First => "write, one statement per batch at READ COMMITTED (one snapshot): each member's watermark chosen in the database (policy \"first\": the first evidence with a value wins), written forward-only, only the counts returned",
            EvidencePolicy::Highest => "write, one statement per batch at READ COMMITTED (one snapshot): each member's watermark chosen in the database (policy \"highest\": the highest position, timestamp or own message wins; the counter only fills a missing watermark), written forward-only, only the counts returned",
        }],
        _ => vec![
            match mapping.policy {
                EvidencePolicy::First => "write transaction per batch, 1 of 3: each member's watermark chosen in the database (policy \"first\": the first evidence with a value wins) into a temporary table, in one consistent read",
                EvidencePolicy::Highest => "write transaction per batch, 1 of 3: each member's watermark chosen in the database (policy \"highest\": the highest position, timestamp or own message wins; the counter only fills a missing watermark) into a temporary table, in one consistent read",
            },
            "2 of 3: the forward-only write, one INSERT … SELECT from it",
            "3 of 3: the counts of the batch (only these come back), then the checkpoint and COMMIT",
        ],
    };
    Ok(whats
        .into_iter()
        .zip(statements)
        .map(|(what, s)| (what, s.sql))
        .collect())
}

mod binds;
mod evidence;
mod jobs;
mod summary;
mod throttle;

use evidence::{run_batch, settle_predicate, CheckpointOf, Record, Settle};
/// What a run (or the part that resumes one) records before its first batch: how the settle
/// time applies, and, with read_flags evidence, the out-of-order counts it adds to.
fn start_summary(summary: &mut BackfillSummary, settle: &Settle, mapping: &Mapping) {
    match settle {
        Settle::Off => summary.settle_time_s = None,
        Settle::Unguarded => summary.settle_unguarded = true,
        Settle::Quiet(_, secs) => summary.settle_time_s = Some(*secs),
    }
    if summary.read_flags.is_none()
        && mapping
            .evidence
            .iter()
            .any(|e| e.kind() == EvidenceKind::ReadFlags)
    {
        summary.read_flags = Some(Default::default());
    }
}

use summary::Checkpoint;
pub use summary::{BackfillSummary, FlagCounts};
pub use throttle::throttle_delay;
use throttle::{lock_wait_backoff, next_size};
