//! The command line's arguments (clap derive): every command and its options
//! (`shared/spec/interface.md`).

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

use super::completions::{CompletionsArgs, ManArgs};
use super::contract::ContractArgs;
use super::inspect::InspectArgs;
use super::sql::SqlArgs;
use super::values::{at_least, file_mode, parse_ratio, rate, Common, Format};
use crate::stages::audit::AuditForm;
use crate::stages::batch::DEFAULT_BATCH_SIZE;

/// Move a live chat database from unread counters to read watermarks, in stages:
/// expand, backfill, audit (and later contract).
#[derive(Debug, Parser)]
#[command(name = "tidemark", version, about, long_about = None)]
#[command(mut_subcommands = negative_numbers_reach_the_parser)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Build a legacy chat database whose counters drift by known faults (duplicate delivery, a
    /// clear racing a new message, a lost update, members who left still counted; SQLite in the
    /// current folder, or --database URL) and run the whole staged migration on it.
    Demo(DemoArgs),
    /// Read the schema and propose a mapping file, with a comment on each choice and each
    /// alternative seen; warn about missing indexes and position hazards. Writes nothing to the
    /// database. Exit 1 when no complete mapping can be proposed.
    Inspect(InspectArgs),
    /// Print every statement each stage would run for this mapping and dialect. Writes
    /// nothing.
    Plan(ReadArgs),
    /// Apply the versioned migrations: the watermark table and tidemark's ledger (DDL only).
    Expand(ExpandArgs),
    /// Fill each member's last_read_id from the best evidence, in batches, forward-only.
    Backfill(BackfillArgs),
    /// Recompute unread from watermarks, compare with the stored counters, write the CSV
    /// drift report. Exit 1 when drift is above tolerance.
    Audit(AuditArgs),
    /// Show applied migrations, watermarks, the last audits and whether the contract gate
    /// would open. Reads only.
    Status(StatusArgs),
    /// The gated drop of the counter: prints the gate's verdict and the exact DDL; changes
    /// nothing without --execute. Exit 1 when the gate is closed.
    Contract(ContractArgs),
    /// Print the statements the application should use during the dual-write period and
    /// after (forward-only mark-read, capped unread counts, per-conversation sequence), each
    /// with the bug it prevents. Reads nothing.
    Sql(SqlArgs),
    /// Print a shell completion script for tidemark on stdout.
    Completions(CompletionsArgs),
    /// Print tidemark's manual page (roff) on stdout, or write one page per command.
    Man(ManArgs),
}

/// Options of the commands that only read and report (`status`, `plan`).
#[derive(Debug, Args, Clone)]
pub struct ReadArgs {
    /// `--database` and `--mapping`.
    #[command(flatten)]
    pub common: Common,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// No progress output (these commands print none: accepted so that a script can pass -q
    /// to every command).
    #[arg(long, short)]
    pub quiet: bool,
}

/// `status` options.
#[derive(Debug, Args, Clone)]
pub struct StatusArgs {
    /// `--database`, `--mapping`, `--format` and `--quiet`.
    #[command(flatten)]
    pub read: ReadArgs,
    /// Also write an HTML page (one self-contained file: no script, nothing loaded from
    /// elsewhere) of the newest audit, the trend of drifting rows and the contract gate.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
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
    #[arg(long, default_value_t = 20_000, value_parser = at_least::<u64>(1))]
    pub scale: u64,
    /// Generator seed: the same seed builds the same database.
    #[arg(long, default_value_t = 42, value_parser = at_least::<u64>(0))]
    pub seed: u64,
    /// No progress bars.
    #[arg(long, short)]
    pub quiet: bool,
}

/// `expand` options.
#[derive(Debug, Args, Clone)]
pub struct ExpandArgs {
    #[command(flatten)]
    pub common: Common,
    /// Print the DDL of the pending migrations and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// No progress output (expand prints none: accepted so that a script can pass -q to every
    /// command).
    #[arg(long, short)]
    pub quiet: bool,
}

/// `backfill` options.
#[derive(Debug, Args, Clone)]
pub struct BackfillArgs {
    #[command(flatten)]
    pub common: Common,
    /// Most members per batch (whole conversations; a batch never splits one).
    #[arg(long, default_value_t = DEFAULT_BATCH_SIZE, value_parser = at_least::<u64>(1))]
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
    #[arg(long, value_name = "N", value_parser = rate)]
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
    #[arg(long, default_value_t = 5, value_parser = at_least::<usize>(0))]
    pub retries: usize,
    /// Leave for a later run each watermark derived from a counter, a timestamp, an own message
    /// or read flags that would newly cover a message younger than this (a position of a
    /// transaction not committed yet would be covered with it); needs messages.created_at;
    /// "0" is off.
    #[arg(long, default_value = "5m", value_name = "DURATION")]
    pub settle_time: humantime::Duration,
    /// Skip counting the members whose unread number will change once the counters are gone
    /// (it runs the audit's statement after each batch: about one audit's time in all).
    #[arg(long)]
    pub skip_change_count: bool,
    /// Batches at once, each on a connection of its own (N + 1 connections in all); the
    /// checkpoint only passes batches finished in key order. SQLite: 1 only.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = at_least::<usize>(1))]
    pub jobs: usize,
    /// Run even when an evidence entry's values fit the messages' position space in under
    /// 90 % of a sample (without it: exit 2 naming the entry and its share, before anything
    /// is written, the dry run included); with it the share is not measured.
    #[arg(long)]
    pub accept_evidence_share: bool,
    /// Form of the change count's statement: one pass over the messages, one index probe per
    /// member, or per batch the one that reads less (the same count either way).
    #[arg(long, value_enum, default_value_t = AuditForm::Auto, value_name = "FORM")]
    pub audit_form: AuditForm,
    /// Output format (progress stays on stderr).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// No progress output.
    #[arg(long, short)]
    pub quiet: bool,
}

/// `audit` options.
#[derive(Debug, Args, Clone)]
pub struct AuditArgs {
    #[command(flatten)]
    pub common: Common,
    /// Where to write the CSV drift report.
    #[arg(long, default_value = "tidemark-drift.csv", value_name = "FILE")]
    pub report: PathBuf,
    /// Permission bits of the report (octal, e.g. 640). Default: a replaced report keeps its
    /// mode (and owner and group where permitted), a new one is 600.
    #[arg(long, value_name = "MODE", value_parser = file_mode)]
    pub report_mode: Option<u32>,
    /// Escape key cells a spreadsheet would run as a formula (beginning with = + - @, a tab or
    /// a carriage return) with a leading '. Without it the keys are written exactly.
    #[arg(long)]
    pub spreadsheet_safe: bool,
    /// Compare counts as "N+": counting stops at N+1 and both sides are clamped to N+1.
    #[arg(long, value_name = "N", value_parser = at_least::<i64>(1))]
    pub cap: Option<i64>,
    /// Rows per batch (counter rows, or messages for per_message).
    #[arg(long, default_value_t = DEFAULT_BATCH_SIZE, value_parser = at_least::<u64>(1))]
    pub batch_size: u64,
    /// Tolerance: drifting rows allowed. With no tolerance option any drifting row fails;
    /// once any is given, only the limits given are checked.
    #[arg(long, value_name = "N", value_parser = at_least::<u64>(0))]
    pub max_drift_rows: Option<u64>,
    /// Tolerance: drifting rows / rows checked allowed (0 to 1).
    #[arg(long, value_name = "R", value_parser = parse_ratio)]
    pub max_drift_ratio: Option<f64>,
    /// Tolerance: largest |drift| allowed.
    #[arg(long, value_name = "N", value_parser = at_least::<i64>(0))]
    pub max_abs_drift: Option<i64>,
    /// Accept an audit whose scope checks no row (without it: exit 2).
    #[arg(long)]
    pub allow_empty: bool,
    /// Write nothing to the database (runs with SELECT privileges only).
    #[arg(long)]
    pub no_ledger: bool,
    /// Run the audit's reads on this streaming replica of --database (a postgres:// or
    /// mysql:// URL); the ledger, the runner lock and every write stay on the primary. A
    /// server that is not a replica of --database is refused (exit 2).
    #[arg(long, value_name = "URL")]
    pub read_database: Option<String>,
    /// Refuse (exit 3) a --read-database replica that has not replayed, within this long,
    /// what the primary had written when the audit started ("0s": it must be caught up).
    #[arg(
        long,
        default_value = "30s",
        value_name = "DURATION",
        requires = "read_database"
    )]
    pub max_replica_lag: humantime::Duration,
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
    /// Also write an HTML page (one self-contained file: no script, nothing loaded from
    /// elsewhere) of this audit, the trend of drifting rows over the ledger's audits and the
    /// contract gate.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Audit only conversations FROM..TO (inclusive, by conversation key).
    #[arg(long, value_name = "FROM..TO")]
    pub conversations: Option<String>,
    /// Audit a deterministic sample of this percentage of the conversations (by key).
    #[arg(long, value_name = "PERCENT")]
    pub sample: Option<f64>,
    /// Throttle: pause after every batch (the session kept alive meanwhile).
    #[arg(long, default_value = "0s", value_name = "DURATION")]
    pub pause_between_batches: humantime::Duration,
    /// Throttle: wait before the next batch while this file exists.
    #[arg(long, value_name = "PATH")]
    pub pause_file: Option<PathBuf>,
    /// Longest lock wait per statement.
    #[arg(long, default_value = "2s", value_name = "DURATION")]
    pub lock_timeout: humantime::Duration,
    /// Batches at once, each on a connection of its own (N + 1 connections in all); the
    /// report and the summary are those of --jobs 1, row for row. SQLite: 1 only.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = at_least::<usize>(1))]
    pub jobs: usize,
    /// Leave out conversations whose newest message is younger than this (e.g. "5m"): writes
    /// still in flight are not drift. Needs messages.created_at.
    #[arg(long, value_name = "DURATION")]
    pub min_age: Option<humantime::Duration>,
    /// Form of the audit statement: one pass over the messages, one index probe per member,
    /// or per batch the one that reads less (the same report either way).
    #[arg(long, value_enum, default_value_t = AuditForm::Auto, value_name = "FORM")]
    pub audit_form: AuditForm,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// No progress output.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Gives every option that takes a value, in every subcommand, its own value parser's say on a
/// negative number: without it clap reads `--batch-size -5` as an unknown argument `-5`
/// ("unexpected argument '-5' found") instead of a bad value of `--batch-size`.
fn negative_numbers_reach_the_parser(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|arg| {
        if arg.get_action().takes_values() && !arg.is_positional() {
            arg.allow_negative_numbers(true)
        } else {
            arg
        }
    })
    .mut_subcommands(negative_numbers_reach_the_parser)
}
