//! What scripts read: the `--format json` outputs, one pretty-printed JSON object per command
//! on stdout (progress stays on stderr). Every object is an explicit struct of this module, so
//! the keys (snake_case) are a contract of their own, independent of the stages' field names;
//! the book's chapter "Output for scripts" (docs/src/output.md) documents them. A key is never removed or renamed
//! within a major version; new keys may be added.

use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{self, Write};

use crate::db::Dsn;
use crate::inspect::InspectOutcome;
use crate::ledger::{Entry, RunStatus};
use crate::mapping::Mapping;
use crate::stages::audit::AuditSummary;
use crate::stages::backfill::BackfillSummary;
use crate::stages::expand::ExpandReport;
use crate::stages::status::Status;

mod contract;
mod emit;
pub(crate) use contract::gate;
pub use contract::{
    contract, ArchiveJson, ContractJson, FailureJson, FinalAuditJson, GateJson, ReasonJson,
    StatementUseJson, StatementsJson,
};
use emit::emit;

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
    /// The contract run that dropped the counter (for `drop = "nothing"`: that recorded the
    /// gate's decision); null when none did.
    pub contract_done_by: Option<i64>,
    /// How: `dropped`, `decided` (`drop = "nothing"`: nothing was dropped) or `unrecorded`
    /// (the run's process ended after its DDL committed, before the ledger recorded it; its
    /// archive verifies; `contract --execute` records it); null when no run did.
    pub contract_state: Option<&'static str>,
    /// The contract gate with default options; null without a ledger or once contracted.
    pub gate: Option<GateJson>,
    /// The `[contract] columns` (`table.column`) the database does not have (any more) and no
    /// contract run dropped: a warning (the exit code stays 0); empty when there are none.
    pub missing_contract_columns: Vec<String>,
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
    /// Ledger status (`done`, `running`, `incomplete`, `failed`, `scoped`, `abandoned`).
    pub status: String,
    /// Whether a `running` audit's process still holds the audit's runner lock of its mapping
    /// (false: it was killed, or its server session ended; the next audit of the mapping marks
    /// it `abandoned`); false for every other status.
    pub alive: bool,
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
        .map(|a| AuditRunJson {
            id: a.id,
            status: a.status.to_string(),
            alive: a.alive,
            passed: a.passed,
            started_at: rfc3339(a.started_ms),
            rows_checked: a.summary.as_ref().map(|r| r.rows_checked),
            drifting_rows: a.summary.as_ref().map(|r| r.drifting_rows),
            same_mapping: a.fingerprint == mapping.fingerprint,
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
                .map(|b| run(b, b.status == RunStatus::Running && s.backfill_alive)),
            audits,
            changes: s.changes.map(|(newer, older, new, fixed)| ChangesJson {
                newer,
                older,
                newly_drifting: new,
                fixed,
            }),
            contract_done_by: s.contract_done.map(|d| d.run()),
            contract_state: s.contract_done.map(|d| d.as_str()),
            gate: if s.contract_done.is_some() {
                None
            } else {
                s.gate.as_ref().map(gate)
            },
            missing_contract_columns: s.missing_contract_columns.clone(),
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
    /// Members whose position evidence held values, all below 0 ("nothing read" markers): no
    /// position, the next source applied (issue 29 row 23).
    pub not_positions: u64,
    /// Members whose timestamp evidence held only values that are no time (a zero date, a
    /// text that is not a time): no evidence, the next source applied (issue 29).
    pub times_not_times: u64,
    /// Counter rows whose unread number will change once the counters are gone; null with
    /// `--skip-change-count` or `--dry-run`.
    pub unread_changes: Option<u64>,
    /// Batches retried after a lock wait.
    pub retried_batches: u64,
    /// The settle time in seconds young conversations were left out with; null when off or
    /// not possible (no `messages.created_at`).
    pub settle_time_s: Option<u64>,
    /// Watermarks are derived as "everything up to the newest message" but the mapping has no
    /// `messages.created_at`: a position not yet committed may be covered (not guarded).
    pub settle_unguarded: bool,
    /// Conversations of the members left for a later run (`left_unsettled_members`).
    pub left_unsettled: u64,
    /// Members left without a watermark for that reason.
    pub left_unsettled_members: u64,
    /// When this run continued an interrupted one: the batches that one had finished.
    pub resumed_after_batches: Option<u64>,
    /// When this run continued an interrupted one: the conversation key of its checkpoint,
    /// as text (the run went on after it); null otherwise.
    pub resumed_after: Option<String>,
    /// Stopped by Ctrl-C or SIGTERM before the last batch (exit 4; run again to continue).
    pub interrupted: bool,
    /// The ledger run id.
    pub ledger_id: Option<i64>,
    /// With read_flags evidence (issue 22): `members`, `read_out_of_order` (messages read
    /// out of order, unread under the watermarks) and `unread_marked_read` (flagged unread,
    /// marked read by them); omitted when the mapping lists no read_flags evidence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_flags: Option<crate::stages::backfill::FlagCounts>,
    /// With `--dry-run`: the statements run per batch.
    pub statements: Vec<StatementJson>,
    /// The preflight's notices (the key columns whose collations differ); omitted when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<String>,
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
            not_positions: s.not_positions,
            times_not_times: s.times_not_times,
            unread_changes: (!dry_run && s.counted_changes).then_some(s.unread_changes),
            retried_batches: s.retried_batches,
            settle_time_s: s.settle_time_s,
            settle_unguarded: s.settle_unguarded,
            left_unsettled: s.left_unsettled,
            left_unsettled_members: s.left_unsettled_members,
            resumed_after_batches: s.resumed_after_batches,
            resumed_after: s.resumed_after.clone(),
            interrupted: s.interrupted,
            ledger_id: s.ledger_id,
            read_flags: s.read_flags,
            statements: statements(plan),
            notices: s.notices.clone(),
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
    /// The indexes the stages read by, each with the one found or the statement that would
    /// create it.
    pub indexes: Vec<IndexJson>,
    /// The stages in order: `expand`, `backfill`, `audit`, `contract`.
    pub stages: Vec<PlanStageJson>,
    /// What the backfill measures before its first batch (issue 24), as the text plan shows
    /// it: per position, timestamp and counter evidence entry, the values sampled and the
    /// share that fits (issue 32; empty when no entry is measured).
    pub evidence_shares: Vec<ShareJson>,
    /// Warnings: the key columns whose collations differ (the statements then read each
    /// batch by its keys); omitted when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// One evidence entry's measured share (`plan --format json`, `evidence_shares`).
#[derive(Debug, Serialize)]
pub struct ShareJson {
    /// The entry's 1-based place in the mapping (`evidence[n]`).
    pub entry: usize,
    /// `position`, `timestamp` or `counter`.
    pub kind: String,
    /// What it reads: `table.column` (the counter: its column or expression).
    pub source: String,
    /// Values sampled (not NULL), at most the sample's size.
    pub measured: u64,
    /// Of those, the values that fit (positions of their conversation, times at or after its
    /// first message, counters between 0 and its message count).
    pub fits: u64,
    /// `fits / measured`, 0 to 1 (1 when nothing was measured).
    pub share: f64,
    /// The share under which the backfill stops (exit 2) when at least `min_values` were
    /// measured: 0.9 for positions and times, 0.5 for the counter.
    pub min_share: f64,
    /// Fewer values than this decide nothing.
    pub min_values: u64,
}

impl ShareJson {
    /// One [`crate::schema::evidence_share::Share`] as JSON.
    pub fn of(s: &crate::schema::evidence_share::Share) -> ShareJson {
        ShareJson {
            entry: s.entry,
            kind: s.kind.clone(),
            source: s.source.clone(),
            measured: s.measured,
            fits: s.fits,
            share: s.share(),
            min_share: s.limit(),
            min_values: crate::schema::evidence_share::MIN_VALUES,
        }
    }
}

/// One index a stage reads by (`plan --format json`).
#[derive(Debug, Serialize)]
pub struct IndexJson {
    /// The table as the mapping names it.
    pub table: String,
    /// The leading key columns it needs, in order.
    pub columns: Vec<String>,
    /// What reads by it.
    pub why: String,
    /// `present`, `partial`, `missing`, `view` (the index belongs on the table under the view) or
    /// `no_table`.
    pub status: &'static str,
    /// The index found (`present`; `partial`: one that serves the leading columns only).
    pub index: Option<String>,
    /// The statement that creates one (`missing`, `partial`).
    pub create: Option<String>,
}

impl IndexJson {
    /// One [`crate::inspect::indexes::IndexCheck`] as JSON.
    pub fn of(c: &crate::inspect::indexes::IndexCheck) -> IndexJson {
        use crate::inspect::indexes::IndexStatus;
        let (status, index, create) = match &c.status {
            IndexStatus::Present(name) => ("present", Some(name.clone()), None),
            IndexStatus::Partial { index, create, .. } => {
                ("partial", Some(index.clone()), Some(create.clone()))
            }
            IndexStatus::Missing(sql) => ("missing", None, Some(sql.clone())),
            IndexStatus::View => ("view", None, None),
            IndexStatus::NoTable => ("no_table", None, None),
        };
        IndexJson {
            table: c.need.table.clone(),
            columns: c.need.columns.clone(),
            why: c.need.why.to_string(),
            status,
            index,
            create,
        }
    }
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
    indexes: &[crate::inspect::indexes::IndexCheck],
    stages: Vec<PlanStageJson>,
    shares: &[crate::schema::evidence_share::Share],
    warnings: &[String],
) -> io::Result<()> {
    emit(
        w,
        &PlanJson {
            database: dsn.to_string(),
            dialect: dsn.dialect.name().to_string(),
            mapping_fingerprint: mapping.fingerprint.clone(),
            indexes: indexes.iter().map(IndexJson::of).collect(),
            stages,
            evidence_shares: shares.iter().map(ShareJson::of).collect(),
            warnings: warnings.to_vec(),
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
