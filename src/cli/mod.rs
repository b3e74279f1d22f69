//! The command line: its arguments ([`args`]), the dispatch of each command to its stage, and
//! the printing of what the stage returned (through [`crate::render`]) on stdout, with progress
//! on stderr ([`progress`]). This module is the only one that knows about the terminal; the
//! exit code of an [`Outcome`] is chosen in `main.rs`.

use anyhow::Result;
use clap::CommandFactory;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::db::Dsn;
use crate::mapping::Mapping;
use crate::render::{json, text};
use crate::stages::{audit, backfill, expand, status};

pub mod args;
pub mod completions;
pub mod contract;
pub mod html;
pub mod inspect;
pub mod outcome;
pub mod progress;
pub mod sql;
pub mod values;

pub use args::{AuditArgs, BackfillArgs, Cli, Command, DemoArgs, ExpandArgs, ReadArgs, StatusArgs};
pub use outcome::Outcome;
pub use values::{Common, Format};

/// The progress sink of a command: stderr, or none with `--quiet`.
fn reporter(quiet: bool) -> crate::progress::Reporter {
    if quiet {
        crate::progress::Reporter::none()
    } else {
        progress::Stderr::reporter()
    }
}

/// Runs a parsed command line and returns how it ended: each command to its own function.
pub async fn run(cli: Cli) -> Result<Outcome> {
    let mut stdout = std::io::stdout();
    let out: &mut dyn Write = &mut stdout;
    match cli.command {
        Command::Demo(args) => run_demo(args, out).await,
        Command::Expand(args) => run_expand(args, out).await,
        Command::Backfill(args) => run_backfill(args, out).await,
        Command::Audit(args) => run_audit(args, out).await,
        Command::Status(args) => run_status(args, out).await,
        Command::Contract(args) => contract::run_cli(args).await,
        Command::Inspect(args) => inspect::run_cli(args).await,
        Command::Plan(args) => run_plan(args, out).await,
        Command::Sql(args) => {
            sql::run(&args, out)?;
            Ok(Outcome::Done)
        }
        Command::Completions(args) => {
            completions::completions(args.shell, Cli::command(), out)?;
            Ok(Outcome::Done)
        }
        Command::Man(args) => {
            completions::man(&args, Cli::command(), out)?;
            Ok(Outcome::Done)
        }
    }
}

/// `tidemark demo`: builds the demo database and runs the whole migration on it.
async fn run_demo(args: DemoArgs, out: &mut dyn Write) -> Result<Outcome> {
    crate::demo::run(
        &crate::demo::DemoOptions {
            path: args.path,
            database: args.database,
            scale: args.scale,
            seed: args.seed,
            quiet: args.quiet,
            progress: reporter(args.quiet),
        },
        out,
    )
    .await?;
    Ok(Outcome::Done)
}

/// `tidemark expand`: applies (or with `--dry-run` prints) the pending migrations.
async fn run_expand(args: ExpandArgs, out: &mut dyn Write) -> Result<Outcome> {
    let (dsn, mapping) = args.common.resolve()?;
    let mut conn = dsn.connect().await?;
    let report = expand::run(&mut conn, &mapping, dsn.dialect, args.dry_run).await?;
    text::expand(out, &report, &dsn)?;
    Ok(Outcome::Done)
}

/// `tidemark backfill`: fills the watermarks, stopping early (exit 4) on a signal.
async fn run_backfill(args: BackfillArgs, out: &mut dyn Write) -> Result<Outcome> {
    let (dsn, mapping) = args.common.resolve()?;
    let mut conn = dsn.connect().await?;
    let stop = stop_on_signal();
    let opts = backfill::BackfillOptions {
        batch_size: args.batch_size,
        chunk_time: args.chunk_time.into(),
        dry_run: args.dry_run,
        quiet: args.quiet,
        progress: reporter(args.quiet),
        restart: args.restart,
        max_rows_per_second: args.max_rows_per_second,
        pause_between_batches: args.pause_between_batches.into(),
        pause_file: args.pause_file.clone(),
        lock_timeout: args.lock_timeout.into(),
        retries: args.retries,
        stop: Some(stop),
        count_changes: !args.skip_change_count,
        settle_time: args.settle_time.into(),
        accept_evidence_share: args.accept_evidence_share,
        audit_form: args.audit_form,
    };
    let summary = backfill::run(&mut conn, &mapping, dsn.dialect, &opts).await?;
    let statements = if args.dry_run {
        let (ctx, _) = stage_context(&mut conn, &mapping, &dsn).await?;
        backfill::statements_in(&mapping, &ctx)?
    } else {
        Vec::new()
    };
    if args.format == Format::Json {
        json::backfill(out, &summary, args.dry_run, &statements)?;
        if summary.interrupted {
            return Ok(Outcome::Incomplete);
        }
        return Ok(Outcome::Done);
    }
    if args.dry_run {
        text::backfill_plan(out, &dsn, args.batch_size, &statements)?;
    }
    text::backfill(out, &summary, args.dry_run)?;
    if summary.interrupted {
        text::backfill_interrupted(out, &summary)?;
        return Ok(Outcome::Incomplete);
    }
    Ok(Outcome::Done)
}

/// `tidemark audit`: recomputes and compares; exit 1 above tolerance, 4 when incomplete.
async fn run_audit(args: AuditArgs, out: &mut dyn Write) -> Result<Outcome> {
    let (dsn, mapping) = args.common.resolve()?;
    let mut conn = dsn.connect().await?;
    let (scope, scope_description) = audit_scope(&args, &mut conn, &mapping, &dsn).await?;
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
        progress: reporter(quiet),
        run_time: args.run_time.map(Into::into),
        resume: args.resume,
        metrics_file: args.metrics_file.clone(),
        store_rows: args.store_rows,
        scope,
        scope_description,
        lock_timeout: args.lock_timeout.into(),
        min_age: args.min_age.map(Into::into),
        stop: Some(stop_on_signal()),
        pause_between_batches: args.pause_between_batches.into(),
        pause_file: args.pause_file.clone(),
        form: args.audit_form,
    };
    if let Some(path) = &args.html {
        // Before the audit's work: a folder that does not exist is named now, not after it.
        crate::report::check_destination(path)?;
    }
    let outcome = audit::run(&mut conn, &mapping, dsn.dialect, &opts).await?;
    match args.format {
        Format::Json => json::audit(out, &outcome.summary)?,
        Format::Text => text::audit(out, &outcome.summary)?,
    }
    if let Some(path) = &args.html {
        let s = &outcome.summary;
        html::audit_page(path, &mut conn, &mapping, &dsn, (s.ledger_id, s), quiet).await?;
    }
    Ok(if !outcome.summary.passed {
        Outcome::DriftAboveTolerance
    } else if !outcome.summary.complete {
        Outcome::Incomplete
    } else {
        Outcome::Done
    })
}

/// `tidemark status`: migrations, watermarks, the last audits and the gate. Reads only.
async fn run_status(args: StatusArgs, out: &mut dyn Write) -> Result<Outcome> {
    let (dsn, mapping) = args.read.common.resolve()?;
    if let Some(path) = &args.html {
        crate::report::check_destination(path)?;
    }
    let mut conn = dsn.connect().await?;
    let s = status::run(&mut conn, &mapping, dsn.dialect).await?;
    match args.read.format {
        Format::Json => json::status(out, &s, &dsn, &mapping)?,
        Format::Text => text::status(out, &s, &dsn, &mapping)?,
    }
    if let Some(path) = &args.html {
        let quiet = args.read.quiet || args.read.format == Format::Json;
        html::status_page(path, &s, &mapping, &dsn, quiet)?;
    }
    Ok(Outcome::Done)
}

/// `tidemark plan`: every statement of every stage, as text or JSON. Writes nothing.
async fn run_plan(args: ReadArgs, out: &mut dyn Write) -> Result<Outcome> {
    let (dsn, mapping) = args.common.resolve()?;
    let mut conn = dsn.connect().await?;
    match args.format {
        Format::Json => plan_json(out, &mut conn, &mapping, &dsn).await?,
        Format::Text => plan(out, &mut conn, &mapping, &dsn).await?,
    }
    Ok(Outcome::Done)
}

/// A flag set on Ctrl-C or SIGTERM (systemd, kill), for the stages that then finish the
/// current batch, record it and stop (`backfill`, `audit`: exit 4).
fn stop_on_signal() -> Arc<AtomicBool> {
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

/// Prints every statement of every stage (`tidemark plan`). Reads the schema; writes nothing.
async fn plan(
    out: &mut dyn Write,
    conn: &mut sqlx::AnyConnection,
    mapping: &Mapping,
    dsn: &Dsn,
) -> Result<()> {
    let indexes = crate::inspect::indexes::check(conn, dsn.dialect, mapping).await?;
    let (ctx, collations) = stage_context(conn, mapping, dsn).await?;
    text::plan_header(out, dsn, mapping, &indexes, &collations.notices())?;
    let mut report = expand::run(conn, mapping, dsn.dialect, true).await?;
    // The header named the key columns' collations already.
    report.notices.clear();
    text::expand(out, &report, dsn)?;
    let per_batch = batches_run(&ctx);
    text::plan_statements(
        out,
        &format!("2. backfill: {per_batch}"),
        &backfill::statements_in(mapping, &ctx)?,
    )?;
    // Issue 24: what the backfill checks before its first batch, measured now.
    let shares = crate::schema::evidence_share::measure(conn, mapping, &ctx).await?;
    text::plan_evidence_shares(out, &shares)?;
    text::plan_statements(
        out,
        &format!("3. audit: {per_batch}"),
        &audit::statements_in(mapping, &ctx, None)?,
    )?;
    let dry = crate::stages::contract::ContractOptions {
        quiet: true,
        ..Default::default()
    };
    match crate::stages::contract::run(conn, mapping, dsn.dialect, &dry).await {
        Ok(o) => match &o.nothing_to_drop {
            Some(why) => text::plan_end(out, text::PlanContract::NothingToDrop(why))?,
            None => text::plan_end(out, text::PlanContract::Ddl(&o.ddl))?,
        },
        Err(e) => text::plan_end(out, text::PlanContract::NotYet(&crate::error::describe(&e)))?,
    }
    Ok(())
}

/// `tidemark plan --format json`: the same statements as [`plan`], as one object
/// ([`json::PlanJson`]).
async fn plan_json(
    out: &mut dyn Write,
    conn: &mut sqlx::AnyConnection,
    mapping: &Mapping,
    dsn: &Dsn,
) -> Result<()> {
    let report = expand::run(conn, mapping, dsn.dialect, true).await?;
    let (ctx, collations) = stage_context(conn, mapping, dsn).await?;
    let per_batch = batches_run(&ctx);
    let mut stages = vec![
        json::plan_expand(&report),
        json::PlanStageJson::new(
            "backfill",
            per_batch,
            &backfill::statements_in(mapping, &ctx)?,
        ),
        json::PlanStageJson::new(
            "audit",
            per_batch,
            &audit::statements_in(mapping, &ctx, None)?,
        ),
    ];
    let dry = crate::stages::contract::ContractOptions {
        quiet: true,
        ..Default::default()
    };
    let mut contract = json::PlanStageJson::new("contract", "once, after the gate opens", &[]);
    match crate::stages::contract::run(conn, mapping, dsn.dialect, &dry).await {
        Ok(o) => match &o.nothing_to_drop {
            Some(why) => contract.note = Some(why.clone()),
            None => {
                contract.statements = o
                    .ddl
                    .iter()
                    .map(|sql| json::StatementJson {
                        what: "contract DDL (after archive and verification)".into(),
                        sql: sql.clone(),
                    })
                    .collect()
            }
        },
        Err(e) => {
            contract.note = Some(format!(
                "shown once expand has run: {}",
                crate::error::describe(&e)
            ))
        }
    }
    stages.push(contract);
    let indexes = crate::inspect::indexes::check(conn, dsn.dialect, mapping).await?;
    json::plan(out, dsn, mapping, &indexes, stages, &collations.notices())?;
    Ok(())
}

/// The statements' context for this database: its key columns' collations read and applied
/// (issue 25: batches of keys where they differ), with the collations for the warnings.
///
/// Errors (exit 3): the catalog cannot be read.
async fn stage_context(
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

/// When a batch statement runs, as `plan` says it: per range of keys, or per list of keys
/// when the key columns' collations differ.
fn batches_run(ctx: &crate::dialect::SqlContext) -> &'static str {
    if ctx.keyed {
        "per batch of whole conversations, by their keys (the key columns' collations differ: each table is read by the list of the batch's conversations)"
    } else {
        "per batch of whole conversations (lo, hi]"
    }
}
