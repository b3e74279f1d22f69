//! The audit's batch loop (one snapshot per batch of whole conversations, the drifting rows
//! streamed into the report) and the statements it runs (`sql/common/audit_*.sql`), which
//! `tidemark plan` prints and the backfill's change count reuses.

use anyhow::{Context, Result};
use futures_util::TryStreamExt;
use sqlx::{AnyConnection, Row};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::form::{choose, probe_fits, AuditForm, BatchFigures};
use super::jobs;
use super::rows::record_row;
use super::tally::BatchTally;
use super::types::{AuditSummary, BatchRun};
use crate::db::replica::Connections;
use crate::db::tx::{begin_snapshot, commit, rollback};
use crate::dialect::{render, Dialect, SqlContext};
use crate::ledger::{self, DriftRow};
use crate::lock::RunnerLock;
use crate::mapping::{Mapping, Shape};
use crate::report::ReportWriter;
use crate::stages::batch::{next_batch, Batch, BatchUnit, Key};
use crate::stages::keepalive::Session;
use crate::stages::parallel::Work;

/// Runs the batches from `lo` (exclusive; None: from the start) until the scope is covered or
/// `--run-time` is up, adding to `summary`; returns the final report's SHA-256, or None when
/// the run stopped early (the rows so far are kept in the partial report beside it). The
/// runner lock's heartbeat (`lock`, a lock row on SQLite and Galera) is refreshed at most every
/// [`crate::stages::keepalive::HEARTBEAT_EVERY`] between batches.
///
/// Errors: database or I/O failure (the report is abandoned: nothing under the final name).
pub(super) async fn audit_batches(
    conns: &mut Connections<'_>,
    run: &BatchRun<'_>,
    mut lo: Option<Key>,
    summary: &mut AuditSummary,
    lock: Option<&RunnerLock>,
) -> Result<Option<String>> {
    let BatchRun {
        ctx,
        shape,
        opts,
        conv_kind,
        ..
    } = *run;
    let started = Instant::now();
    let partial = partial_path(&opts.report);
    let mut report = create_report(run)?;
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
        // The members (read_flags needs them): the flag rows are many per member; and the
        // conversations without a member row, whose flag rows are orphans.
        Shape::ReadFlags => BatchUnit::SubjectsAndMessages,
    };
    let total = match rows_in_scope(conns.reads(), run).await {
        Ok(total) => total,
        Err(e) => {
            report.abandon();
            return Err(stopped_in_batch(e, summary, lo.as_ref(), None));
        }
    };
    let mut progress = opts.progress.start("audit", "rows", total, opts.quiet);
    // Counter rows, each counted once however many counters it holds.
    let per_row = run.counters.len().max(1) as u64;
    progress.advance(summary.rows_checked / per_row);
    let mut stopped = false;
    let mut stopped_by = None;
    let mut session = Session::new(lock);
    // The last conversation of the batch in flight, for the error of a failed batch.
    let mut hi: Option<Key> = None;
    let result: Result<()> = async {
        if opts.jobs.parallel() {
            let reader = Reader::new(run, summary);
            let place = (&mut lo, &mut hi, &mut stopped, &mut stopped_by);
            let sinks = (&mut *summary, &mut report, &mut progress, &mut session);
            return jobs::batches(conns.primary(), (run, unit, started), &reader, place, sinks)
                .await;
        }
        let stop = opts.stop.as_deref();
        session
            .wait_while_file(
                conns.primary(),
                opts.pause_file.as_deref(),
                stop,
                &mut progress,
            )
            .await?;
        while let Some(mut batch) = next_batch(
            conns.reads(),
            ctx,
            unit,
            conv_kind,
            lo.clone(),
            opts.batch_size,
            &opts.scope,
        )
        .await?
        {
            hi = Some(batch.hi.clone());
            let (checked, drifting) =
                audit_batch(conns.reads(), run, &mut batch, summary, &mut report).await?;
            summary.rows_checked += checked.max(0) as u64;
            if opts.store_rows && !drifting.is_empty() {
                if let Some(id) = summary.ledger_id {
                    ledger::store_rows(conns.primary(), ctx.dialect, id, &drifting).await?;
                }
            }
            summary.batches += 1;
            // Rows covered, those of conversations left out by --min-age included (the total
            // counted them).
            progress.advance(batch.rows.max(checked.max(0) as u64 / per_row));
            lo = Some(batch.hi);
            hi = None;
            session.heartbeat(conns.primary()).await;
            if conns.has_replica() {
                // The primary idles while the replica reads: kept from an idle-session timeout.
                session.keep_alive(conns.primary()).await?;
            }
            let stop_asked = opts
                .stop
                .as_ref()
                .is_some_and(|s| s.load(std::sync::atomic::Ordering::SeqCst));
            if stop_asked
                || opts
                    .run_time
                    .is_some_and(|limit| started.elapsed() >= limit)
            {
                // Out of time, or a signal: incomplete only if a batch is left.
                stopped_by = Some(if stop_asked { "signal" } else { "run_time" });
                let reads = conns.reads();
                stopped = next_batch(reads, ctx, unit, conv_kind, lo.clone(), 1, &opts.scope)
                    .await?
                    .is_some();
                break;
            }
            // The throttles (issue 30), as the backfill's: the session kept alive meanwhile.
            throttle(conns, &mut session, opts, &mut progress).await?;
        }
        Ok(())
    }
    .await;
    progress.finish();
    if let Err(e) = result {
        report.abandon();
        return Err(stopped_in_batch(e, summary, lo.as_ref(), hi.as_ref()));
    }
    if stopped {
        // Keep what this part covered for the next one; the final name stays untouched.
        summary.complete = false;
        summary.checkpoint = lo;
        summary.stopped_by = stopped_by.map(String::from);
        report.finish_as(&partial)?;
        return Ok(None);
    }
    summary.complete = true;
    summary.checkpoint = None;
    summary.stopped_by = None;
    let sha = report.finish()?;
    let _ = std::fs::remove_file(&partial);
    Ok(Some(sha))
}

/// The throttles between two batches (issue 30), as the backfill's: `--pause-between-batches`
/// and `--pause-file`, the primary's session kept alive meanwhile (and the replica's pinged
/// after a pause).
///
/// Errors: a session that ended while waiting.
async fn throttle(
    conns: &mut Connections<'_>,
    session: &mut Session<'_>,
    opts: &super::types::AuditOptions,
    progress: &mut crate::progress::Progress,
) -> Result<()> {
    if !opts.pause_between_batches.is_zero() {
        progress.message(&format!(
            "pause between batches ({})",
            humantime::format_duration(opts.pause_between_batches)
        ));
        session
            .wait(conns.primary(), opts.pause_between_batches)
            .await?;
        if conns.has_replica() {
            session.keep_alive(conns.reads()).await?;
        }
        progress.message("");
    }
    let stop = opts.stop.as_deref();
    let file = opts.pause_file.as_deref();
    session
        .wait_while_file(conns.primary(), file, stop, progress)
        .await?;
    Ok(())
}

/// The run's report, its header written: the shape's columns, then `counter` for several
/// counters (issue 22).
///
/// Errors: as [`ReportWriter::with_header`].
fn create_report(run: &BatchRun<'_>) -> Result<ReportWriter> {
    let opts = run.opts;
    if run.counters.len() > 1 {
        let mut header = match run.shape {
            crate::mapping::Shape::ReadFlags => crate::report::READ_FLAGS_HEADER.to_vec(),
            _ => crate::report::PER_MEMBER_HEADER.to_vec(),
        };
        header.push("counter");
        ReportWriter::with_header(&opts.report, &header, opts.report_mode)
    } else {
        ReportWriter::create(&opts.report, run.shape, opts.report_mode)
    }
}

/// One batch of a parallel audit (`--jobs`, [`jobs`]) on a worker connection: [`audit_batch`]
/// into numbers of its own (from `empty`) and a report in memory.
struct Reader<'r> {
    run: &'r BatchRun<'r>,
    empty: AuditSummary,
}

impl<'r> Reader<'r> {
    /// The reader of `run`, counting each batch from an empty summary shaped as `summary`.
    fn new(run: &'r BatchRun<'r>, summary: &AuditSummary) -> Reader<'r> {
        let empty = jobs::empty_like(summary);
        Reader { run, empty }
    }
}

impl Work for Reader<'_> {
    type Out = jobs::Part;

    async fn run(&self, conn: &mut AnyConnection, batch: &mut Batch) -> Result<jobs::Part> {
        let mut numbers = self.empty.clone();
        let mut report = ReportWriter::in_memory();
        let (checked, drifting) =
            audit_batch(conn, self.run, batch, &mut numbers, &mut report).await?;
        let rows = report.into_rows()?;
        Ok(jobs::Part {
            numbers,
            rows,
            checked,
            drifting,
        })
    }
}

/// The error of an audit that stops in its next batch (the conversations after `lo` up to
/// `hi`) on a database or I/O failure, with what is kept (issue 25, row 14): nothing (the
/// report is abandoned, and the run never records a verdict), so the audit runs again.
fn stopped_in_batch(
    e: anyhow::Error,
    summary: &AuditSummary,
    lo: Option<&Key>,
    hi: Option<&Key>,
) -> anyhow::Error {
    let run = match summary.ledger_id {
        Some(id) => format!("audit run #{id}"),
        None => "audit".to_string(),
    };
    let range = crate::stages::batch::range_words(lo, hi);
    let recorded = if summary.ledger_id.is_some() {
        " and the run is not recorded as passed"
    } else {
        ""
    };
    e.context(format!(
        "{run} stopped in batch {}{range}: nothing is kept: no report was written{recorded}; run the audit again",
        summary.batches + 1
    ))
}

/// The rows the audit's scope holds (counter rows, or messages), for the progress display.
async fn rows_in_scope(conn: &mut AnyConnection, run: &BatchRun<'_>) -> Result<u64> {
    let (ctx, opts) = (run.ctx, run.opts);
    let sql = render(
        "audit_count.sql",
        ctx,
        minijinja::context! { range => crate::stages::scope_params(ctx.dialect, &opts.scope) },
    )?;
    let n: i64 = crate::stages::bind_scope(&opts.scope, sqlx::query(&sql))
        .fetch_one(&mut *conn)
        .await?
        .try_get("n")?;
    Ok(n.max(0) as u64)
}

/// One batch in one snapshot: the rows it checks, counted, and its drifting rows streamed into
/// the report as they arrive (with `--store-rows` also returned, for the ledger).
///
/// Errors: database or I/O failure (the snapshot is rolled back).
async fn audit_batch(
    conn: &mut AnyConnection,
    run: &BatchRun<'_>,
    batch: &mut Batch,
    summary: &mut AuditSummary,
    report: &mut ReportWriter,
) -> Result<(i64, Vec<DriftRow>)> {
    let (ctx, conv_kind) = (run.ctx, run.conv_kind);
    begin_snapshot(conn, ctx.dialect).await?;
    let mut drifting = Vec::new();
    let read: Result<i64> = async {
        // --min-age: this batch's conversations with recent writes, in its snapshot.
        batch.find_recent(conn, ctx.dialect, conv_kind).await?;
        let unwatermarked_sql = render(
            "audit_unwatermarked.sql",
            ctx,
            minijinja::context! { range => batch.params(ctx.dialect, 1) },
        )?;
        let unwatermarked: i64 = batch
            .bind(sqlx::query(&unwatermarked_sql))
            .fetch_one(&mut *conn)
            .await?
            .try_get("n")?;
        summary.members_without_watermark += unwatermarked.max(0) as u64;
        // Each counter in turn, in the same snapshot (issue 22: one pass per counter); the
        // batch's drifting rows per conversation across them (issue 24: the page's list).
        let mut tally = BatchTally::default();
        let mut checked = 0;
        for index in 0..run.counters.len() {
            let sink = (&mut drifting, &mut tally);
            checked += counter_batch(conn, run, index, batch, summary, report, sink).await?;
        }
        tally.merge_into(summary);
        Ok(checked)
    }
    .await;
    match read {
        Ok(v) => {
            commit(conn).await?;
            Ok((v, drifting))
        }
        Err(e) => {
            rollback(conn).await;
            Err(e)
        }
    }
}

/// One counter of one batch (counter `index` of the run): the rows it checks, counted, and
/// its drifting rows recorded (kept in `drifting` under `--store-rows`, counted per
/// conversation in `tally`); returns the rows checked.
///
/// Errors: database or I/O failure.
async fn counter_batch(
    conn: &mut AnyConnection,
    run: &BatchRun<'_>,
    index: usize,
    batch: &Batch,
    summary: &mut AuditSummary,
    report: &mut ReportWriter,
    (drifting, tally): (&mut Vec<DriftRow>, &mut BatchTally),
) -> Result<i64> {
    let (ctx, opts) = (&run.counters[index].ctx, run.opts);
    let (checked, form) = rows_and_form(conn, ctx, batch, opts.form).await?;
    let sql = batch_statement(ctx, batch, opts.cap, false, form)?;
    if let Some(c) = summary.counters.get_mut(index) {
        c.rows_checked += checked.max(0) as u64;
    }
    {
        // Planned for this batch's range, not kept as a generic plan (see backfill.rs).
        // The rows are streamed into the report as they arrive, never collected: a
        // batch is whole conversations, and one channel can hold any number of
        // drifting rows (the per-message audit of a 50 000-message conversation held
        // them all: peak RSS 50 MiB, PostgreSQL, 400 000 members).
        let q = sqlx::query(&sql).persistent(false);
        let mut rows = bind_batch(batch, ctx, false, form, q).fetch(&mut *conn);
        while let Some(row) = rows
            .try_next()
            .await
            .context("running the audit statement")?
        {
            if let Some(d) = record_row(&row, run, index, summary, report, tally)? {
                if opts.store_rows {
                    drifting.push(d);
                }
            }
        }
    }
    Ok(checked)
}

/// The rows a batch checks, and the form its audit statement runs in ([`choose`]): under
/// [`AuditForm::Auto`], where the probe form fits, both read by `audit_form_stats.sql` in place
/// of the plain count (`audit_count.sql`), at its cost.
///
/// Errors: database failure.
pub(crate) async fn rows_and_form(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    batch: &Batch,
    asked: AuditForm,
) -> Result<(i64, AuditForm)> {
    let measure = asked == AuditForm::Auto && probe_fits(ctx);
    let name = if measure {
        "audit_form_stats.sql"
    } else {
        "audit_count.sql"
    };
    let range = batch.params(ctx.dialect, 1);
    let sql = render(name, ctx, minijinja::context! { range => range })?;
    let row = batch.bind(sqlx::query(&sql)).fetch_one(&mut *conn).await?;
    let rows: i64 = row.try_get("n")?;
    let figures = if measure {
        Some(BatchFigures {
            rows,
            behind: row.try_get("behind")?,
            deepest: row.try_get("deepest")?,
        })
    } else {
        None
    };
    Ok((rows, choose(asked, ctx, figures)))
}

/// The statements one audit batch runs, rendered for this mapping and dialect with the batch's
/// range as placeholders (lo, hi): what `tidemark plan` prints. For a database whose key
/// columns are all in one collation; see [`statements_in`].
pub fn statements(
    mapping: &Mapping,
    dialect: Dialect,
    cap: Option<i64>,
) -> Result<Vec<(&'static str, String)>> {
    statements_in(mapping, &SqlContext::new(mapping, dialect), cap)
}

/// [`statements`] under `ctx` (a database's key collations applied:
/// [`crate::schema::KeyCollations::apply`]; a batch of keys shows two of its keys).
pub fn statements_in(
    mapping: &Mapping,
    ctx: &SqlContext,
    cap: Option<i64>,
) -> Result<Vec<(&'static str, String)>> {
    let dialect = ctx.dialect;
    let shown = |first: usize| crate::dialect::RangeParams {
        keys: Some(vec![
            dialect.placeholder(first),
            dialect.placeholder(first + 1),
        ]),
        ..Default::default()
    };
    let range = if ctx.keyed {
        shown(1)
    } else {
        crate::dialect::RangeParams {
            lo: Some(dialect.placeholder(1)),
            hi: Some(dialect.placeholder(2)),
            ..Default::default()
        }
    };
    let copies = |form| {
        ranges(ctx, false, form, |n| {
            if ctx.keyed {
                shown(2 * n + 1)
            } else {
                crate::dialect::RangeParams {
                    lo: Some(dialect.placeholder(2 * n + 1)),
                    hi: Some(dialect.placeholder(2 * n + 2)),
                    ..Default::default()
                }
            }
        })
    };
    let mut shown = vec![
        (
            "rows checked, in a REPEATABLE READ snapshot",
            render(
                "audit_count.sql",
                ctx,
                minijinja::context! { range => range },
            )?,
        ),
        (
            "the members without a watermark, same snapshot",
            render(
                "audit_unwatermarked.sql",
                ctx,
                minijinja::context! { range => range.clone() },
            )?,
        ),
        (
            "the drifting rows with what classifies them, same snapshot",
            render(
                template(mapping.counter.shape, AuditForm::OnePass),
                ctx,
                minijinja::context! { cap => cap, count_only => false, ..copies(AuditForm::OnePass) },
            )?,
        ),
    ];
    if probe_fits(ctx) {
        // Issue 30: the batch's figures in place of the count, then one of the two forms.
        shown[0] = (
            "rows checked and what picks the form (src/stages/audit/form.rs), in a REPEATABLE READ snapshot",
            render(
                "audit_form_stats.sql",
                ctx,
                minijinja::context! { range => range },
            )?,
        );
        shown[2].0 = "the drifting rows with what classifies them, one-pass form (members far behind), same snapshot";
        shown.push((
            "or the same rows in the index-probe form (members close to caught up), same snapshot",
            render(
                template(mapping.counter.shape, AuditForm::Probe),
                ctx,
                minijinja::context! { cap => cap, count_only => false, ..copies(AuditForm::Probe) },
            )?,
        ));
    }
    Ok(shown)
}

/// Every statement the audit runs per batch, for every counter of the mapping in the file's
/// order (issue 32: `plan` showed the first counter's only): the first counter's as
/// [`statements_in`]; each further counter (`[[counter]]`, issue 22) adds those it runs in
/// the same snapshot, its rows checked and its drifting rows (in each form it may run: issue
/// 30; the members without a watermark are counted once per batch). With several counters each `what` starts with
/// `counter NAME: `. `ctx_of` gives a counter's view its context (the database's key
/// collations applied, as the audit does).
///
/// Errors: a template that fails to render (a bug in tidemark, exit 3).
pub fn statements_every_counter(
    mapping: &Mapping,
    ctx_of: impl Fn(&Mapping) -> SqlContext,
    cap: Option<i64>,
) -> Result<Vec<(String, String)>> {
    let views = mapping.per_counter();
    let several = views.len() > 1;
    let mut out = Vec::new();
    for (i, view) in views.iter().enumerate() {
        for (k, (what, sql)) in statements_in(view, &ctx_of(view), cap)?
            .into_iter()
            .enumerate()
        {
            if i > 0 && k == 1 {
                continue;
            }
            let what = if several {
                format!("counter {}: {what}", view.counter_name())
            } else {
                what.to_string()
            };
            out.push((what, sql));
        }
    }
    Ok(out)
}

/// The audit template of a shape in a form (the probe form exists for shape A alone:
/// [`probe_fits`] decides before this is asked).
fn template(shape: Shape, form: AuditForm) -> &'static str {
    match (shape, form) {
        (Shape::PerMember, AuditForm::Probe) => "audit_probe.sql",
        (Shape::PerMember | Shape::ReadFlags, _) => "audit_per_member.sql",
        (Shape::PerMessage, _) => "audit_per_message.sql",
    }
}

/// The range copies the audit statement of this mapping places, each a template variable
/// filtering one table by the batch's range (see the templates' headers): per_member, the
/// counter rows (`range`), the messages twice (`range2`, and `range3` unless `count_only`),
/// the watermarks (`range_wm`) and the members (`range_mem`, when mapped); per_message, the
/// messages, the members and the watermarks (`range`, `range2`, `range_wm`). Every table is
/// read by its own index range: a watermark or members table joined whole would be read once
/// per batch, which made the audit grow with the square of the table (issue 11, time(4N) /
/// time(N)). The index-probe form ([`AuditForm::Probe`], where [`probe_fits`]) reads the
/// messages per member by its conversation, not by range: it places `range`, `range_wm`,
/// `range_mem` and, for the drifting rows' totals, `range2`. The batch's keys are bound once
/// per copy ([`bind_batch`]); every copy binds the same values, so only their number and
/// distinct placeholders matter, not the order the text places them in.
fn range_names(ctx: &SqlContext, count_only: bool, form: AuditForm) -> Vec<&'static str> {
    if form == AuditForm::Probe && probe_fits(ctx) {
        let mut v = vec!["range", "range_wm"];
        if ctx.mem.is_some() {
            v.push("range_mem");
        }
        if !count_only {
            v.push("range2");
        }
        return v;
    }
    match ctx.shape {
        Shape::PerMember | Shape::ReadFlags => {
            let mut v = vec!["range", "range2"];
            if !count_only {
                v.push("range3");
            }
            v.push("range_wm");
            if ctx.mem.is_some() {
                v.push("range_mem");
            }
            if ctx.shape == Shape::ReadFlags && !count_only {
                // The drifting rows' flags and their messages (the read_out_of_order facts).
                v.extend(["range_fl", "range_fm"]);
            }
            v
        }
        Shape::PerMessage => vec!["range", "range2", "range_wm"],
    }
}

/// The template variables of [`range_names`], copy `n` (0-based) made by `params`.
fn ranges(
    ctx: &SqlContext,
    count_only: bool,
    form: AuditForm,
    params: impl Fn(usize) -> crate::dialect::RangeParams,
) -> minijinja::Value {
    minijinja::Value::from_iter(
        range_names(ctx, count_only, form)
            .into_iter()
            .enumerate()
            .map(|(n, name)| (name, minijinja::Value::from_serialize(params(n))))
            .collect::<BTreeMap<_, _>>(),
    )
}

/// The audit statement of one batch in `form` (the one-pass or the index-probe form, as
/// [`rows_and_form`] chose; its drifting rows with their facts; with `count_only`, only their
/// number), capped at `cap`. Bind it with [`bind_batch`] and the same `form`.
///
/// Errors: a template that fails to render (a bug, exit 3).
pub(crate) fn batch_statement(
    ctx: &SqlContext,
    batch: &crate::stages::Batch,
    cap: Option<i64>,
    count_only: bool,
    form: AuditForm,
) -> Result<String> {
    let n = batch.param_count();
    let copies = ranges(ctx, count_only, form, |i| {
        batch.params(ctx.dialect, 1 + i * n)
    });
    let form = choose(form, ctx, None);
    render(
        template(ctx.shape, form),
        ctx,
        minijinja::context! { cap => cap, count_only => count_only, ..copies },
    )
}

/// Binds the batch's keys for [`batch_statement`]: once per range copy.
pub(crate) fn bind_batch<'q>(
    batch: &crate::stages::Batch,
    ctx: &SqlContext,
    count_only: bool,
    form: AuditForm,
    mut q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    for _ in 0..range_names(ctx, count_only, form).len() {
        q = batch.bind(q);
    }
    q
}

/// The part report of an incomplete run, beside the final one.
fn partial_path(report: &Path) -> PathBuf {
    let mut name = report.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    report.with_file_name(name)
}
