//! The ledger's typed vocabulary: the stage and status of a run, and the JSON it stores
//! (options and summaries) as serde structs shared by the stage that writes them and the
//! readers (the gate, `status`, `--resume`). Every key is required when read: a missing or
//! renamed key is an error, never a default (issue 13, row 8).
//!
//! The stored strings are the ones tidemark always wrote (`running`, `done`, …), byte for byte.

use anyhow::{anyhow, Result};
use serde::{Deserialize, Serialize};

/// The stage a ledger run belongs to (column `stage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    /// `tidemark backfill`.
    Backfill,
    /// `tidemark audit` (also the final audit inside `contract --execute`).
    Audit,
    /// `tidemark contract --execute`.
    Contract,
}

impl Stage {
    /// The stored text: `backfill`, `audit`, `contract`.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Backfill => "backfill",
            Stage::Audit => "audit",
            Stage::Contract => "contract",
        }
    }

    /// Reads the stored text. Errors on a stage this tidemark does not know.
    pub fn parse(s: &str) -> Result<Stage> {
        [Stage::Backfill, Stage::Audit, Stage::Contract]
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| {
                anyhow!("the ledger holds a run of stage {s:?}, which this tidemark does not know")
            })
    }
}

impl AsRef<str> for Stage {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a ledger run stands (column `status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Started and not finished (or killed: the runner lock tells which).
    Running,
    /// Finished; for audits and contracts the verdict is in `passed`.
    Done,
    /// Stopped by an error.
    Failed,
    /// A backfill stopped by a signal or `--run-time` after a checkpoint; it resumes.
    Interrupted,
    /// An unfinished backfill given up by `--restart`, or a run left `running` by a process or
    /// server session that died, found by a later run of its stage and mapping that holds the
    /// runner lock ([`crate::ledger::abandon_stale`]).
    Abandoned,
    /// An audit stopped at `--run-time`; `--resume` continues it.
    Incomplete,
    /// An audit of part of the table (`--conversations`, `--sample`, `--min-age`): the gate
    /// never counts it.
    Scoped,
    /// A contract run whose final audit failed: nothing was archived or dropped.
    Refused,
}

impl RunStatus {
    const ALL: [RunStatus; 8] = [
        RunStatus::Running,
        RunStatus::Done,
        RunStatus::Failed,
        RunStatus::Interrupted,
        RunStatus::Abandoned,
        RunStatus::Incomplete,
        RunStatus::Scoped,
        RunStatus::Refused,
    ];

    /// The stored text.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Done => "done",
            RunStatus::Failed => "failed",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Abandoned => "abandoned",
            RunStatus::Incomplete => "incomplete",
            RunStatus::Scoped => "scoped",
            RunStatus::Refused => "refused",
        }
    }

    /// Reads the stored text. Errors on a status this tidemark does not know.
    pub fn parse(s: &str) -> Result<RunStatus> {
        RunStatus::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| {
                anyhow!(
                    "the ledger holds a run with status {s:?}, which this tidemark does not know"
                )
            })
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for RunStatus {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for RunStatus {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// Deserializes an `Option` whose key must be present (null is None; a missing key is an
/// error, unlike serde's default for `Option` fields).
fn required<'de, D, T>(d: D) -> std::result::Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d)
}

/// The tolerance an audit ran with, as its `options` JSON stores it (interface.md, `audit`):
/// with no tolerance option every limit is checked at zero; once any is given, only the
/// limits given are checked, and the others are stored as null ("not checked").
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Tolerance {
    /// `--max-drift-rows` (None: not checked).
    #[serde(deserialize_with = "required")]
    pub max_drift_rows: Option<u64>,
    /// `--max-drift-ratio` (None: not checked).
    #[serde(deserialize_with = "required")]
    pub max_drift_ratio: Option<f64>,
    /// `--max-abs-drift` (None: not checked).
    #[serde(deserialize_with = "required")]
    pub max_abs_drift: Option<i64>,
    /// `--cap`: counts compared as "N+" (drift above the cap is not seen).
    #[serde(deserialize_with = "required")]
    pub cap: Option<i64>,
}

impl Tolerance {
    /// No drift allowed, every limit checked, no cap: what an audit without tolerance
    /// options runs with.
    pub fn zero() -> Tolerance {
        Tolerance {
            max_drift_rows: Some(0),
            max_drift_ratio: Some(0.0),
            max_abs_drift: Some(0),
            cap: None,
        }
    }

    /// The tolerance of the given options: `None` for each option not given; when none of
    /// the three limits is given, every limit is checked at zero (interface.md).
    pub fn given(
        max_drift_rows: Option<u64>,
        max_drift_ratio: Option<f64>,
        max_abs_drift: Option<i64>,
        cap: Option<i64>,
    ) -> Tolerance {
        if max_drift_rows.is_none() && max_drift_ratio.is_none() && max_abs_drift.is_none() {
            return Tolerance {
                cap,
                ..Tolerance::zero()
            };
        }
        Tolerance {
            max_drift_rows,
            max_drift_ratio,
            max_abs_drift,
            cap,
        }
    }

    /// Reads the tolerance from an audit's `options` JSON. Errors when a key is missing or
    /// holds something else than a number or null.
    pub fn from_options(options: &serde_json::Value) -> Result<Tolerance> {
        serde_json::from_value(options.clone()).map_err(|e| {
            anyhow!("the audit's options in the ledger hold no readable tolerance: {e}")
        })
    }

    /// Whether the audit allowed no drift at all and saw every value in full.
    pub fn is_zero(&self) -> bool {
        *self == Tolerance::zero()
    }

    /// The tolerance in words, for reasons and notes (`zero` when there is none).
    pub fn describe(&self) -> String {
        if self.is_zero() {
            return "zero".to_string();
        }
        let mut parts = Vec::new();
        let mut unchecked = Vec::new();
        match self.max_drift_rows {
            Some(n) if n > 0 => parts.push(format!("--max-drift-rows {n}")),
            Some(_) => {}
            None => unchecked.push("drifting rows"),
        }
        match self.max_drift_ratio {
            Some(r) if r > 0.0 => parts.push(format!("--max-drift-ratio {r}")),
            Some(_) => {}
            None => unchecked.push("drift ratio"),
        }
        match self.max_abs_drift {
            Some(n) if n > 0 => parts.push(format!("--max-abs-drift {n}")),
            Some(_) => {}
            None => unchecked.push("largest |drift|"),
        }
        if let Some(cap) = self.cap {
            parts.push(format!("--cap {cap}"));
        }
        if !unchecked.is_empty() {
            parts.push(format!("{} not checked", unchecked.join(", ")));
        }
        parts.join(", ")
    }
}

/// Which of the three tolerance limits an audit checks (interface.md, `audit`): all of them
/// when no tolerance option is given (at zero), else only those given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checked {
    /// `--max-drift-rows` is checked.
    pub rows: bool,
    /// `--max-drift-ratio` is checked.
    pub ratio: bool,
    /// `--max-abs-drift` is checked.
    pub abs: bool,
}

impl Default for Checked {
    fn default() -> Self {
        Checked {
            rows: true,
            ratio: true,
            abs: true,
        }
    }
}

impl Checked {
    /// The limits checked when these options were given: all when none was.
    pub fn given(rows: bool, ratio: bool, abs: bool) -> Checked {
        if rows || ratio || abs {
            Checked { rows, ratio, abs }
        } else {
            Checked::default()
        }
    }

    /// The limits a stored tolerance checks.
    pub fn of(t: &Tolerance) -> Checked {
        Checked {
            rows: t.max_drift_rows.is_some(),
            ratio: t.max_drift_ratio.is_some(),
            abs: t.max_abs_drift.is_some(),
        }
    }
}

/// The options an audit records (`options` of its ledger run), compared whole by `--resume`.
/// The key order is the stored order (serde_json sorts the keys of a JSON object).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditOptionsRecord {
    /// `--cap`.
    #[serde(deserialize_with = "required")]
    pub cap: Option<i64>,
    /// The report's path.
    pub report: String,
    /// `--batch-size`.
    pub batch_size: u64,
    /// `--max-drift-rows` (null: not checked).
    #[serde(deserialize_with = "required")]
    pub max_drift_rows: Option<u64>,
    /// `--max-drift-ratio` (null: not checked).
    #[serde(deserialize_with = "required")]
    pub max_drift_ratio: Option<f64>,
    /// `--max-abs-drift` (null: not checked).
    #[serde(deserialize_with = "required")]
    pub max_abs_drift: Option<i64>,
    /// How the scope was given (empty: the whole table).
    pub scope: Vec<String>,
    /// `--min-age`, seconds.
    #[serde(deserialize_with = "required")]
    pub min_age_s: Option<u64>,
    /// `--store-rows`.
    pub store_rows: bool,
    /// `--spreadsheet-safe` (absent in the records of earlier versions: false).
    #[serde(default)]
    pub spreadsheet_safe: bool,
}

impl AuditOptionsRecord {
    /// The tolerance these options check.
    pub fn tolerance(&self) -> Tolerance {
        Tolerance {
            max_drift_rows: self.max_drift_rows,
            max_drift_ratio: self.max_drift_ratio,
            max_abs_drift: self.max_abs_drift,
            cap: self.cap,
        }
    }
}

/// The options a backfill records (`options` of its ledger run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackfillOptionsRecord {
    /// `--batch-size`.
    pub batch_size: u64,
    /// `--chunk-time`, milliseconds.
    pub chunk_time_ms: u64,
    /// `--max-rows-per-second`.
    #[serde(deserialize_with = "required")]
    pub max_rows_per_second: Option<f64>,
    /// `--pause-between-batches`, milliseconds.
    pub pause_between_batches_ms: u64,
    /// `--lock-timeout`, milliseconds.
    pub lock_timeout_ms: u64,
    /// `--retries`.
    pub retries: usize,
}

/// What the gate and `status` read of a finished audit's summary (the audit writes the whole
/// [`crate::stages::audit::AuditSummary`]; these keys must be in it).
#[derive(Debug, Clone, Deserialize)]
pub struct AuditSummaryRecord {
    /// Rows compared.
    pub rows_checked: u64,
    /// Drifting rows.
    pub drifting_rows: u64,
    /// The tolerance limits crossed (empty when it passed).
    pub crossed: Vec<String>,
    /// The newest backfill of the audit's mapping as the audit found it (issue 25, row 10).
    /// The one key an older summary may lack: audits recorded before tidemark kept it are
    /// read as they always were (None), never as an unfinished backfill; an audit recorded
    /// with the ledger always has it.
    #[serde(default)]
    pub backfill: Option<BackfillState>,
}

/// The newest backfill of a mapping as an audit of that mapping found it at its start (issue
/// 25, row 10): the audit's drift is the counters' own only once the backfill finished
/// (`done`); before, the members it has not reached yet have no watermark, and their unread
/// is everything. Recorded in the audit's summary (`backfill` in `audit --format json`); the
/// gate never counts an audit that found it unfinished.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BackfillState {
    /// Its ledger run id; None when no backfill of the mapping was ever recorded.
    pub id: Option<i64>,
    /// Its status in the ledger; None when none was ever recorded.
    pub status: Option<RunStatus>,
    /// For a run recorded as `running`: whether its process still holds the backfill's runner
    /// lock (false: it was killed, or its server session ended). False for any other status.
    pub alive: bool,
    /// Whether it finished (`done`).
    pub finished: bool,
    /// The command that finishes it (`tidemark backfill`: it resumes an unfinished run from
    /// its checkpoint, or starts one); None when it finished or is still running.
    pub command: Option<String>,
}

impl BackfillState {
    /// The state of the mapping's newest backfill run (`None`: never run); `alive` as the
    /// runner lock says for a run recorded as `running`.
    pub fn of(run: Option<(i64, RunStatus)>, alive: bool) -> BackfillState {
        let status = run.map(|(_, s)| s);
        let alive = alive && status == Some(RunStatus::Running);
        let finished = status == Some(RunStatus::Done);
        BackfillState {
            id: run.map(|(id, _)| id),
            status,
            alive,
            finished,
            command: (!finished && !alive).then(|| "tidemark backfill".to_string()),
        }
    }

    /// Where it stands, in words, after "the last backfill of this mapping": `never ran`,
    /// `(run #3) failed`, `(run #3) stopped unfinished (its process is gone)`, `(run #3) is
    /// still running`, `(run #3) was interrupted`, … .
    pub fn describe(&self) -> String {
        let (Some(id), Some(status)) = (self.id, self.status) else {
            return "never ran".to_string();
        };
        let how = match status {
            RunStatus::Running if self.alive => "is still running".to_string(),
            RunStatus::Running => "stopped unfinished (its process is gone)".to_string(),
            RunStatus::Done => "finished".to_string(),
            RunStatus::Failed => "failed".to_string(),
            RunStatus::Interrupted => "was interrupted".to_string(),
            RunStatus::Abandoned => "was abandoned".to_string(),
            other => format!("is {other}"),
        };
        format!("(run #{id}) {how}")
    }
}

impl AuditSummaryRecord {
    /// Reads an audit's summary JSON. Errors when it is missing or lacks a key.
    pub fn parse(summary: Option<&str>) -> Result<AuditSummaryRecord> {
        let text = summary.ok_or_else(|| anyhow!("the audit recorded no summary"))?;
        serde_json::from_str(text)
            .map_err(|e| anyhow!("the audit's summary in the ledger is not readable: {e}"))
    }
}

/// What a contract run records as its target (the `target` of its summary), read back to tell
/// whether a counter was dropped.
#[derive(Debug, Clone, Deserialize)]
pub struct ContractTargetRecord {
    /// The counter table as the mapping names it.
    pub table: String,
    /// The counter column.
    pub column: String,
}

/// A checksum of counter values: rows, non-NULL values, their sum and sum of squares (exact
/// decimals as text). The contract compares the archive with the column by it, and records it
/// in the ledger before a DDL ([`ContractCheckpointRecord`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checksum {
    /// Rows.
    pub rows: i64,
    /// Non-NULL values.
    pub non_null: i64,
    /// Sum of the values.
    pub sum: String,
    /// Sum of their squares.
    pub sum_squares: String,
}

/// What a contract run records in its ledger row's `checkpoint` after a target's archive is
/// verified and before its DDL runs (issue 25 row 8): every target verified so far, and what
/// the run records as its end once the last of their DDL has committed. If the process dies
/// between that commit and the ledger's write, a later run finds the target gone and the run
/// still `running`, checks the archive against this record and writes the run's end from it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ContractCheckpointRecord {
    /// The targets whose archive was verified before their DDL, in the order they are dropped.
    pub verified: Vec<VerifiedArchiveRecord>,
    /// The summary the run records once the last DDL has committed (its DDL as planned): the
    /// JSON the ledger's `summary` holds, read back as [`ContractSummaryRecord`].
    pub summary: serde_json::Value,
    /// The gate's verdict then (the ledger's `passed`).
    pub gate_open: bool,
    /// The archive's CSV copy (`--archive FILE`), the ledger's `report_path`.
    pub csv: Option<String>,
    /// Its SHA-256, the ledger's `report_sha256`.
    pub csv_sha256: Option<String>,
}

/// One target of a [`ContractCheckpointRecord`]: its archive as verified, before its DDL.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VerifiedArchiveRecord {
    /// The table, as the mapping names it.
    pub table: String,
    /// The column archived (the counter column for a table dropped whole).
    pub column: String,
    /// The checksum of the run's archive of it, equal to the column's when verified.
    pub checksum: Checksum,
    /// The DDL as planned, as printed.
    pub ddl: Vec<String>,
}

/// The part of a contract run's summary read back (`status`, a second `contract`).
#[derive(Debug, Clone, Deserialize)]
pub struct ContractSummaryRecord {
    /// What was (or would have been) dropped.
    pub target: ContractTargetRecord,
}

/// The options a contract run records.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ContractOptionsRecord {
    /// Always true: only `--execute` runs are recorded.
    pub execute: bool,
    /// `--min-clean-audits`.
    pub min_clean_audits: u32,
    /// `--max-audit-age`, milliseconds.
    pub max_audit_age_ms: u64,
    /// `--accept-tolerance`.
    pub accept_tolerance: bool,
    /// `--require-unused`.
    pub require_unused: bool,
    /// `--archive FILE`.
    pub archive: Option<String>,
    /// `--drop-table`.
    pub drop_table: bool,
    /// `--force`.
    pub force: bool,
    /// `--reason`.
    pub reason: Option<String>,
    /// `--lock-timeout`, milliseconds.
    pub lock_timeout_ms: u64,
    /// `--lock-retries`.
    pub lock_retries: usize,
    /// `--batch-size`.
    pub batch_size: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip() {
        for s in RunStatus::ALL {
            assert_eq!(RunStatus::parse(s.as_str()).unwrap(), s);
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        assert!(RunStatus::parse("DONE").is_err());
        assert_eq!(Stage::parse("audit").unwrap(), Stage::Audit);
        assert!(Stage::parse("expand").is_err());
    }

    #[test]
    fn tolerance_keys_are_required() {
        let t = Tolerance::from_options(&serde_json::json!({
            "cap": null, "max_drift_rows": 0, "max_drift_ratio": 0.0, "max_abs_drift": 0
        }))
        .unwrap();
        assert!(t.is_zero());
        let t = Tolerance::from_options(&serde_json::json!({
            "cap": null, "max_drift_rows": 0, "max_drift_ratio": 0.01, "max_abs_drift": 0
        }))
        .unwrap();
        assert!(!t.is_zero());
        assert_eq!(t.describe(), "--max-drift-ratio 0.01");
        // A renamed or missing key is an error, never a zero.
        assert!(Tolerance::from_options(&serde_json::json!({"max_drift_ratio": 0.01})).is_err());
        assert!(Tolerance::from_options(&serde_json::json!({
            "cap": null, "max_rows": 5, "max_drift_ratio": 0.0, "max_abs_drift": 0
        }))
        .is_err());
        assert!(Tolerance::from_options(&serde_json::json!({
            "cap": null, "max_drift_rows": "5", "max_drift_ratio": 0.0, "max_abs_drift": 0
        }))
        .is_err());
    }

    #[test]
    fn backfill_states() {
        let never = BackfillState::of(None, false);
        assert!(!never.finished);
        assert_eq!(never.command.as_deref(), Some("tidemark backfill"));
        assert_eq!(never.describe(), "never ran");
        let running = BackfillState::of(Some((3, RunStatus::Running)), true);
        assert_eq!((running.alive, running.finished), (true, false));
        assert_eq!(running.command, None);
        assert_eq!(running.describe(), "(run #3) is still running");
        let dead = BackfillState::of(Some((3, RunStatus::Running)), false);
        assert_eq!(
            dead.describe(),
            "(run #3) stopped unfinished (its process is gone)"
        );
        assert_eq!(dead.command.as_deref(), Some("tidemark backfill"));
        let failed = BackfillState::of(Some((3, RunStatus::Failed)), true);
        assert!(!failed.alive, "only a running run is alive");
        assert_eq!(failed.describe(), "(run #3) failed");
        let done = BackfillState::of(Some((4, RunStatus::Done)), false);
        assert_eq!((done.finished, done.command), (true, None));
        // An audit summary recorded before the key existed reads as it always did.
        let old = AuditSummaryRecord::parse(Some(
            r#"{"rows_checked": 1, "drifting_rows": 0, "crossed": []}"#,
        ))
        .unwrap();
        assert_eq!(old.backfill, None);
    }

    #[test]
    fn a_tolerance_given_alone_is_the_tolerance() {
        let t = Tolerance::given(Some(1), None, None, None);
        assert_eq!(t.max_drift_ratio, None);
        assert_eq!(
            t.describe(),
            "--max-drift-rows 1, drift ratio, largest |drift| not checked"
        );
        assert!(Tolerance::given(None, None, None, None).is_zero());
        // Stored with nulls for the limits not checked, read back the same.
        let v = serde_json::to_value(&t).unwrap();
        assert_eq!(v["max_abs_drift"], serde_json::Value::Null);
        assert_eq!(Tolerance::from_options(&v).unwrap(), t);
    }
}
