//! The command line: its arguments ([`args`]), the dispatch of each command to its stage, and
//! the printing of what the stage returned (through [`crate::render`]) on stdout, with progress
//! on stderr ([`progress`]). This module is the only one that knows about the terminal; the
//! exit code of an [`Outcome`] is chosen in `main.rs`.

use anyhow::Result;
use clap::CommandFactory;
use std::io::Write;

use crate::db::Dsn;
use crate::mapping::Mapping;
use crate::render::{json, text};
use crate::stages::{audit, backfill, expand};

pub mod args;
pub mod completions;
pub mod contract;
pub mod html;
pub mod inspect;
pub mod outcome;
pub mod progress;
pub mod shard_report;
pub mod shards;
pub mod sql;
pub mod stage_runs;
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

/// What a stage run on one database gets: progress on stderr (none when `quiet`), and the
/// flag Ctrl-C or SIGTERM sets.
fn one_database(quiet: bool) -> stage_runs::RunWith {
    stage_runs::RunWith {
        progress: reporter(quiet),
        stop: stage_runs::stop_on_signal(),
    }
}

/// Runs a parsed command line and returns how it ended: each command to its own function.
pub async fn run(cli: Cli) -> Result<Outcome> {
    let mut stdout = std::io::stdout();
    let out: &mut (dyn Write + Send) = &mut stdout;
    match cli.command {
        Command::Demo(args) => run_demo(args, out).await,
        Command::Expand(args) => {
            let (shards, mapping) = args.common.resolve_all()?;
            if shards.len() > 1 {
                return shards::expand(shards, mapping, args).await;
            }
            let ran = stage_runs::expand(&shards[0].dsn, &mapping, &args, out).await?;
            Ok(ran.outcome)
        }
        Command::Backfill(args) => {
            let (shards, mapping) = args.common.resolve_all()?;
            if shards.len() > 1 {
                return shards::backfill(shards, mapping, args).await;
            }
            let with = one_database(args.quiet);
            let ran = stage_runs::backfill(&shards[0].dsn, &mapping, &args, &with, out).await?;
            Ok(ran.outcome)
        }
        Command::Audit(args) => {
            let (shards, mapping) = args.common.resolve_all()?;
            if shards.len() > 1 {
                if args.read_database.is_some() {
                    return Err(crate::error::input_error(
                        "--read-database names one replica: it cannot serve several databases \
                         (run the audit once per shard, each with its own replica)",
                    ));
                }
                return shards::audit(shards, mapping, args).await;
            }
            let with = one_database(args.quiet || args.format == Format::Json);
            let ran = stage_runs::audit(&shards[0].dsn, &mapping, &args, &with, out).await?;
            Ok(ran.outcome)
        }
        Command::Status(args) => {
            let (shards, mapping) = args.read.common.resolve_all()?;
            if shards.len() > 1 {
                return shards::status(shards, mapping, args).await;
            }
            let ran = stage_runs::status(&shards[0].dsn, &mapping, &args, out).await?;
            Ok(ran.outcome)
        }
        Command::Contract(args) => {
            let (shards, mapping) = args.common.resolve_all()?;
            if shards.len() > 1 {
                return shards::contract(shards, mapping, args).await;
            }
            contract::run_cli(args).await
        }
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

/// Prints every statement of every stage (`tidemark plan`). Reads the schema; writes nothing.
async fn plan(
    out: &mut dyn Write,
    conn: &mut sqlx::AnyConnection,
    mapping: &Mapping,
    dsn: &Dsn,
) -> Result<()> {
    let indexes = crate::inspect::indexes::check(conn, dsn.dialect, mapping).await?;
    let (ctx, collations) = stage_runs::stage_context(conn, mapping, dsn).await?;
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
    let audit_sql = audit_statements(mapping, &collations, dsn)?;
    let audit_sql: Vec<(&str, String)> = audit_sql
        .iter()
        .map(|(w, s)| (w.as_str(), s.clone()))
        .collect();
    text::plan_statements(out, &format!("3. audit: {per_batch}"), &audit_sql)?;
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
    let (ctx, collations) = stage_runs::stage_context(conn, mapping, dsn).await?;
    let per_batch = batches_run(&ctx);
    let audit_sql = audit_statements(mapping, &collations, dsn)?;
    let audit_sql: Vec<(&str, String)> = audit_sql
        .iter()
        .map(|(w, s)| (w.as_str(), s.clone()))
        .collect();
    // Issue 32: what the backfill checks before its first batch, as the text plan shows it.
    let shares = crate::schema::evidence_share::measure(conn, mapping, &ctx).await?;
    let mut stages = vec![
        json::plan_expand(&report),
        json::PlanStageJson::new(
            "backfill",
            per_batch,
            &backfill::statements_in(mapping, &ctx)?,
        ),
        json::PlanStageJson::new("audit", per_batch, &audit_sql),
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
    json::plan(
        out,
        dsn,
        mapping,
        &indexes,
        stages,
        &shares,
        &collations.notices(),
    )?;
    Ok(())
}

/// The audit's statements for every counter of the mapping (issue 32), each counter's view
/// under this database's key collations, as the audit runs them.
fn audit_statements(
    mapping: &Mapping,
    collations: &crate::schema::KeyCollations,
    dsn: &Dsn,
) -> Result<Vec<(String, String)>> {
    audit::statements_every_counter(
        mapping,
        |view| collations.apply(crate::dialect::SqlContext::new(view, dsn.dialect), view),
        None,
    )
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
