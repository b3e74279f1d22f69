//! The summary the ledger keeps with a contract run: the gate's evidence (the audits relied on,
//! its reasons, the statement statistics), the final audit, the archive, the DDL, any forced
//! reason (read back as [`crate::ledger::records::ContractSummaryRecord`]).

use anyhow::Result;
use serde::Serialize;

use super::archive::ArchiveSummary;
use super::options::ContractOptions;
use super::outcome::{ContractOutcome, FinalAudit, TargetArchive};
use super::target::Target;
use crate::gate::{self, Reason};

/// The gate's part of a contract run's evidence.
#[derive(Serialize)]
struct GateEvidence<'a> {
    open: bool,
    reasons: Vec<String>,
    reason_kinds: &'a [Reason],
    relied_on: &'a [i64],
    newest_clean: &'a Option<gate::AuditRecord>,
    options: &'a gate::GateOptions,
}

/// A `--force` that bypassed a closed gate.
#[derive(Serialize)]
struct Forced<'a> {
    reason: &'a str,
    overridden: Vec<String>,
}

/// The summary the ledger keeps with a contract run (read back as
/// [`crate::ledger::records::ContractSummaryRecord`]).
#[derive(Serialize)]
struct ContractEvidence<'a> {
    target: &'a Target,
    targets: &'a [Target],
    target_archives: &'a [TargetArchive],
    value: &'a Option<String>,
    gate: GateEvidence<'a>,
    statements: &'a gate::StatementUse,
    final_audit: &'a Option<FinalAudit>,
    archive: &'a Option<ArchiveSummary>,
    ddl: &'a [String],
    executed: bool,
    forced: Option<Forced<'a>>,
    error: Option<String>,
}

/// The summary the ledger keeps with the run: the gate's evidence and what was done (`error`:
/// why an `--execute` failed).
pub fn evidence(
    outcome: &ContractOutcome,
    verdict: &gate::Verdict,
    opts: &ContractOptions,
    error: Option<&anyhow::Error>,
) -> Result<serde_json::Value> {
    let reasons: Vec<String> = verdict.reasons.iter().map(|r| r.to_string()).collect();
    Ok(serde_json::to_value(ContractEvidence {
        target: &outcome.target,
        targets: &outcome.targets,
        target_archives: &outcome.target_archives,
        value: &outcome.value,
        gate: GateEvidence {
            open: verdict.open,
            reasons: reasons.clone(),
            reason_kinds: &verdict.reasons,
            relied_on: &verdict.relied_on,
            newest_clean: &verdict.newest_clean,
            options: &opts.gate,
        },
        statements: &verdict.statements,
        final_audit: &outcome.final_audit,
        archive: &outcome.archive,
        ddl: &outcome.ddl,
        executed: outcome.executed,
        forced: outcome.forced.as_deref().map(|reason| Forced {
            reason,
            overridden: reasons,
        }),
        error: error.map(|e| crate::error::masked(&format!("{e:#}"))),
    })?)
}
