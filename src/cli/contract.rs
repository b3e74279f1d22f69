//! `tidemark contract`: its arguments, and the outcome printed for people. The stage
//! ([`crate::stages::contract`]) returns a typed outcome and never prints.

use anyhow::Result;
use std::path::PathBuf;
use std::time::Duration;

use crate::db::Dsn;
use crate::gate::{self, GateOptions, StatementUse};
use crate::mapping::Shape;
use crate::stages::contract::{
    check_options, run, ContractFailed, ContractOptions, ContractOutcome,
};
use crate::stages::now_ms;

/// `tidemark contract` options.
#[derive(Debug, Clone, clap::Args)]
pub struct ContractArgs {
    /// `--database` and `--mapping`.
    #[command(flatten)]
    pub common: super::Common,
    /// Archive the values and drop the counter. Without it: print the gate's verdict and the
    /// exact DDL, and change nothing.
    #[arg(long)]
    pub execute: bool,
    /// Consecutive passing audits of this mapping the gate needs.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
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
    /// Where the final audit writes its drift report (default: tidemark-contract-audit.csv,
    /// next to --archive when given).
    #[arg(long, value_name = "FILE")]
    pub audit_report: Option<PathBuf>,
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
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub lock_retries: usize,
    /// Counter rows (or messages) archived per transaction, whole conversations.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch_size: u64,
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
            drop_table: self.drop_table,
            force: self.force,
            reason: self.reason.clone(),
            lock_timeout: self.lock_timeout,
            lock_retries: self.lock_retries,
            batch_size: self.batch_size,
            quiet: self.quiet,
            before_ddl: None,
        }
    }
}

/// `tidemark contract`: connects, runs [`run`], prints the verdict (every reason), the exact
/// DDL and what was done, and returns the exit code (0 open / done / nothing to drop, 1 closed;
/// errors are returned for the caller to map to 2 or 3).
pub async fn run_cli(args: ContractArgs) -> Result<u8> {
    let (dsn, mapping) = args.common.resolve()?;
    let opts = args.options();
    check_options(&opts)?;
    let mut conn = dsn.connect().await?;
    let outcome = match run(&mut conn, &mapping, dsn.dialect, &opts).await {
        Ok(outcome) => outcome,
        Err(e) => {
            // A failure during --execute: what was found and done is still shown.
            if let Some(failed) = e.downcast_ref::<ContractFailed>() {
                print(&failed.outcome, &dsn, &opts);
            }
            return Err(e);
        }
    };
    print(&outcome, &dsn, &opts);
    Ok(outcome.exit_code)
}

/// Prints an outcome for people.
pub fn print(o: &ContractOutcome, dsn: &Dsn, opts: &ContractOptions) {
    println!(
        "contract on {dsn}: {} ({})",
        o.target.describe(),
        match o.target.shape {
            Shape::PerMember => "per_member",
            Shape::PerMessage => "per_message",
        }
    );
    if let Some(msg) = &o.nothing_to_drop {
        println!("  {msg}");
        return;
    }
    if let Some(v) = &o.verdict {
        if v.open {
            println!("  gate: OPEN");
        } else if o.forced.is_some() {
            println!("  gate: CLOSED, bypassed by --force");
        } else {
            println!("  gate: CLOSED");
        }
        if !v.relied_on.is_empty() {
            let ids: Vec<String> = v.relied_on.iter().map(|i| format!("#{i}")).collect();
            let newest = v.newest_clean.as_ref();
            println!(
                "  {}: {}{}",
                if v.open {
                    "clean audits relied on"
                } else {
                    "clean audits found"
                },
                ids.join(", "),
                newest
                    .map(|a| format!(
                        " (newest {} ago, tolerance {})",
                        gate::human_ms(now_ms() - a.started_ms),
                        a.tolerance.describe()
                    ))
                    .unwrap_or_default()
            );
        }
        println!("  statement statistics: {}", v.statements.describe());
        if let StatementUse::Used { statements, .. } = &v.statements {
            for s in statements.iter().take(10) {
                println!("    {} call(s): {}", s.calls, s.text);
            }
        }
        for r in &v.reasons {
            println!("  reason: {r}");
        }
        for n in &v.notes {
            println!("  note: {n}");
        }
    }
    for n in &o.notes {
        println!("  note: {n}");
    }
    if let Some(a) = &o.final_audit {
        println!(
            "  final audit{}: {} rows checked, {} drifting, {} (report {})",
            a.id.map(|i| format!(" #{i}")).unwrap_or_default(),
            a.rows_checked,
            a.drifting_rows,
            if a.passed { "PASS" } else { "FAIL" },
            a.report
        );
    }
    if let Some(a) = &o.archive {
        println!(
            "  archived {} row(s) into {} (contract run #{}, covered by audit {}): {} non-NULL, sum {}, sum of squares {}; verified",
            a.checksum.rows,
            a.table,
            a.contract_id,
            a.audit_id.map(|i| format!("#{i}")).unwrap_or_else(|| "-".into()),
            a.checksum.non_null,
            a.checksum.sum,
            a.checksum.sum_squares
        );
        if let (Some(csv), Some(sha)) = (&a.csv, &a.csv_sha256) {
            println!("  archive CSV: {csv} (sha256 {sha}); verified");
        }
    }
    if o.executed {
        println!("  ran:");
    } else {
        println!(
            "  DDL{}:",
            if opts.execute {
                " (not run)"
            } else {
                " it would run"
            }
        );
    }
    for line in &o.ddl {
        println!("    {line}");
    }
    if let Some(reason) = &o.forced {
        println!("  forced: {reason} (recorded in the ledger)");
    }
    if let Some(f) = &o.failure {
        println!("  failed: {}", f.message);
        if let Some(detail) = &f.detail {
            println!("  database detail: {detail}");
        }
    } else if o.executed {
        println!(
            "  done: {} dropped (ledger run #{})",
            o.target.describe(),
            o.ledger_id.unwrap_or_default()
        );
    } else if !opts.execute {
        let open = o.verdict.as_ref().is_some_and(|v| v.open);
        if open {
            println!("  dry run: nothing was changed; --execute archives the values and drops");
        } else if opts.force {
            println!(
                "  dry run: nothing was changed; with --execute, --force would bypass the gate"
            );
        } else {
            println!("  dry run: nothing was changed");
        }
    } else {
        println!("  refused: nothing was archived or dropped");
    }
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
