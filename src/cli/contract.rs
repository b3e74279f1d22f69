//! `tidemark contract`: its arguments, and the outcome printed for people. The stage
//! ([`crate::stages::contract`]) returns a typed outcome and never prints.

use anyhow::Result;
use std::path::PathBuf;
use std::time::Duration;

use super::outcome::Outcome;
use super::values::{at_least, file_mode, Common, Format};
use crate::db::Dsn;
use crate::gate::GateOptions;
use crate::stages::batch::DEFAULT_BATCH_SIZE;
use crate::stages::contract::{
    check_options, run, ContractFailed, ContractOptions, ContractOutcome,
};

/// `tidemark contract` options.
#[derive(Debug, Clone, clap::Args)]
pub struct ContractArgs {
    /// `--database` and `--mapping`.
    #[command(flatten)]
    pub common: Common,
    /// Archive the values and drop the counter. Without it: print the gate's verdict and the
    /// exact DDL, and change nothing.
    #[arg(long)]
    pub execute: bool,
    /// Consecutive passing audits of this mapping the gate needs.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = at_least::<u32>(1))]
    pub min_clean_audits: u32,
    /// How old the newest of those audits may be.
    #[arg(long, default_value = "24h", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub max_audit_age: Duration,
    /// Count passing audits that ran with a tolerance above zero (or a --cap).
    #[arg(long)]
    pub accept_tolerance: bool,
    /// Open the gate only when the server's statement statistics (pg_stat_statements,
    /// performance_schema digests) show no statement still using the counter column.
    #[arg(long)]
    pub require_unused: bool,
    /// Also write the archived values to this CSV file (verified before any DDL runs).
    #[arg(long, value_name = "FILE")]
    pub archive: Option<PathBuf>,
    /// Where the final audit writes its drift report (default: tidemark-contract-audit.csv next
    /// to --archive when given, else in the working directory; the output and the ledger name
    /// it). Created 0600 through a new temporary file; a file there that belongs to another
    /// user is refused (exit 2).
    #[arg(long, value_name = "FILE")]
    pub audit_report: Option<PathBuf>,
    /// Permission bits (octal, e.g. 640) of the final audit's report and the --archive CSV.
    /// Default: a replaced file keeps its mode (and owner and group where permitted), a new
    /// one is 600.
    #[arg(long, value_name = "MODE", value_parser = file_mode)]
    pub report_mode: Option<u32>,
    /// Drop a counter table that holds nothing but the keys and the counter, instead of the
    /// column.
    #[arg(long)]
    pub drop_table: bool,
    /// Bypass a closed gate (needs --reason; recorded in the ledger).
    #[arg(long)]
    pub force: bool,
    /// Why the gate is bypassed (with --force).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// Longest wait for the table lock of the DDL, per attempt.
    #[arg(long, default_value = "5s", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub lock_timeout: Duration,
    /// Further attempts after a lock wait gave up, with a growing pause between them.
    #[arg(long, default_value_t = 3, value_name = "N", value_parser = at_least::<usize>(0))]
    pub lock_retries: usize,
    /// Counter rows (or messages) archived per transaction, whole conversations.
    #[arg(long, default_value_t = DEFAULT_BATCH_SIZE, value_parser = at_least::<u64>(1))]
    pub batch_size: u64,
    /// Output format (progress stays on stderr).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// No progress output.
    #[arg(long, short)]
    pub quiet: bool,
}

impl ContractArgs {
    /// The library options for these arguments.
    pub fn options(&self) -> ContractOptions {
        ContractOptions {
            execute: self.execute,
            gate: GateOptions {
                min_clean_audits: self.min_clean_audits,
                max_audit_age: self.max_audit_age,
                accept_tolerance: self.accept_tolerance,
                require_unused: self.require_unused,
            },
            archive_csv: self.archive.clone(),
            audit_report: self.audit_report.clone(),
            report_mode: self.report_mode,
            drop_table: self.drop_table,
            force: self.force,
            reason: self.reason.clone(),
            lock_timeout: self.lock_timeout,
            lock_retries: self.lock_retries,
            batch_size: self.batch_size,
            quiet: self.quiet,
            #[cfg(feature = "test-hooks")]
            before_ddl: None,
        }
    }
}

/// `tidemark contract` on one database: [`contract_on`], printed on stdout.
pub async fn run_cli(args: ContractArgs) -> Result<Outcome> {
    let (dsn, mapping) = args.common.resolve()?;
    let opts = args.options();
    check_options(&opts)?;
    let mut stdout = std::io::stdout();
    contract_on(&dsn, &mapping, &opts, args.format, &mut stdout).await
}

/// Connects, runs [`run`], writes the verdict (every reason), the exact DDL and what was done
/// to `out`, and returns how it ended (done: open, dropped or nothing to drop; the gate
/// closed); errors are returned, after a failed `--execute` has been written. A closed pipe
/// ends the output quietly.
pub async fn contract_on(
    dsn: &Dsn,
    mapping: &crate::mapping::Mapping,
    opts: &ContractOptions,
    format: Format,
    out: &mut (dyn std::io::Write + Send),
) -> Result<Outcome> {
    let mut conn = dsn.connect().await?;
    let outcome = match run(&mut conn, mapping, dsn.dialect, opts).await {
        Ok(outcome) => outcome,
        Err(e) => {
            // A failure during --execute: what was found and done is still shown.
            if let Some(failed) = e.downcast_ref::<ContractFailed>() {
                print(
                    &failed.outcome,
                    Outcome::of_error(&e),
                    dsn,
                    opts,
                    format,
                    out,
                );
            }
            return Err(e);
        }
    };
    let ended = if outcome.gate_closed() {
        Outcome::GateClosed
    } else {
        Outcome::Done
    };
    print(&outcome, ended, dsn, opts, format, out);
    Ok(ended)
}

/// Writes an outcome to `out`, for people ([`crate::render::text::contract`]) or scripts
/// ([`crate::render::json::contract`], with the exit code `ended` gives); a closed pipe ends
/// the output quietly.
pub fn print(
    o: &ContractOutcome,
    ended: Outcome,
    dsn: &Dsn,
    opts: &ContractOptions,
    format: Format,
    out: &mut dyn std::io::Write,
) {
    let _ = match format {
        Format::Text => crate::render::text::contract(out, o, dsn, opts),
        Format::Json => crate::render::json::contract(out, o, ended.code()),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_parse() {
        use clap::{CommandFactory, Parser};
        #[derive(clap::Parser)]
        struct Wrap {
            #[command(flatten)]
            args: ContractArgs,
        }
        Wrap::command().debug_assert();
        let w = Wrap::try_parse_from([
            "contract",
            "--max-audit-age",
            "36h",
            "--lock-timeout",
            "250ms",
        ])
        .unwrap();
        assert_eq!(w.args.max_audit_age, Duration::from_secs(36 * 3600));
        assert_eq!(w.args.lock_timeout, Duration::from_millis(250));
        assert_eq!(w.args.min_clean_audits, 1);
        assert!(!w.args.execute);
        let d = Wrap::try_parse_from(["contract"]).unwrap();
        assert_eq!(d.args.max_audit_age, Duration::from_secs(24 * 3600));
        assert_eq!(d.args.lock_timeout, Duration::from_secs(5));
        assert!(Wrap::try_parse_from(["contract", "--min-clean-audits", "0"]).is_err());
        assert!(Wrap::try_parse_from(["contract", "--max-audit-age", "soon"]).is_err());
    }
}
