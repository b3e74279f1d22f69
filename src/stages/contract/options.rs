//! The options of a contract run, and which of them go together.

use anyhow::Result;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::input_error;
use crate::gate::GateOptions;

/// The final audit's report when `--audit-report` names none: beside the `--archive` CSV, or
/// in the working directory (issue 29, row 7).
pub const DEFAULT_AUDIT_REPORT: &str = "tidemark-contract-audit.csv";

/// A fault-injection point for tests: awaited after the archive is verified and before the
/// DDL's lock is taken. Only in builds with the `test-hooks` feature (the tests turn it on).
#[cfg(feature = "test-hooks")]
pub type Hook = std::sync::Arc<
    dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<()>> + Send>>
        + Send
        + Sync,
>;

/// Options of a contract run.
#[derive(Clone)]
pub struct ContractOptions {
    /// Archive and drop (false: verdict and DDL only, nothing changes).
    pub execute: bool,
    /// The gate's conditions.
    pub gate: GateOptions,
    /// `--archive FILE`: a CSV copy of the archived values.
    pub archive_csv: Option<PathBuf>,
    /// Where the final audit writes its report (None: [`DEFAULT_AUDIT_REPORT`] next to the
    /// archive CSV when there is one, else in the working directory).
    pub audit_report: Option<PathBuf>,
    /// `--report-mode`: the permission bits of the final audit's report and the archive CSV
    /// (None: those of the file each replaces, or 0600 for a new one).
    pub report_mode: Option<u32>,
    /// `--drop-table`.
    pub drop_table: bool,
    /// `--force`.
    pub force: bool,
    /// `--reason`.
    pub reason: Option<String>,
    /// Longest lock wait of the DDL, per attempt.
    pub lock_timeout: Duration,
    /// Further attempts after a lock wait.
    pub lock_retries: usize,
    /// Rows per archive transaction.
    pub batch_size: u64,
    /// No progress output (the final audit's).
    pub quiet: bool,
    /// Tests only: awaited between the verified archive and the DDL.
    #[cfg(feature = "test-hooks")]
    pub before_ddl: Option<Hook>,
}

impl Default for ContractOptions {
    fn default() -> Self {
        ContractOptions {
            execute: false,
            gate: GateOptions::default(),
            archive_csv: None,
            audit_report: None,
            report_mode: None,
            drop_table: false,
            force: false,
            reason: None,
            lock_timeout: Duration::from_secs(5),
            lock_retries: 3,
            batch_size: crate::stages::batch::DEFAULT_BATCH_SIZE,
            quiet: true,
            #[cfg(feature = "test-hooks")]
            before_ddl: None,
        }
    }
}

impl std::fmt::Debug for ContractOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContractOptions")
            .field("execute", &self.execute)
            .field("gate", &self.gate)
            .field("archive_csv", &self.archive_csv)
            .field("drop_table", &self.drop_table)
            .field("force", &self.force)
            .field("reason", &self.reason)
            .field("lock_timeout", &self.lock_timeout)
            .finish_non_exhaustive()
    }
}

/// Checks the options that go together (`--force` needs `--reason`, …). Errors: exit 2.
pub fn check_options(opts: &ContractOptions) -> Result<()> {
    let reason = opts.reason.as_deref().map(str::trim);
    if opts.force && reason.is_none_or(str::is_empty) {
        return Err(input_error(
            "--force needs --reason TEXT: the reason is recorded in the ledger",
        ));
    }
    if !opts.force && reason.is_some() {
        return Err(input_error("--reason is only for --force"));
    }
    if opts.gate.min_clean_audits == 0 {
        return Err(input_error("--min-clean-audits must be 1 or more"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn force_needs_reason() {
        let mut o = ContractOptions {
            force: true,
            ..Default::default()
        };
        assert_eq!(
            crate::error::kind(&check_options(&o).unwrap_err()),
            crate::error::ErrorKind::BadInput
        );
        o.reason = Some("  ".into());
        assert!(check_options(&o).is_err());
        o.reason = Some("counters are dead since release 4.2".into());
        assert!(check_options(&o).is_ok());
        o.force = false;
        assert!(check_options(&o).is_err());
    }
}
