//! Stage 3, audit: recompute unread from the watermarks, compare it with the stored counters,
//! classify every drifting row (semantics.md, "Drift classes") and write the CSV drift report.
//!
//! Batches of whole conversations, each one set-based statement in a consistent snapshot that
//! returns only the drifting rows; rows stream into the report, so memory does not grow with the
//! table. The summary goes into the ledger with the report's SHA-256.
//!
//! Split by job: this file holds [`run`] (checks, runner lock, ledger, resume); [`types`] the
//! options and the summary; [`batches`] the batch loop and the statements it runs; [`rows`]
//! the decoding and classification of one drifting row; [`summary`] the tolerances, the
//! empty-scope error and the metrics file; [`min_age`] the `--min-age` filter;
//! [`backfill_state`] where the mapping's backfill stands when the audit starts; [`form`]
//! which form of the audit statement a batch runs (one pass, or an index probe per member).

use anyhow::{Context, Result};
use sqlx::AnyConnection;
use std::time::Instant;

use crate::db::catalog::table_exists;
use crate::db::replica::Connections;
use crate::dialect::{Dialect, SqlContext};
use crate::error::input_error;
use crate::ledger::{self, records::AuditOptionsRecord, RunStatus, Stage};
use crate::lock::RunnerLock;
use crate::mapping::{Mapping, Shape};
use crate::schema;
use crate::stages::Key;
use crate::tables::LEDGER_TABLE;

mod backfill_state;
mod batches;
mod form;
mod jobs;
mod min_age;
mod rows;
mod summary;
mod tally;
mod types;

pub(crate) use batches::{batch_statement, bind_batch, rows_and_form};
pub use batches::{statements, statements_every_counter, statements_in};
pub use form::{choose, probe_fits, AuditForm, BatchFigures, PROBE_PER_SORTED};
pub use summary::write_metrics;

use batches::audit_batches;
pub(crate) use min_age::quiescence;
use summary::{counter_summaries, crossed_per_counter, empty_scope, mapping_error_hint};
pub use types::{
    AuditOptions, AuditOutcome, AuditSummary, BatchRun, ConversationDrift, CounterRun,
    CounterSummary, DriftBucket, Example, TOP_CONVERSATIONS,
};

/// Runs the audit and writes the report.
///
/// With the ledger, the run holds the audit's runner lock of this mapping ([`lock_name`]) from
/// before its ledger row is chosen to its end, as the backfill does: once it holds it, every
/// older audit of the mapping still recorded as `running` (its process killed, or its server
/// session ended, before it could record its end) is marked `abandoned`, and `status` tells a
/// `running` audit whose lock is free as gone. A second audit of the same mapping meanwhile
/// exits 3 naming the first.
///
/// Errors: exit 2 when the options do not go together, the mapping does not match the
/// database, the watermark table is missing (run `expand`), or `--resume` finds no incomplete
/// run with the same options; exit 3 when another audit of the mapping runs, or on database or
/// I/O failure (no report appears under the final name, and the ledger records the run as
/// failed).
pub async fn run(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
    opts: &AuditOptions,
) -> Result<AuditOutcome> {
    run_reading(Connections::one(conn), mapping, dialect, opts).await
}

/// [`run`] with its reads on `conns.reads()` (`--read-database`, issue 31: a streaming
/// replica, opened by [`crate::db::replica::open`]): the preflight, the key types, the
/// `--min-age` filter and every batch read there, each batch in one snapshot of the replica;
/// the ledger, the runner lock and `--store-rows` stay on `conns.primary()`. Without a
/// replica both are the one connection.
///
/// Errors: as [`run`].
pub async fn run_reading(
    mut conns: Connections<'_>,
    mapping: &Mapping,
    dialect: Dialect,
    opts: &AuditOptions,
) -> Result<AuditOutcome> {
    let started = Instant::now();
    check_options(opts)?;
    opts.jobs.check(dialect)?;
    let collations = prepare(conns.reads(), mapping, dialect, opts).await?;
    if conns.has_replica() {
        crate::lock::set_lock_timeout(conns.primary(), dialect, opts.lock_timeout).await?;
    }
    let lock = take_lock(conns.primary(), mapping, dialect, opts).await?;
    let result = run_locked(
        &mut conns,
        mapping,
        dialect,
        &collations,
        opts,
        lock.as_ref(),
        started,
    )
    .await;
    if let Some(lock) = lock {
        // Best effort: a server lock goes with the session, a lock row is taken over.
        let _ = lock.release(conns.primary()).await;
    }
    result
}

/// The runner lock of audits of the mapping with this fingerprint (SHA-256 hex): one audit
/// recorded in the ledger at a time per mapping; `status` asks it whether a `running` audit
/// is alive.
pub fn lock_name(fingerprint: &str) -> String {
    crate::lock::runner_name(Stage::Audit, fingerprint)
}

/// With the ledger: its table, the audit's privileges, then the runner lock ([`lock_name`]).
/// None with `--no-ledger` (nothing is recorded, nothing to tell alive).
///
/// Errors: exit 2 without a ledger table; exit 3 for a missing privilege, another audit of
/// the mapping holding the lock, or a database failure.
async fn take_lock(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
    opts: &AuditOptions,
) -> Result<Option<RunnerLock>> {
    if !opts.ledger {
        return Ok(None);
    }
    if !table_exists(conn, dialect, LEDGER_TABLE).await? {
        return Err(input_error(
            "the ledger table tidemark_ledger does not exist: run `tidemark expand`, or audit with --no-ledger",
        ));
    }
    crate::db::privileges::for_audit(conn, dialect, opts.store_rows).await?;
    let name = lock_name(&mapping.fingerprint);
    Ok(Some(RunnerLock::acquire(conn, dialect, &name).await?))
}

/// The audit under its lock (`lock`: None with `--no-ledger`): the ledger row, the batches,
/// the verdict and its records; a run that fails after its ledger row is chosen is recorded
/// as failed.
async fn run_locked(
    conns: &mut Connections<'_>,
    mapping: &Mapping,
    dialect: Dialect,
    collations: &schema::KeyCollations,
    opts: &AuditOptions,
    lock: Option<&RunnerLock>,
    started: Instant,
) -> Result<AuditOutcome> {
    // One context per counter (issue 22), each its view of the mapping; the first runs the
    // batches.
    let counters: Vec<CounterRun> = mapping
        .per_counter()
        .iter()
        .map(|view| CounterRun {
            name: view.counter_name().to_string(),
            ctx: collations.apply(SqlContext::new(view, dialect), view),
        })
        .collect();
    let ctx = counters[0].ctx.clone();
    let (user, conv) = schema::watermark_key_types(conns.reads(), mapping, &ctx).await?;
    let options = options_record(opts);
    let mut summary = AuditSummary {
        shape: mapping.counter.shape,
        by_class: crate::drift::DriftClass::in_order(mapping.counter.shape == Shape::ReadFlags)
            .iter()
            .map(|c| (c.as_str().to_string(), 0))
            .collect(),
        cap: opts.cap,
        report: opts.report.display().to_string(),
        scope: opts.scope_description.clone(),
        parts: 1,
        counters: counter_summaries(mapping),
        ..Default::default()
    };
    let conn = conns.primary();
    let (ledger_id, lo) = open_run(conn, mapping, dialect, opts, &options, &mut summary).await?;
    // The replica read from in this part (a resumed run's earlier parts may have read elsewhere).
    summary.replica = opts.replica.clone();
    summary.ledger_id = ledger_id;
    summary.notices = collations.notices();
    let previous_ms = summary.duration_ms;
    let mut opts = opts.clone();
    let result = async {
        if let Some(id) = ledger_id {
            let conn = conns.primary();
            ledger::abandon_stale(conn, dialect, Stage::Audit, &mapping.fingerprint, id).await?;
        }
        let found =
            backfill_state::read(conns.primary(), mapping, dialect, ledger_id.is_some()).await?;
        summary.backfill = backfill_state::merge(summary.backfill.take(), found);
        if let Some(age) = opts.min_age {
            let reads = conns.reads();
            let (filter, left_out) = quiescence(reads, mapping, &ctx, &opts.scope, age).await?;
            opts.scope.min_age = Some(filter);
            summary.left_out_recent = left_out;
            if !summary.scope.iter().any(|s| s.starts_with("min-age")) {
                summary
                    .scope
                    .push(format!("min-age {}", humantime::format_duration(age)));
            }
        }
        let batch_run = BatchRun {
            ctx: &ctx,
            shape: mapping.counter.shape,
            opts: &opts,
            user_kind: user.kind,
            conv_kind: conv.kind,
            counters: &counters,
        };
        let sha = audit_batches(conns, &batch_run, lo, &mut summary, lock).await;
        summary.duration_ms = previous_ms + started.elapsed().as_millis() as u64;
        let sha = sha?;
        // An audit that checked no row proves nothing (interface.md): exit 2 unless
        // --allow-empty.
        if summary.complete && summary.rows_checked == 0 && !opts.allow_empty {
            return Err(empty_scope(mapping, &summary.scope));
        }
        summary.report_sha256 = sha.unwrap_or_default();
        if let Some(hint) = mapping_error_hint(&summary) {
            summary.notices.push(hint);
        }
        summary.crossed = crossed_per_counter(&mut summary, &opts);
        summary.passed = summary.crossed.is_empty();
        if let Some(id) = ledger_id {
            record(conns.primary(), dialect, id, &summary).await?;
        }
        Ok(())
    }
    .await;
    if let Err(e) = result {
        if let Some(id) = ledger_id {
            let _ = ledger::finish(
                conns.primary(),
                dialect,
                id,
                RunStatus::Failed,
                &serde_json::json!({ "error": crate::error::masked(&e.to_string()) }),
                None,
                None,
                None,
            )
            .await;
        }
        return Err(e);
    }
    if let Some(path) = &opts.metrics_file {
        write_metrics(path, &summary, &mapping.fingerprint)?;
    }
    Ok(AuditOutcome { summary })
}

/// The options that do not go together, and destinations that cannot be written.
///
/// Errors (exit 2): a negative `--cap`, `--store-rows` or `--resume` with `--no-ledger`, a
/// report or metrics file whose folder does not exist.
fn check_options(opts: &AuditOptions) -> Result<()> {
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
    Ok(())
}

/// The session's lock waits and audit settings, the preflight, and the watermark table;
/// returns the key columns' collations (the preflight's).
///
/// Errors: exit 2 for a mapping that does not match the database or a missing watermark
/// table; exit 3 for a database failure.
async fn prepare(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
    opts: &AuditOptions,
) -> Result<schema::KeyCollations> {
    crate::lock::set_lock_timeout(conn, dialect, opts.lock_timeout).await?;
    for setting in dialect.sessions().audit_session() {
        sqlx::query(setting).execute(&mut *conn).await?;
    }
    let collations = schema::preflight(conn, mapping, dialect).await?;
    if !table_exists(conn, dialect, &mapping.watermarks.table).await? {
        return Err(input_error(format!(
            "watermark table {:?} does not exist: run `tidemark expand` and `tidemark backfill` first",
            mapping.watermarks.table
        )));
    }
    Ok(collations)
}

/// The options as the ledger records them (and `--resume` compares them).
fn options_record(opts: &AuditOptions) -> AuditOptionsRecord {
    AuditOptionsRecord {
        cap: opts.cap,
        report: opts.report.display().to_string(),
        batch_size: opts.batch_size,
        max_drift_rows: opts.checked.rows.then_some(opts.max_drift_rows),
        max_drift_ratio: opts.checked.ratio.then_some(opts.max_drift_ratio),
        max_abs_drift: opts.checked.abs.then_some(opts.max_abs_drift),
        scope: opts.scope_description.clone(),
        min_age_s: opts.min_age.map(|a| a.as_secs()),
        store_rows: opts.store_rows,
        spreadsheet_safe: opts.spreadsheet_safe,
    }
}

/// The run's ledger row and where it starts: a new run, or with `--resume` the incomplete one
/// (its summary so far replaces `summary`, its checkpoint is the start); None and the start
/// with `--no-ledger`. Call it under the runner lock ([`take_lock`]).
///
/// Errors: exit 2 when `--resume` finds nothing to resume; exit 3 for a database failure.
async fn open_run(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
    opts: &AuditOptions,
    options: &AuditOptionsRecord,
    summary: &mut AuditSummary,
) -> Result<(Option<i64>, Option<Key>)> {
    if !opts.ledger {
        return Ok((None, None));
    }
    if !opts.resume {
        let options = serde_json::to_value(options)?;
        let id = ledger::start(conn, dialect, Stage::Audit, &mapping.fingerprint, &options).await?;
        return Ok((Some(id), None));
    }
    let (id, previous) = find_incomplete(conn, dialect, &mapping.fingerprint, options).await?;
    let lo = previous.checkpoint.clone();
    *summary = previous;
    summary.parts += 1;
    ledger::set_status(conn, dialect, id, RunStatus::Running).await?;
    Ok((Some(id), lo))
}

/// Records a finished part in the ledger: done, scoped (a `--conversations`, `--sample` or
/// `--min-age` audit checks part of the table, and the contract gate never counts it) or
/// incomplete (not passed yet: the gate must not count it either).
async fn record(
    conn: &mut AnyConnection,
    dialect: Dialect,
    id: i64,
    summary: &AuditSummary,
) -> Result<()> {
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
    let passed = summary.complete.then_some(summary.passed);
    ledger::finish(
        conn,
        dialect,
        id,
        status,
        &serde_json::to_value(summary)?,
        passed,
        path,
        sha,
    )
    .await
}

/// The newest audit of this mapping, which must be incomplete and have the same options.
///
/// Errors (exit 2): no incomplete audit, or one with other options (the message names them).
async fn find_incomplete(
    conn: &mut AnyConnection,
    dialect: Dialect,
    fingerprint: &str,
    options: &AuditOptionsRecord,
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
    let stored: AuditOptionsRecord = last
        .options
        .as_deref()
        .context("no options recorded")
        .and_then(|t| Ok(serde_json::from_str(t)?))
        .map_err(|e| {
            input_error(format!(
                "--resume: the options of audit run #{} in the ledger cannot be read ({e:#}); run the audit without --resume",
                last.id
            ))
        })?;
    if &stored != options {
        let (then, now) = (
            serde_json::to_value(&stored)?,
            serde_json::to_value(options)?,
        );
        let differ: Vec<String> = now
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, v)| then.get(k.as_str()) != Some(v))
            .map(|(k, v)| {
                format!(
                    "{k}: {} then, {v} now",
                    then.get(k.as_str()).unwrap_or(&serde_json::Value::Null)
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
