//! One stage run on one database, its output written to `out`: what `tidemark expand`,
//! `backfill`, `audit` and `status` do on a single database, and on each shard of a sharded run
//! ([`super::shards`], issue 31), which then adds up the [`Ran::totals`]. The stop flag and the
//! progress sink come from the caller ([`RunWith`]), one for all the shards.

use anyhow::Result;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::args::{AuditArgs, BackfillArgs, ExpandArgs, StatusArgs};
use super::html;
use super::outcome::Outcome;
use super::values::Format;
use crate::db::Dsn;
use crate::mapping::Mapping;
use crate::render::{json, text};
use crate::stages::parallel::Jobs;
use crate::stages::{audit, backfill, expand, status};

/// What a stage run needs beyond its arguments: where progress goes, and the flag Ctrl-C or
/// SIGTERM sets ([`stop_on_signal`]).
#[derive(Clone)]
pub struct RunWith {
    /// The progress sink (the stage's `--quiet` still silences it).
    pub progress: crate::progress::Reporter,
    /// Set on Ctrl-C or SIGTERM: the backfill and the audit stop after the current batch.
    pub stop: Arc<AtomicBool>,
}

/// How a stage run on one database ended, with the figures a sharded run adds up.
#[derive(Debug, Clone)]
pub struct Ran {
    /// How it ended (its exit code: [`Outcome::code`]).
    pub outcome: Outcome,
    /// Named counts (`drifting rows`, `written`…), in the order they are printed; summed
    /// over the shards by name.
    pub totals: Vec<(String, u64)>,
}

/// A backfill's figures ([`Ran::totals`]).
fn backfill_ran(outcome: Outcome, s: &backfill::BackfillSummary) -> Ran {
    let totals = [
        ("members", s.members),
        ("batches", s.batches),
        ("written", s.written),
        ("advanced", s.advanced),
        ("unchanged", s.unchanged),
        ("no evidence", s.no_evidence),
    ];
    Ran {
        outcome,
        totals: totals.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
    }
}

/// An audit's figures ([`Ran::totals`]): rows checked, drifting rows, then each class with rows.
fn audit_ran(outcome: Outcome, s: &audit::AuditSummary) -> Ran {
    let mut totals = vec![
        ("rows checked".to_string(), s.rows_checked),
        ("drifting rows".to_string(), s.drifting_rows),
    ];
    totals.extend(
        s.by_class
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(class, n)| (format!("class {class}"), *n)),
    );
    Ran { outcome, totals }
}

/// `tidemark expand`: applies (or with `--dry-run` prints) the pending migrations.
pub async fn expand(
    dsn: &Dsn,
    mapping: &Mapping,
    args: &ExpandArgs,
    out: &mut (dyn Write + Send),
) -> Result<Ran> {
    let mut conn = dsn.connect().await?;
    let report = expand::run(&mut conn, mapping, dsn.dialect, args.dry_run).await?;
    text::expand(out, &report, dsn)?;
    Ok(Ran {
        outcome: Outcome::Done,
        totals: vec![("migrations applied".into(), report.pending.len() as u64)],
    })
}

/// `tidemark backfill`: fills the watermarks, stopping early (exit 4) on a signal.
pub async fn backfill(
    dsn: &Dsn,
    mapping: &Mapping,
    args: &BackfillArgs,
    with: &RunWith,
    out: &mut (dyn Write + Send),
) -> Result<Ran> {
    let mut conn = dsn.connect().await?;
    let opts = backfill::BackfillOptions {
        batch_size: args.batch_size,
        chunk_time: args.chunk_time.into(),
        dry_run: args.dry_run,
        quiet: args.quiet,
        progress: with.progress.clone(),
        restart: args.restart,
        max_rows_per_second: args.max_rows_per_second,
        pause_between_batches: args.pause_between_batches.into(),
        pause_file: args.pause_file.clone(),
        lock_timeout: args.lock_timeout.into(),
        retries: args.retries,
        stop: Some(with.stop.clone()),
        count_changes: !args.skip_change_count,
        settle_time: args.settle_time.into(),
        accept_evidence_share: args.accept_evidence_share,
        audit_form: args.audit_form,
        jobs: Jobs::new(args.jobs, dsn),
    };
    let summary = backfill::run(&mut conn, mapping, dsn.dialect, &opts).await?;
    let statements = if args.dry_run {
        let (ctx, _) = stage_context(&mut conn, mapping, dsn).await?;
        backfill::statements_in(mapping, &ctx)?
    } else {
        Vec::new()
    };
    if args.format == Format::Json {
        json::backfill(out, &summary, args.dry_run, &statements)?;
        if summary.interrupted {
            return Ok(backfill_ran(Outcome::Incomplete, &summary));
        }
        return Ok(backfill_ran(Outcome::Done, &summary));
    }
    if args.dry_run {
        text::backfill_plan(out, dsn, args.batch_size, &statements)?;
    }
    text::backfill(out, &summary, args.dry_run)?;
    if summary.interrupted {
        text::backfill_interrupted(out, &summary)?;
        return Ok(backfill_ran(Outcome::Incomplete, &summary));
    }
    Ok(backfill_ran(Outcome::Done, &summary))
}

/// `tidemark audit`: recomputes and compares; exit 1 above tolerance, 4 when incomplete.
pub async fn audit(
    dsn: &Dsn,
    mapping: &Mapping,
    args: &AuditArgs,
    with: &RunWith,
    out: &mut (dyn Write + Send),
) -> Result<Ran> {
    let mut conn = dsn.connect().await?;
    if args.read_database.is_some() && args.jobs > 1 {
        // The workers of --jobs connect to --database; a replica's reads run on one connection.
        return Err(crate::error::input_error(format!(
            "--jobs {} cannot be used with --read-database: the replica's reads run on one \
             connection (leave out --jobs, or audit on the primary with --jobs)",
            args.jobs
        )));
    }
    let (mut replica_conn, replica) = match &args.read_database {
        Some(url) => {
            let read_dsn = Dsn::parse(url)
                .map_err(|e| e.context("--read-database"))?
                .with_time_zone(args.common.time_zone.clone());
            let limit = args.max_replica_lag.into();
            let (c, lag) = crate::db::replica::open(&mut conn, dsn, &read_dsn, limit).await?;
            (Some(c), Some(lag))
        }
        None => (None, None),
    };
    let (scope, scope_description) = audit_scope(args, &mut conn, mapping, dsn).await?;
    let quiet = args.quiet || args.format == Format::Json;
    let opts = audit::AuditOptions {
        cap: args.cap,
        report: args.report.clone(),
        report_mode: args.report_mode,
        spreadsheet_safe: args.spreadsheet_safe,
        batch_size: args.batch_size,
        ledger: !args.no_ledger,
        max_drift_rows: args.max_drift_rows.unwrap_or(0),
        max_drift_ratio: args.max_drift_ratio.unwrap_or(0.0),
        max_abs_drift: args.max_abs_drift.unwrap_or(0),
        checked: crate::ledger::records::Checked::given(
            args.max_drift_rows.is_some(),
            args.max_drift_ratio.is_some(),
            args.max_abs_drift.is_some(),
        ),
        allow_empty: args.allow_empty,
        quiet,
        progress: with.progress.clone(),
        run_time: args.run_time.map(Into::into),
        resume: args.resume,
        metrics_file: args.metrics_file.clone(),
        store_rows: args.store_rows,
        scope,
        scope_description,
        lock_timeout: args.lock_timeout.into(),
        min_age: args.min_age.map(Into::into),
        stop: Some(with.stop.clone()),
        pause_between_batches: args.pause_between_batches.into(),
        pause_file: args.pause_file.clone(),
        form: args.audit_form,
        replica,
        jobs: Jobs::new(args.jobs, dsn),
    };
    if let Some(path) = &args.html {
        // Before the audit's work: a folder that does not exist is named now, not after it.
        crate::report::check_destination(path)?;
    }
    let conns = crate::db::replica::Connections::reading_on(&mut conn, replica_conn.as_mut());
    let outcome = audit::run_reading(conns, mapping, dsn.dialect, &opts).await?;
    match args.format {
        Format::Json => json::audit(out, &outcome.summary)?,
        Format::Text => text::audit(out, &outcome.summary)?,
    }
    if let Some(path) = &args.html {
        let s = &outcome.summary;
        html::audit_page(path, &mut conn, mapping, dsn, (s.ledger_id, s), quiet).await?;
    }
    let ended = if !outcome.summary.passed {
        Outcome::DriftAboveTolerance
    } else if !outcome.summary.complete {
        Outcome::Incomplete
    } else {
        Outcome::Done
    };
    Ok(audit_ran(ended, &outcome.summary))
}

/// `tidemark status`: migrations, watermarks, the last audits and the gate. Reads only.
pub async fn status(
    dsn: &Dsn,
    mapping: &Mapping,
    args: &StatusArgs,
    out: &mut (dyn Write + Send),
) -> Result<Ran> {
    if let Some(path) = &args.html {
        crate::report::check_destination(path)?;
    }
    let mut conn = dsn.connect().await?;
    let s = status::run(&mut conn, mapping, dsn.dialect).await?;
    match args.read.format {
        Format::Json => json::status(out, &s, dsn, mapping)?,
        Format::Text => text::status(out, &s, dsn, mapping)?,
    }
    if let Some(path) = &args.html {
        let quiet = args.read.quiet || args.read.format == Format::Json;
        html::status_page(path, &s, mapping, dsn, quiet)?;
    }
    Ok(Ran {
        outcome: Outcome::Done,
        totals: Vec::new(),
    })
}

/// A flag set on Ctrl-C or SIGTERM (systemd, kill), for the stages that then finish the
/// current batch, record it and stop (`backfill`, `audit`: exit 4).
pub fn stop_on_signal() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    tokio::spawn(async move {
        let name = stop_signal().await;
        eprintln!("\ntidemark: {name}: finishing the current batch, then stopping");
        flag.store(true, Ordering::SeqCst);
    });
    stop
}

/// Waits for Ctrl-C or SIGTERM and names which came.
async fn stop_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            return tokio::select! {
                _ = tokio::signal::ctrl_c() => "Ctrl-C",
                _ = term.recv() => "SIGTERM",
            };
        }
    }
    let _ = tokio::signal::ctrl_c().await;
    "Ctrl-C"
}

/// The audit's scope from `--conversations` and `--sample`, with its description.
async fn audit_scope(
    args: &AuditArgs,
    conn: &mut sqlx::AnyConnection,
    mapping: &Mapping,
    dsn: &Dsn,
) -> Result<(crate::stages::Scope, Vec<String>)> {
    use crate::stages::{Key, Scope};
    let mut scope = Scope::default();
    let mut description = Vec::new();
    if args.conversations.is_none() && args.sample.is_none() {
        return Ok((scope, description));
    }
    let ctx = crate::dialect::SqlContext::new(mapping, dsn.dialect);
    let (_, conv) = crate::schema::watermark_key_types(conn, mapping, &ctx).await?;
    let uuid_keys = crate::schema::KeyFamily::of(dsn.dialect, &conv.ddl)
        == Some(crate::schema::KeyFamily::Uuid);
    if let Some(range) = &args.conversations {
        let (from, to) = range.split_once("..").ok_or_else(|| {
            crate::error::input_error(format!(
                "--conversations {range:?}: expected FROM..TO, e.g. 1..5000"
            ))
        })?;
        let key = |text: &str| -> Result<Option<Key>> {
            if text.is_empty() {
                return Ok(None);
            }
            Ok(Some(match conv.kind {
                crate::schema::KeyKind::Integer => Key::Int(text.parse().map_err(|_| {
                    crate::error::input_error(format!(
                        "--conversations {range:?}: {text:?} is not an integer (the conversation key is an integer column)"
                    ))
                })?),
                // A uuid key is compared as its lower-case hyphenated text (issue 29 row 14):
                // a bound in any of the uuid's spellings (upper case, braces, no hyphens)
                // becomes that text, and a bound that is no uuid is refused, not matched as
                // text against nothing.
                crate::schema::KeyKind::Text if uuid_keys => Key::Text(
                    uuid::Uuid::try_parse(text)
                        .map_err(|_| {
                            crate::error::input_error(format!(
                                "--conversations {range:?}: {text:?} is not a uuid (the conversation key is a uuid column)"
                            ))
                        })?
                        .hyphenated()
                        .to_string(),
                ),
                crate::schema::KeyKind::Text => Key::Text(text.to_string()),
            }))
        };
        scope.from = key(from)?;
        scope.to = key(to)?;
        // Text keys order by the database's collation, so only integer ranges are checked here.
        if let (Some(Key::Int(a)), Some(Key::Int(b))) = (&scope.from, &scope.to) {
            if a > b {
                return Err(crate::error::input_error(format!(
                    "--conversations {range:?}: FROM is after TO, so the range is empty"
                )));
            }
        }
        description.push(format!("conversations {range}"));
    }
    if let Some(percent) = args.sample {
        scope.sample_sql = Some(Scope::sample(dsn.dialect, conv.kind, percent)?);
        description.push(format!("sample {percent}% of conversations (by key)"));
    }
    Ok((scope, description))
}

/// The statements' context for this database: its key columns' collations read and applied
/// (issue 25: batches of keys where they differ), with the collations for the warnings.
///
/// Errors (exit 3): the catalog cannot be read.
pub async fn stage_context(
    conn: &mut sqlx::AnyConnection,
    mapping: &Mapping,
    dsn: &Dsn,
) -> Result<(crate::dialect::SqlContext, crate::schema::KeyCollations)> {
    let collations = crate::schema::KeyCollations::read(conn, mapping, dsn.dialect).await?;
    let ctx = collations.apply(
        crate::dialect::SqlContext::new(mapping, dsn.dialect),
        mapping,
    );
    Ok((ctx, collations))
}
