//! What a contract run found and did ([`ContractOutcome`]), and the error of a run that failed
//! during `--execute` ([`ContractFailed`]), which still carries it.

use serde::Serialize;

use super::archive::ArchiveSummary;
use super::target::Target;
use crate::gate::{self, Tolerance};

/// One target's archive, as verified.
#[derive(Debug, Clone, Serialize)]
pub struct TargetArchive {
    /// `table.column` archived.
    pub target: String,
    /// The checksum of the archived values, equal to the column's.
    pub checksum: super::archive::Checksum,
}

/// What a contract run found and did.
#[derive(Debug, Clone, Serialize)]
pub struct ContractOutcome {
    /// What is (or would be) dropped: the first target (for `drop = "nothing"`, the counter
    /// table without a column).
    pub target: Target,
    /// Every target, in the mapping's order (empty for `drop = "nothing"`).
    pub targets: Vec<Target>,
    /// With a `[contract]` section: the counter's value as the mapping gives it (an SQL
    /// expression, or `this.<column>`).
    pub value: Option<String>,
    /// With `--execute`: each target's verified archive.
    pub target_archives: Vec<TargetArchive>,
    /// Set when there is nothing left to do (the message says why: every target gone, or for
    /// `drop = "nothing"` the decision recorded by an earlier run); nothing else is, except
    /// [`ContractOutcome::recorded_drop_of`].
    pub nothing_to_drop: Option<String>,
    /// Set when this run recorded in the ledger the drop of an earlier run (its id) whose
    /// process ended after its last DDL committed, before it could record it (issue 25 row 8).
    pub recorded_drop_of: Option<i64>,
    /// The gate's verdict (None when there is nothing left to drop).
    pub verdict: Option<gate::Verdict>,
    /// The exact statements, as printed.
    pub ddl: Vec<String>,
    /// Remarks: what the DDL also removes, tolerance used, …
    pub notes: Vec<String>,
    /// Whether `--execute` ran to its end: every target still there dropped, or for
    /// `drop = "nothing"` the gate's decision recorded.
    pub executed: bool,
    /// What this run dropped (each target described), in order; empty for a dry run, a
    /// refusal and `drop = "nothing"`.
    pub dropped: Vec<String>,
    /// The final audit (with `--execute`).
    pub final_audit: Option<FinalAudit>,
    /// The archive of the first target (with `--execute`), and its CSV copy.
    pub archive: Option<ArchiveSummary>,
    /// `--force --reason`: the reason, when the gate was closed and bypassed.
    pub forced: Option<String>,
    /// The contract run's ledger id (with `--execute`).
    pub ledger_id: Option<i64>,
    /// Set when `--execute` failed (the run's error is [`ContractFailed`], which carries
    /// this outcome): what failed, with the database's own detail.
    pub failure: Option<Failure>,
}

impl ContractOutcome {
    /// Whether the run refused for a closed gate: the gate (or the final audit) said no and
    /// nothing was dropped. False when the gate is open, when the drop ran (a `--force` too)
    /// and when there is nothing left to drop.
    pub fn gate_closed(&self) -> bool {
        !self.executed && self.verdict.as_ref().is_some_and(|v| !v.open)
    }

    /// Whether the contract drops nothing (`[contract] drop = "nothing"`): `--execute` records
    /// the gate's decision only.
    pub fn drops_nothing(&self) -> bool {
        self.value.is_some() && self.targets.is_empty()
    }

    /// Every target described, comma-separated (`column a.b, column a.c`).
    pub fn describe_targets(&self) -> String {
        self.targets
            .iter()
            .map(Target::describe)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// What made a `--execute` run fail.
#[derive(Debug, Clone, Serialize)]
pub struct Failure {
    /// The error and its causes, on one line.
    pub message: String,
    /// The database's detail of the error, where the engine gives one (PostgreSQL's DETAIL:
    /// for example the view that depends on the column).
    pub detail: Option<String>,
}

/// The error of a contract run that failed during `--execute`, with what the run had found
/// and done until then (verdict, final audit, archive, the failure) for the CLI to show. It
/// displays as the error itself and its source is that error, so the exit code and the
/// message are the error's.
#[derive(Debug)]
pub struct ContractFailed {
    /// What the run found and did before it failed ([`ContractOutcome::failure`] is set).
    pub outcome: Box<ContractOutcome>,
    /// The error itself.
    pub error: anyhow::Error,
}

impl std::fmt::Display for ContractFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.error, f)
    }
}

impl std::error::Error for ContractFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.error.as_ref())
    }
}

/// The final audit run inside the gate.
#[derive(Debug, Clone, Serialize)]
pub struct FinalAudit {
    /// Its ledger id.
    pub id: Option<i64>,
    /// Whether it passed.
    pub passed: bool,
    /// The limits it crossed.
    pub crossed: Vec<String>,
    /// The tolerance it ran with.
    pub tolerance: Tolerance,
    /// Rows checked.
    pub rows_checked: u64,
    /// Drifting rows.
    pub drifting_rows: u64,
    /// Its report.
    pub report: String,
    /// The report's SHA-256.
    pub report_sha256: String,
}
