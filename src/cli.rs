//! The command line (clap derive): every command, its options, and how each outcome is printed
//! and turned into an exit code (`shared/spec/interface.md`).

use anyhow::Result;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

pub mod contract;
pub mod inspect;

use crate::db::Dsn;
use crate::error::{EXIT_INCOMPLETE, EXIT_OK};
use crate::mapping::Mapping;
use crate::stages::{audit, backfill, expand, status};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Move a live chat database from unread counters to read watermarks, in stages:
/// expand, backfill, audit (and later contract).
#[derive(Debug, Parser)]
#[command(name = "tidemark", version, about, long_about = None)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Build a legacy chat database with the faults of the seed articles injected (SQLite in
    /// the current folder, or --database URL) and run the whole staged migration on it.
    Demo(DemoArgs),
    /// Read the schema and propose a mapping file, with a comment on each choice and each
    /// alternative seen; warn about missing indexes and position hazards. Writes nothing to the
    /// database. Exit 1 when no complete mapping can be proposed.
    Inspect(inspect::InspectArgs),
    /// Print every statement each stage would run for this mapping and dialect. Writes
    /// nothing.
    Plan(Common),
    /// Apply the versioned migrations: the watermark table and tidemark's ledger (DDL only).
    Expand(ExpandArgs),
    /// Fill each member's last_read_id from the best evidence, in batches, forward-only.
    Backfill(BackfillArgs),
    /// Recompute unread from watermarks, compare with the stored counters, write the CSV
    /// drift report. Exit 1 when drift is above tolerance.
    Audit(AuditArgs),
    /// Show applied migrations, watermarks, the last audits and whether the contract gate
    /// would open. Reads only.
    Status(Common),
    /// The gated drop of the counter: prints the gate's verdict and the exact DDL; changes
    /// nothing without --execute. Exit 1 when the gate is closed.
    Contract(contract::ContractArgs),
}

/// Options every database command takes.
#[derive(Debug, Args, Clone)]
pub struct Common {
    /// Database URL: postgres://, mysql:// / mariadb://, or sqlite:PATH.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, value_name = "URL")]
    pub database: Option<String>,
    /// The mapping file.
    #[arg(long, default_value = "tidemark.toml", value_name = "FILE")]
    pub mapping: PathBuf,
}

/// `demo` options.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Where to create the demo SQLite database (recreated on every run).
    #[arg(long, default_value = "tidemark-demo.db", value_name = "FILE")]
    pub path: PathBuf,
    /// Run on this PostgreSQL or MariaDB database instead: it must be empty, or a demo's
    /// (DATABASE_URL is deliberately not read here).
    #[arg(long, value_name = "URL")]
    pub database: Option<String>,
    /// Members to generate (about 3 messages each).
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub scale: u64,
    /// Generator seed: the same seed builds the same database.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// No progress bars.
    #[arg(long, short)]
    pub quiet: bool,
}

/// `expand` options.
#[derive(Debug, Args)]
pub struct ExpandArgs {
    #[command(flatten)]
    pub common: Common,
    /// Print the DDL of the pending migrations and change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// `backfill` options.
#[derive(Debug, Args)]
pub struct BackfillArgs {
    #[command(flatten)]
    pub common: Common,
    /// Most members per batch (whole conversations; a batch never splits one).
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch_size: u64,
    /// Time target per batch: the size follows the last batches' timings, up to --batch-size
    /// ("0s" keeps --batch-size fixed).
    #[arg(long, default_value = "500ms", value_name = "DURATION")]
    pub chunk_time: humantime::Duration,
    /// Compute what would be written, print the statements, and write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Start over instead of continuing an unfinished run.
    #[arg(long)]
    pub restart: bool,
    /// Throttle: at most this many members per second.
    #[arg(long, value_name = "N")]
    pub max_rows_per_second: Option<f64>,
    /// Throttle: pause after every batch.
    #[arg(long, default_value = "0s", value_name = "DURATION")]
    pub pause_between_batches: humantime::Duration,
    /// Throttle: wait while this file exists.
    #[arg(long, value_name = "PATH")]
    pub pause_file: Option<PathBuf>,
    /// Longest lock wait per statement (lock_timeout, innodb_lock_wait_timeout, busy_timeout).
    #[arg(long, default_value = "2s", value_name = "DURATION")]
    pub lock_timeout: humantime::Duration,
    /// Retries of a batch that hit a lock wait, with exponential backoff and jitter.
    #[arg(long, default_value_t = 5)]
    pub retries: usize,
    /// Skip counting the members whose unread number will change once the counters are gone
    /// (it runs the audit's statement after each batch: about one audit's time in all).
    #[arg(long)]
    pub skip_change_count: bool,
    /// No progress output.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Output format of `audit`.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Format {
    /// A summary for people.
    Text,
    /// The summary as one JSON object on stdout.
    Json,
}

/// `audit` options.
#[derive(Debug, Args)]
pub struct AuditArgs {
    #[command(flatten)]
    pub common: Common,
    /// Where to write the CSV drift report.
    #[arg(long, default_value = "tidemark-drift.csv", value_name = "FILE")]
    pub report: PathBuf,
    /// Compare counts as "N+": counting stops at N+1 and both sides are clamped to N+1.
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = clap::value_parser!(i64).range(0..))]
    pub cap: Option<i64>,
    /// Rows per batch (counter rows, or messages for per_message).
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch_size: u64,
    /// Tolerance: drifting rows allowed. With no tolerance option any drifting row fails;
    /// once any is given, only the limits given are checked.
    #[arg(long, value_name = "N")]
    pub max_drift_rows: Option<u64>,
    /// Tolerance: drifting rows / rows checked allowed (0 to 1).
    #[arg(long, value_name = "R", value_parser = parse_ratio)]
    pub max_drift_ratio: Option<f64>,
    /// Tolerance: largest |drift| allowed.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i64).range(0..))]
    pub max_abs_drift: Option<i64>,
    /// Accept an audit whose scope checks no row (without it: exit 2).
    #[arg(long)]
    pub allow_empty: bool,
    /// Write nothing to the database (runs with SELECT privileges only).
    #[arg(long)]
    pub no_ledger: bool,
    /// Stop after the batch that crosses this much time (e.g. "20m"): exit 4, and `--resume`
    /// continues the same run.
    #[arg(long, value_name = "DURATION")]
    pub run_time: Option<humantime::Duration>,
    /// Continue the newest incomplete audit (same options) where it stopped.
    #[arg(long)]
    pub resume: bool,
    /// Also write the summary as a Prometheus text file (node_exporter textfile collector).
    #[arg(long, value_name = "PATH")]
    pub metrics_file: Option<PathBuf>,
    /// Also keep every drifting row in the ledger table tidemark_drift_rows.
    #[arg(long)]
    pub store_rows: bool,
    /// Audit only conversations FROM..TO (inclusive, by conversation key).
    #[arg(long, value_name = "FROM..TO")]
    pub conversations: Option<String>,
    /// Audit a deterministic sample of this percentage of the conversations (by key).
    #[arg(long, value_name = "PERCENT")]
    pub sample: Option<f64>,
    /// Longest lock wait per statement.
    #[arg(long, default_value = "2s", value_name = "DURATION")]
    pub lock_timeout: humantime::Duration,
    /// Leave out conversations whose newest message is younger than this (e.g. "5m"): writes
    /// still in flight are not drift. Needs messages.created_at.
    #[arg(long, value_name = "DURATION")]
    pub min_age: Option<humantime::Duration>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// No progress output.
    #[arg(long, short)]
    pub quiet: bool,
}

fn parse_ratio(s: &str) -> Result<f64, String> {
    let r: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if (0.0..=1.0).contains(&r) {
        Ok(r)
    } else {
        Err(format!("{r} is outside 0..=1"))
    }
}

impl Common {
    /// The DSN and the mapping, in that order of checks (both are bad input when wrong).
    pub fn resolve(&self) -> Result<(Dsn, Mapping)> {
        let dsn = Dsn::parse(self.database.as_deref().unwrap_or_default())?;
        let mapping = Mapping::load(&self.mapping)?;
        Ok((dsn, mapping))
    }
}

/// Runs a parsed command line and returns the exit code.
pub async fn run(cli: Cli) -> Result<u8> {
    match cli.command {
        Command::Demo(args) => {
            crate::demo::run(&crate::demo::DemoOptions {
                path: args.path,
                database: args.database,
                scale: args.scale,
                seed: args.seed,
                quiet: args.quiet,
            })
            .await
        }
        Command::Expand(args) => {
            let (dsn, mapping) = args.common.resolve()?;
            let mut conn = dsn.connect().await?;
            let report = expand::run(&mut conn, &mapping, dsn.dialect, args.dry_run).await?;
            print_expand(&report, &dsn);
            Ok(EXIT_OK)
        }
        Command::Backfill(args) => {
            let (dsn, mapping) = args.common.resolve()?;
            let mut conn = dsn.connect().await?;
            let stop = Arc::new(AtomicBool::new(false));
            let flag = stop.clone();
            tokio::spawn(async move {
                // Ctrl-C, and SIGTERM (systemd, kill): finish the batch, record it, stop.
                let name = stop_signal().await;
                eprintln!("\ntidemark: {name}: finishing the current batch, then stopping");
                flag.store(true, Ordering::SeqCst);
            });
            let opts = backfill::BackfillOptions {
                batch_size: args.batch_size,
                chunk_time: args.chunk_time.into(),
                dry_run: args.dry_run,
                quiet: args.quiet,
                restart: args.restart,
                max_rows_per_second: args.max_rows_per_second,
                pause_between_batches: args.pause_between_batches.into(),
                pause_file: args.pause_file.clone(),
                lock_timeout: args.lock_timeout.into(),
                retries: args.retries,
                stop: Some(stop),
                count_changes: !args.skip_change_count,
            };
            let summary = backfill::run(&mut conn, &mapping, dsn.dialect, &opts).await?;
            if args.dry_run {
                println!("backfill plan on {dsn}: batches of whole conversations, at most {} members each", args.batch_size);
                for (what, sql) in backfill::statements(&mapping, dsn.dialect)? {
                    println!("  -- {what}\n{}", indent(&sql, "    "));
                }
            }
            print_backfill(&summary, args.dry_run);
            if summary.interrupted {
                println!(
                    "  interrupted after batch {}: the checkpoint is recorded; run the same command again to continue (--restart starts over)",
                    summary.batches
                );
                return Ok(EXIT_INCOMPLETE);
            }
            Ok(EXIT_OK)
        }
        Command::Audit(args) => {
            let (dsn, mapping) = args.common.resolve()?;
            let mut conn = dsn.connect().await?;
            let (scope, scope_description) = audit_scope(&args, &mut conn, &mapping, &dsn).await?;
            let opts = audit::AuditOptions {
                cap: args.cap,
                report: args.report.clone(),
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
                quiet: args.quiet || args.format == Format::Json,
                run_time: args.run_time.map(Into::into),
                resume: args.resume,
                metrics_file: args.metrics_file.clone(),
                store_rows: args.store_rows,
                scope,
                scope_description,
                lock_timeout: args.lock_timeout.into(),
                min_age: args.min_age.map(Into::into),
            };
            let outcome = audit::run(&mut conn, &mapping, dsn.dialect, &opts).await?;
            match args.format {
                Format::Json => println!("{}", serde_json::to_string_pretty(&outcome.summary)?),
                Format::Text => print_audit(&outcome.summary),
            }
            Ok(outcome.exit_code())
        }
        Command::Status(common) => {
            let (dsn, mapping) = common.resolve()?;
            let mut conn = dsn.connect().await?;
            let s = status::run(&mut conn, &mapping, dsn.dialect).await?;
            print_status(&s, &dsn, &mapping);
            Ok(EXIT_OK)
        }
        Command::Contract(args) => contract::run_cli(args).await,
        Command::Inspect(args) => inspect::run_cli(args).await,
        Command::Plan(common) => {
            let (dsn, mapping) = common.resolve()?;
            let mut conn = dsn.connect().await?;
            print_plan(&mut conn, &mapping, &dsn).await?;
            Ok(EXIT_OK)
        }
    }
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
async fn print_plan(conn: &mut sqlx::AnyConnection, mapping: &Mapping, dsn: &Dsn) -> Result<()> {
    println!(
        "plan for {dsn} (mapping {}, dialect {})",
        &mapping.fingerprint[..12],
        dsn.dialect.name()
    );
    println!("\n== 1. expand ==");
    let report = expand::run(conn, mapping, dsn.dialect, true).await?;
    print_expand(&report, dsn);
    println!("\n== 2. backfill: per batch of whole conversations (lo, hi] ==");
    for (what, sql) in backfill::statements(mapping, dsn.dialect)? {
        println!("  -- {what}\n{}", indent(&sql, "    "));
    }
    println!("\n== 3. audit: per batch of whole conversations (lo, hi] ==");
    for (what, sql) in audit::statements(mapping, dsn.dialect, None)? {
        println!("  -- {what}\n{}", indent(&sql, "    "));
    }
    println!("  -- with --cap N the counts stop at N+1: LIMIT 1 OFFSET N probes, see sql/common/macros.sql");
    println!("\n== 4. contract ==");
    let dry = crate::stages::contract::ContractOptions {
        quiet: true,
        ..Default::default()
    };
    match crate::stages::contract::run(conn, mapping, dsn.dialect, &dry).await {
        Ok(o) => match &o.nothing_to_drop {
            Some(why) => println!("  {why}"),
            None => {
                println!("  after the gate opens (archive, verify, then):");
                for line in &o.ddl {
                    println!("    {line}");
                }
            }
        },
        Err(e) => println!(
            "  (shown once expand has run: {})",
            crate::error::describe(&e)
        ),
    }
    println!("\nnothing was changed");
    Ok(())
}

/// Prints what expand did.
pub fn print_expand(r: &expand::ExpandReport, dsn: &Dsn) {
    println!("expand on {dsn}");
    for name in &r.already_applied {
        println!("  already applied: {name}");
    }
    if r.pending.is_empty() {
        println!("  nothing to apply: the schema is up to date");
        return;
    }
    for (name, sql) in &r.pending {
        if r.dry_run {
            println!("  would apply {name}:\n{}", indent(sql, "    "));
        } else {
            println!("  applied {name}");
        }
    }
    if r.dry_run {
        println!("  dry run: nothing was changed");
    }
}

/// Prints a backfill summary.
pub fn print_backfill(s: &backfill::BackfillSummary, dry_run: bool) {
    let verb = if dry_run { "would write" } else { "wrote" };
    println!(
        "backfill: {} members in {} batches; {verb} {} watermarks ({} new, {} advanced, {} already at or past the evidence)",
        s.members,
        s.batches,
        s.written + s.advanced + s.unchanged,
        s.written,
        s.advanced,
        s.unchanged
    );
    for (source, n) in &s.by_source {
        println!("  from {source:<12} {n}");
    }
    if s.kept_over_counter > 0 {
        println!(
            "  kept {} existing watermarks whose only evidence was the counter (a counter never advances a watermark that exists)",
            s.kept_over_counter
        );
    }
    if s.no_evidence > 0 {
        println!(
            "  no evidence for {} members: no watermark written (unread counts everything)",
            s.no_evidence
        );
    }
    if s.left_without_evidence > 0 {
        println!(
            "  {} members who left have no read position (position or timestamp evidence): none written, none owed",
            s.left_without_evidence
        );
    }
    if !dry_run && s.counted_changes {
        println!(
            "  {} counters differ from the unread recomputed from the watermarks: those members will see another unread number once the counters are gone (`tidemark audit` classifies them)",
            s.unread_changes
        );
    }
    if s.unrepresentable_counters > 0 {
        println!(
            "  {} counters no watermark can represent (negative, or more than the countable messages): the audit reports them",
            s.unrepresentable_counters
        );
    }
    if dry_run {
        println!("  dry run: nothing was written");
    }
}

/// Prints an audit summary for people.
pub fn print_audit(s: &audit::AuditSummary) {
    let cap = s
        .cap
        .map(|c| format!(", capped at {c}+"))
        .unwrap_or_default();
    println!(
        "audit ({}{cap}): {} rows checked, {} drifting; sum |drift| {}, largest |drift| {}",
        s.shape, s.rows_checked, s.drifting_rows, s.sum_abs_drift, s.max_abs_drift
    );
    if s.drifting_rows > 0 {
        println!(
            "  {:<22} {:>8}  examples (conversation/subject: stored -> recomputed)",
            "class", "rows"
        );
        for class in crate::drift::DriftClass::ALL {
            let n = s.by_class.get(class.as_str()).copied().unwrap_or(0);
            if n == 0 {
                continue;
            }
            let examples = s
                .examples
                .get(class.as_str())
                .map(|ex| {
                    ex.iter()
                        .map(|e| {
                            format!(
                                "{}/{}: {} -> {}",
                                e.conversation,
                                e.subject,
                                e.stored
                                    .map(|v| v.to_string())
                                    .unwrap_or_else(|| "NULL".into()),
                                e.recomputed
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("; ")
                })
                .unwrap_or_default();
            println!("  {:<22} {:>8}  {examples}", class.as_str(), n);
        }
    }
    if !s.scope.is_empty() {
        println!("  scope: {}", s.scope.join("; "));
    }
    if s.left_out_recent > 0 {
        println!(
            "  left out {} conversations whose newest message is younger than --min-age",
            s.left_out_recent
        );
    }
    if s.parts > 1 {
        println!("  this run took {} parts (--resume)", s.parts);
    }
    if !s.complete {
        println!(
            "  INCOMPLETE: stopped at --run-time after conversation {}; run the same command with --resume to continue",
            s.checkpoint.as_ref().map(|k| k.to_string()).unwrap_or_default()
        );
        println!("  rows so far are kept in {}.partial", s.report);
    } else {
        println!("  report: {} (sha256 {})", s.report, s.report_sha256);
    }
    if s.passed {
        println!("  PASS: drift within tolerance");
    } else {
        for c in &s.crossed {
            println!("  FAIL: {c}");
        }
    }
}

/// Prints `status`.
pub fn print_status(s: &status::Status, dsn: &Dsn, mapping: &Mapping) {
    println!("status of {dsn} (mapping {})", &mapping.fingerprint[..12]);
    if s.migrations.is_empty() {
        println!("  expand:    not run (no migrations applied)");
    } else {
        println!("  expand:    applied {}", s.migrations.join(", "));
    }
    match s.watermarks {
        Some(n) => println!("  watermarks: {n} rows in {}", mapping.watermarks.table),
        None => println!(
            "  watermarks: table {} does not exist",
            mapping.watermarks.table
        ),
    }
    match &s.last_backfill {
        Some(b) if b.status == "running" && !s.backfill_alive => println!(
            "  backfill:  run #{} stopped unfinished (started {}; its process is gone): run backfill again to resume it",
            b.id,
            when(b.started_ms)
        ),
        Some(b) => println!(
            "  backfill:  run #{} {} at {}",
            b.id,
            b.status,
            when(b.started_ms)
        ),
        None => println!("  backfill:  never run"),
    }
    if s.audits.is_empty() {
        println!("  audit:     never run");
        print_contract_state(s);
        return;
    }
    println!("  last audits:");
    println!(
        "    {:>5}  {:<20}  {:<10}  {:>10}  {:>9}  same mapping",
        "run", "started (UTC)", "result", "checked", "drifting"
    );
    let mut trend = Vec::new();
    for a in &s.audits {
        let summary: serde_json::Value = a
            .summary
            .as_deref()
            .and_then(|t| serde_json::from_str(t).ok())
            .unwrap_or_default();
        let result = match (a.status.as_str(), a.passed) {
            ("done", Some(1)) => "pass",
            ("done", Some(_)) => "fail",
            (other, _) => other,
        };
        let drifting = summary["drifting_rows"].as_u64();
        if a.status == "done" && a.fingerprint == mapping.fingerprint {
            if let Some(d) = drifting {
                trend.push(d);
            }
        }
        println!(
            "    {:>5}  {:<20}  {:<10}  {:>10}  {:>9}  {}",
            a.id,
            when(a.started_ms),
            result,
            summary["rows_checked"]
                .as_u64()
                .map(|v| v.to_string())
                .unwrap_or_default(),
            drifting.map(|v| v.to_string()).unwrap_or_default(),
            if a.fingerprint == mapping.fingerprint {
                "yes"
            } else {
                "no"
            }
        );
    }
    if trend.len() > 1 {
        trend.reverse();
        let direction = match trend.last().cmp(&trend.first()) {
            std::cmp::Ordering::Less => "falling",
            std::cmp::Ordering::Greater => "rising",
            std::cmp::Ordering::Equal => "flat",
        };
        let list: Vec<String> = trend.iter().map(u64::to_string).collect();
        println!(
            "  drifting rows, oldest to newest: {} ({direction})",
            list.join(" -> ")
        );
    }
    if let Some((newer, older, new, fixed)) = s.changes {
        println!("  since audit #{older}, audit #{newer} found {new} newly drifting rows and {fixed} fixed (--store-rows)");
    }
    print_contract_state(s);
}

fn print_contract_state(s: &status::Status) {
    match (&s.contract_done, &s.gate) {
        (Some(id), _) => println!("  contract:  done: the counter was dropped by run #{id}"),
        (None, Some(v)) if v.open => println!(
            "  contract:  the gate would open (default options), on audits {:?}: `tidemark contract` shows the DDL",
            v.relied_on
        ),
        (None, Some(v)) => {
            println!("  contract:  the gate is closed (default options):");
            for r in &v.reasons {
                println!("    - {r}");
            }
        }
        (None, None) => {}
    }
}

fn when(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_seconds(t)
        .to_string()
        .replace('T', " ")
        .trim_end_matches('Z')
        .to_string()
}

fn indent(text: &str, prefix: &str) -> String {
    text.lines()
        .map(|l| format!("{prefix}{l}"))
        .collect::<Vec<_>>()
        .join("\n")
}
