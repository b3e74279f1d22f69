//! The JSON objects of the contract gate (in `status` and `contract`) and of `contract`
//! itself (the book: docs/src/output.md, "Output for scripts").

use serde::Serialize;
use std::io::{self, Write};

use super::emit::emit;
use crate::gate::{StatementUse, Verdict};
use crate::stages::contract::ContractOutcome;

/// The contract gate's verdict.
#[derive(Debug, Serialize)]
pub struct GateJson {
    /// Whether the gate is open.
    pub open: bool,
    /// Why it is closed (empty when open).
    pub reasons: Vec<ReasonJson>,
    /// The clean audits it relies on (or would), ledger ids, newest first.
    pub relied_on: Vec<i64>,
    /// The statement statistics' finding.
    pub statements: StatementsJson,
    /// Remarks that decide nothing.
    pub notes: Vec<String>,
}

/// One reason the gate is closed.
#[derive(Debug, Serialize)]
pub struct ReasonJson {
    /// A stable name: `no_audit`, `other_mapping`, `audit_failed`, `tolerance_not_accepted`, …
    pub kind: String,
    /// The reason in words, as the text output prints it.
    pub message: String,
}

/// What the server's statement statistics say about the counter column.
#[derive(Debug, Serialize)]
pub struct StatementsJson {
    /// `unavailable`, `unused` or `used`.
    pub state: &'static str,
    /// The finding in one line.
    pub description: String,
    /// The statements still using the counter (with `used`).
    pub using_counter: Vec<StatementUseJson>,
}

/// A statement seen in the statistics.
#[derive(Debug, Serialize)]
pub struct StatementUseJson {
    /// Normalised text.
    pub text: String,
    /// Calls since the statistics were reset.
    pub calls: i64,
}

/// The gate's verdict as `status` and `contract` print it in JSON (and the HTML page reads).
pub(crate) fn gate(v: &Verdict) -> GateJson {
    GateJson {
        open: v.open,
        reasons: v
            .reasons
            .iter()
            .map(|r| ReasonJson {
                kind: serde_json::to_value(r)
                    .ok()
                    .and_then(|v| v["kind"].as_str().map(str::to_string))
                    .unwrap_or_default(),
                message: r.to_string(),
            })
            .collect(),
        relied_on: v.relied_on.clone(),
        statements: StatementsJson {
            state: match &v.statements {
                StatementUse::Unavailable { .. } => "unavailable",
                StatementUse::Unused { .. } => "unused",
                StatementUse::Used { .. } => "used",
            },
            description: v.statements.describe(),
            using_counter: match &v.statements {
                StatementUse::Used { statements, .. } => statements
                    .iter()
                    .map(|s| StatementUseJson {
                        text: s.text.clone(),
                        calls: s.calls,
                    })
                    .collect(),
                _ => Vec::new(),
            },
        },
        notes: v.notes.clone(),
    }
}

// ---- contract ----

/// `contract --format json`.
#[derive(Debug, Serialize)]
pub struct ContractJson {
    /// The counter's shape: `per_member` or `per_message`.
    pub shape: &'static str,
    /// The table holding the counter.
    pub table: String,
    /// The counter column.
    pub column: String,
    /// Whether the whole table is dropped (`--drop-table`).
    pub drop_table: bool,
    /// With a `[contract]` section: every target (`column table.column` or `table name`), in
    /// the mapping's order; empty without one or for `drop = "nothing"`.
    pub targets: Vec<String>,
    /// With a `[contract]` section: the counter's value (the SQL expression); else null.
    pub value: Option<String>,
    /// With a `[contract]` section and `--execute`: each target's verified archive
    /// (`target` `table.column`, `rows`, `non_null`, `sum`, `sum_squares`).
    pub target_archives: Vec<serde_json::Value>,
    /// Set when there is nothing left to do (why: every target gone, or for `drop =
    /// "nothing"` the decision recorded by an earlier run); the gate is then null.
    pub nothing_to_drop: Option<String>,
    /// Set when this run recorded in the ledger the drop of an earlier run (its id), whose
    /// process ended after its last DDL committed and before it could record it.
    pub recorded_drop_of: Option<i64>,
    /// The gate's verdict.
    pub gate: Option<GateJson>,
    /// `--force --reason`: the reason, when a closed gate was bypassed.
    pub forced: Option<String>,
    /// The exact DDL, as printed.
    pub ddl: Vec<String>,
    /// Remarks.
    pub notes: Vec<String>,
    /// Whether `--execute` ran to its end: the drop committed, or for `drop = "nothing"` the
    /// gate's decision recorded.
    pub executed: bool,
    /// What this run dropped (`column table.column` or `table name`), in order; empty for a
    /// dry run, a refusal and `drop = "nothing"`.
    pub dropped: Vec<String>,
    /// The final audit (with `--execute`).
    pub final_audit: Option<FinalAuditJson>,
    /// The archive (with `--execute`).
    pub archive: Option<ArchiveJson>,
    /// The contract run's ledger id (with `--execute`).
    pub ledger_id: Option<i64>,
    /// Set when `--execute` failed: the error, and the database's detail.
    pub failure: Option<FailureJson>,
    /// The exit code: 0 open, done or nothing to drop; 1 closed; 3 failed.
    pub exit_code: u8,
}

/// The final audit of `contract --execute`.
#[derive(Debug, Serialize)]
pub struct FinalAuditJson {
    /// Ledger id.
    pub id: Option<i64>,
    /// Whether it passed.
    pub passed: bool,
    /// Rows checked.
    pub rows_checked: u64,
    /// Drifting rows.
    pub drifting_rows: u64,
    /// The limits it crossed.
    pub crossed: Vec<String>,
    /// Its CSV report and the report's SHA-256.
    pub report: String,
    /// SHA-256 of the report.
    pub report_sha256: String,
}

/// The archive of `contract --execute`.
#[derive(Debug, Serialize)]
pub struct ArchiveJson {
    /// The archive table.
    pub table: String,
    /// Rows archived.
    pub rows: i64,
    /// Non-NULL values archived.
    pub non_null: i64,
    /// Sum of the values (decimal text: exact).
    pub sum: String,
    /// Sum of their squares (decimal text).
    pub sum_squares: String,
    /// The CSV copy, if any, and its SHA-256.
    pub csv: Option<String>,
    /// SHA-256 of the CSV copy.
    pub csv_sha256: Option<String>,
}

/// The failure of `contract --execute`.
#[derive(Debug, Serialize)]
pub struct FailureJson {
    /// The error on one line.
    pub message: String,
    /// The database's detail, where it gives one.
    pub detail: Option<String>,
}

/// `contract --format json`: [`ContractJson`]. `exit_code` is the process's exit code, as the
/// command line decided it (3 when the run failed during `--execute`).
pub fn contract(w: &mut dyn Write, o: &ContractOutcome, exit_code: u8) -> io::Result<()> {
    emit(
        w,
        &ContractJson {
            shape: o.target.shape.as_str(),
            table: o.target.table.clone(),
            column: o.target.column.clone(),
            drop_table: o.target.drop_table,
            targets: o.targets.iter().map(|t| t.describe()).collect(),
            value: o.value.clone(),
            target_archives: o
                .target_archives
                .iter()
                .map(|t| {
                    serde_json::json!({
                        "target": t.target,
                        "rows": t.checksum.rows,
                        "non_null": t.checksum.non_null,
                        "sum": t.checksum.sum,
                        "sum_squares": t.checksum.sum_squares,
                    })
                })
                .collect(),
            nothing_to_drop: o.nothing_to_drop.clone(),
            recorded_drop_of: o.recorded_drop_of,
            gate: o.verdict.as_ref().map(gate),
            forced: o.forced.clone(),
            ddl: o.ddl.clone(),
            notes: o.notes.clone(),
            executed: o.executed,
            dropped: o.dropped.clone(),
            final_audit: o.final_audit.as_ref().map(|a| FinalAuditJson {
                id: a.id,
                passed: a.passed,
                rows_checked: a.rows_checked,
                drifting_rows: a.drifting_rows,
                crossed: a.crossed.clone(),
                report: a.report.clone(),
                report_sha256: a.report_sha256.clone(),
            }),
            archive: o.archive.as_ref().map(|a| ArchiveJson {
                table: a.table.clone(),
                rows: a.checksum.rows,
                non_null: a.checksum.non_null,
                sum: a.checksum.sum.clone(),
                sum_squares: a.checksum.sum_squares.clone(),
                csv: a.csv.clone(),
                csv_sha256: a.csv_sha256.clone(),
            }),
            ledger_id: o.ledger_id,
            failure: o.failure.as_ref().map(|f| FailureJson {
                message: f.message.clone(),
                detail: f.detail.clone(),
            }),
            exit_code,
        },
    )
}
