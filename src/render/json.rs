//! What scripts read: the `--format json` outputs, one pretty-printed JSON object per command
//! on stdout (progress stays on stderr). Every object is an explicit struct of this module, so
//! the keys (snake_case) are a contract of their own, independent of the stages' field names;
//! the README section "Output for scripts" documents them. A key is never removed or renamed
//! within a major version; new keys may be added.

use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{self, Write};

use crate::db::Dsn;
use crate::gate::{StatementUse, Verdict};
use crate::inspect::InspectOutcome;
use crate::ledger::Entry;
use crate::mapping::{Mapping, Shape};
use crate::stages::audit::AuditSummary;
use crate::stages::backfill::BackfillSummary;
use crate::stages::contract::ContractOutcome;
use crate::stages::expand::ExpandReport;
use crate::stages::status::Status;

/// Writes `value` pretty-printed and a newline.
fn emit<T: Serialize>(w: &mut dyn Write, value: &T) -> io::Result<()> {
    writeln!(w, "{}", serde_json::to_string_pretty(value)?)
}

/// The audit summary as one pretty-printed JSON object and a newline (`audit --format json`;
/// the keys are the fields of [`AuditSummary`]).
pub fn audit(w: &mut dyn Write, s: &AuditSummary) -> io::Result<()> {
    emit(w, s)
}

/// A ledger time (milliseconds since the epoch) as RFC 3339 UTC, seconds precision.
fn rfc3339(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// One statement a stage runs: what it does, and its SQL.
#[derive(Debug, Serialize)]
pub struct StatementJson {
    /// What it does, in words.
    pub what: String,
    /// The SQL, as the stage runs it (placeholders in the dialect's spelling).
    pub sql: String,
}

fn statements(list: &[(&str, String)]) -> Vec<StatementJson> {
    list.iter()
        .map(|(what, sql)| StatementJson {
            what: what.to_string(),
            sql: sql.clone(),
        })
        .collect()
}

// ---- status ----

/// `status --format json`.
#[derive(Debug, Serialize)]
pub struct StatusJson {
    /// The database URL, password redacted.
    pub database: String,
    /// The mapping fingerprint (SHA-256 hex).
    pub mapping_fingerprint: String,
    /// Applied migrations, by name (empty: expand has not run).
    pub migrations: Vec<String>,
    /// The watermark table.
    pub watermark_table: String,
    /// Rows in the watermark table; null when it does not exist.
    pub watermark_rows: Option<i64>,
    /// The newest backfill run; null when none ran.
    pub backfill: Option<RunJson>,
    /// The newest audits (at most 10), newest first.
    pub audits: Vec<AuditRunJson>,
    /// Between the two newest complete audits that kept their rows (`--store-rows`).
    pub changes: Option<ChangesJson>,
    /// The contract run that dropped the counter; null when none did.
    pub contract_done_by: Option<i64>,
    /// The contract gate with default options; null without a ledger or once contracted.
    pub gate: Option<GateJson>,
}

/// A ledger run (`status`).
#[derive(Debug, Serialize)]
pub struct RunJson {
    /// Ledger id.
    pub id: i64,
    /// `running`, `done`, `failed`, `interrupted`, `abandoned` or `incomplete`.
    pub status: String,
    /// Whether a `running` run's process still holds its runner lock (false: it was killed;
    /// running the command again resumes it).
    pub alive: bool,
    /// Start, RFC 3339 UTC.
    pub started_at: String,
    /// End, RFC 3339 UTC; null while running.
    pub finished_at: Option<String>,
}

/// An audit run (`status`).
#[derive(Debug, Serialize)]
pub struct AuditRunJson {
    /// Ledger id.
    pub id: i64,
    /// Ledger status (`done`, `running`, `incomplete`, `failed`).
    pub status: String,
    /// Whether it passed; null when it has no verdict.
    pub passed: Option<bool>,
    /// Start, RFC 3339 UTC.
    pub started_at: String,
    /// Rows checked (from its summary), when known.
    pub rows_checked: Option<u64>,
    /// Drifting rows (from its summary), when known.
    pub drifting_rows: Option<u64>,
    /// Whether it ran with the mapping in force.
    pub same_mapping: bool,
}

/// Drifting rows that changed between two audits.
#[derive(Debug, Serialize)]
pub struct ChangesJson {
    /// The newer audit.
    pub newer: i64,
    /// The older audit.
    pub older: i64,
    /// Rows drifting in the newer one that did not before.
    pub newly_drifting: i64,
    /// Rows drifting in the older one and not any more.
    pub fixed: i64,
}

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

fn gate(v: &Verdict) -> GateJson {
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

fn run(e: &Entry, alive: bool) -> RunJson {
    RunJson {
        id: e.id,
        status: e.status.to_string(),
        alive,
        started_at: rfc3339(e.started_ms),
        finished_at: e.finished_ms.map(rfc3339),
    }
}

/// `status --format json`: [`StatusJson`].
pub fn status(w: &mut dyn Write, s: &Status, dsn: &Dsn, mapping: &Mapping) -> io::Result<()> {
    let audits = s
        .audits
        .iter()
        .map(|a| {
            let summary: serde_json::Value = a
                .summary
                .as_deref()
                .and_then(|t| serde_json::from_str(t).ok())
                .unwrap_or_default();
            AuditRunJson {
                id: a.id,
                status: a.status.to_string(),
                passed: a.passed.map(|p| p == 1),
                started_at: rfc3339(a.started_ms),
                rows_checked: summary["rows_checked"].as_u64(),
                drifting_rows: summary["drifting_rows"].as_u64(),
                same_mapping: a.fingerprint == mapping.fingerprint,
            }
        })
        .collect();
    emit(
        w,
        &StatusJson {
            database: dsn.to_string(),
            mapping_fingerprint: mapping.fingerprint.clone(),
            migrations: s.migrations.clone(),
            watermark_table: mapping.watermarks.table.clone(),
            watermark_rows: s.watermarks,
            backfill: s
                .last_backfill
                .as_ref()
                .map(|b| run(b, b.status == "running" && s.backfill_alive)),
            audits,
            changes: s.changes.map(|(newer, older, new, fixed)| ChangesJson {
                newer,
                older,
                newly_drifting: new,
                fixed,
            }),
            contract_done_by: s.contract_done,
            gate: if s.contract_done.is_some() {
                None
            } else {
                s.gate.as_ref().map(gate)
            },
        },
    )
}

// ---- backfill ----

/// `backfill --format json`.
#[derive(Debug, Serialize)]
pub struct BackfillJson {
    /// Whether this was `--dry-run` (nothing written; the counts are what would be).
    pub dry_run: bool,
    /// Members considered.
    pub members: u64,
    /// Batches run.
    pub batches: u64,
    /// Watermarks created (no row before).
    pub written: u64,
    /// Existing watermarks moved forward.
    pub advanced: u64,
    /// Existing watermarks already at or past the evidence.
    pub unchanged: u64,
    /// Watermarks per evidence kind.
    pub by_source: BTreeMap<String, u64>,
    /// Existing watermarks left alone because the only evidence was the counter.
    pub kept_over_counter: u64,
    /// Active members with no evidence (no watermark written).
    pub no_evidence: u64,
    /// Members who left with no read position (none written, none owed).
    pub left_without_evidence: u64,
    /// Counters no watermark can represent.
    pub unrepresentable_counters: u64,
    /// Counter rows whose unread number will change once the counters are gone; null with
    /// `--skip-change-count` or `--dry-run`.
    pub unread_changes: Option<u64>,
    /// Batches retried after a lock wait.
    pub retried_batches: u64,
    /// When this run continued an interrupted one: the batches that one had finished.
    pub resumed_after_batches: Option<u64>,
    /// Stopped by Ctrl-C or SIGTERM before the last batch (exit 4; run again to continue).
    pub interrupted: bool,
    /// The ledger run id.
    pub ledger_id: Option<i64>,
    /// With `--dry-run`: the statements run per batch.
    pub statements: Vec<StatementJson>,
}

/// `backfill --format json`: [`BackfillJson`]; `statements` only with `--dry-run`.
pub fn backfill(
    w: &mut dyn Write,
    s: &BackfillSummary,
    dry_run: bool,
    plan: &[(&str, String)],
) -> io::Result<()> {
    emit(
        w,
        &BackfillJson {
            dry_run,
            members: s.members,
            batches: s.batches,
            written: s.written,
            advanced: s.advanced,
            unchanged: s.unchanged,
            by_source: s.by_source.clone(),
            kept_over_counter: s.kept_over_counter,
            no_evidence: s.no_evidence,
            left_without_evidence: s.left_without_evidence,
            unrepresentable_counters: s.unrepresentable_counters,
            unread_changes: (!dry_run && s.counted_changes).then_some(s.unread_changes),
            retried_batches: s.retried_batches,
            resumed_after_batches: s.resumed_after_batches,
            interrupted: s.interrupted,
            ledger_id: s.ledger_id,
            statements: statements(plan),
        },
    )
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
    /// Set when there is nothing left to drop (why); the gate is then null.
    pub nothing_to_drop: Option<String>,
    /// The gate's verdict.
    pub gate: Option<GateJson>,
    /// `--force --reason`: the reason, when a closed gate was bypassed.
    pub forced: Option<String>,
    /// The exact DDL, as printed.
    pub ddl: Vec<String>,
    /// Remarks.
    pub notes: Vec<String>,
    /// Whether the drop ran and committed.
    pub executed: bool,
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

/// `contract --format json`: [`ContractJson`]. `exit_code` is the process's exit code (3
/// when the run failed during `--execute`).
pub fn contract(w: &mut dyn Write, o: &ContractOutcome) -> io::Result<()> {
    emit(
        w,
        &ContractJson {
            shape: match o.target.shape {
                Shape::PerMember => "per_member",
                Shape::PerMessage => "per_message",
            },
            table: o.target.table.clone(),
            column: o.target.column.clone(),
            drop_table: o.target.drop_table,
            nothing_to_drop: o.nothing_to_drop.clone(),
            gate: o.verdict.as_ref().map(gate),
            forced: o.forced.clone(),
            ddl: o.ddl.clone(),
            notes: o.notes.clone(),
            executed: o.executed,
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
            exit_code: if o.failure.is_some() {
                crate::error::EXIT_FAILURE
            } else {
                o.exit_code
            },
        },
    )
}

// ---- plan ----

/// `plan --format json`.
#[derive(Debug, Serialize)]
pub struct PlanJson {
    /// The database URL, password redacted.
    pub database: String,
    /// `postgres`, `mysql` or `sqlite`.
    pub dialect: String,
    /// The mapping fingerprint.
    pub mapping_fingerprint: String,
    /// The stages in order: `expand`, `backfill`, `audit`, `contract`.
    pub stages: Vec<PlanStageJson>,
}

/// One stage of the plan.
#[derive(Debug, Serialize)]
pub struct PlanStageJson {
    /// The stage's name.
    pub stage: &'static str,
    /// When its statements run (`once`, `per batch of whole conversations (lo, hi]`, …).
    pub runs: String,
    /// Its statements, in order (contract: the DDL once the gate opens).
    pub statements: Vec<StatementJson>,
    /// What else there is to know (the contract before expand, nothing to drop, …).
    pub note: Option<String>,
}

impl PlanStageJson {
    /// A stage with its statements.
    pub fn new(stage: &'static str, runs: &str, list: &[(&str, String)]) -> Self {
        PlanStageJson {
            stage,
            runs: runs.to_string(),
            statements: statements(list),
            note: None,
        }
    }
}

/// The expand stage of the plan: the pending migrations (empty when up to date).
pub fn plan_expand(r: &ExpandReport) -> PlanStageJson {
    PlanStageJson {
        stage: "expand",
        runs: "once".into(),
        statements: r
            .pending
            .iter()
            .map(|(name, sql)| StatementJson {
                what: name.clone(),
                sql: sql.clone(),
            })
            .collect(),
        note: (r.pending.is_empty()).then(|| "nothing to apply: the schema is up to date".into()),
    }
}

/// `plan --format json`: [`PlanJson`].
pub fn plan(
    w: &mut dyn Write,
    dsn: &Dsn,
    mapping: &Mapping,
    stages: Vec<PlanStageJson>,
) -> io::Result<()> {
    emit(
        w,
        &PlanJson {
            database: dsn.to_string(),
            dialect: dsn.dialect.name().to_string(),
            mapping_fingerprint: mapping.fingerprint.clone(),
            stages,
        },
    )
}

// ---- inspect ----

/// `inspect --format json`.
#[derive(Debug, Serialize)]
pub struct InspectJson {
    /// Whether the proposal is a complete mapping (exit 0) or not (exit 1).
    pub complete: bool,
    /// What a complete mapping lacks.
    pub missing: Vec<String>,
    /// Tables and views read.
    pub tables: usize,
    /// The warnings.
    pub warnings: Vec<WarningJson>,
    /// Where the mapping was written (`--output`); null when it is in `mapping`.
    pub output: Option<String>,
    /// The proposed mapping file, comments included; null when written to `--output`.
    pub mapping: Option<String>,
}

/// One warning of `inspect`.
#[derive(Debug, Serialize)]
pub struct WarningJson {
    /// What is wrong.
    pub message: String,
    /// Rows concerned, when counted.
    pub count: Option<u64>,
    /// The statement that fixes it.
    pub fix: Option<String>,
}

/// `inspect --format json`: [`InspectJson`].
pub fn inspect(
    w: &mut dyn Write,
    o: &InspectOutcome,
    output: Option<&std::path::Path>,
) -> io::Result<()> {
    emit(
        w,
        &InspectJson {
            complete: o.complete(),
            missing: o.missing.clone(),
            tables: o.tables,
            warnings: o
                .warnings
                .iter()
                .map(|x| WarningJson {
                    message: x.message.clone(),
                    count: x.count,
                    fix: x.fix.clone(),
                })
                .collect(),
            output: output.map(|p| p.display().to_string()),
            mapping: output.is_none().then(|| o.text.clone()),
        },
    )
}

// ---- sql app ----

/// `sql app --format json`.
#[derive(Debug, Serialize)]
pub struct AppSqlJson<'a> {
    /// `postgres`, `mysql` or `sqlite`.
    pub dialect: String,
    /// The statements: `name`, `when`, `prevents`, `binds` (in order), `sql`.
    pub statements: &'a [crate::app_sql::AppStatement],
}

/// `sql app --format json`: [`AppSqlJson`].
pub fn app_sql(
    w: &mut dyn Write,
    dsn: &Dsn,
    statements: &[crate::app_sql::AppStatement],
) -> io::Result<()> {
    emit(
        w,
        &AppSqlJson {
            dialect: dsn.dialect.name().to_string(),
            statements,
        },
    )
}
