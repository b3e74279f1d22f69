//! `status`: where each stage stands: applied migrations, watermarks, the last backfill and the
//! last audits. Reads only.

use anyhow::{Context, Result};
use sqlx::AnyConnection;

use crate::dialect::Dialect;
use crate::ledger::records::{AuditOptionsRecord, AuditSummaryRecord};
use crate::ledger::{self, Entry, RunStatus, Stage};
use crate::mapping::Mapping;
use crate::schema;
use crate::stages::audit::AuditSummary;
use crate::stages::{contract, expand};

/// How many of the newest audits of the ledger `status` reads for its trend.
pub const TREND_AUDITS: i64 = 60;

fn migrations_empty(m: &[String]) -> bool {
    !m.iter().any(|name| name.contains("ledger"))
}

/// What `status` found.
#[derive(Debug, Clone)]
pub struct Status {
    /// Applied migrations, by name.
    pub migrations: Vec<String>,
    /// Rows in the watermark table (None when it does not exist).
    pub watermarks: Option<i64>,
    /// The newest backfill run.
    pub last_backfill: Option<Entry>,
    /// Whether a backfill of this mapping holds its runner lock now (a "running" run whose
    /// lock is free was killed: running backfill again resumes it).
    pub backfill_alive: bool,
    /// The newest audits, newest first (at most 10).
    pub audits: Vec<AuditRun>,
    /// The trend: the finished (`done`) audits of the mapping in force that recorded a
    /// summary, oldest first, among the newest [`TREND_AUDITS`] audits of the ledger (the
    /// HTML page's line; the text output draws the same rule over `audits`).
    pub trend: Vec<AuditRun>,
    /// The newest audit of the mapping in force that finished (`done`, or `scoped` for part of
    /// the table) with its whole summary (`status --html`), by ledger id; None when there is
    /// none, or its summary cannot be read.
    pub latest: Option<(i64, AuditSummary)>,
    /// Between the two newest complete audits that kept their rows (`--store-rows`):
    /// (newer run, older run, rows drifting now that did not before, rows fixed since).
    pub changes: Option<(i64, i64, i64, i64)>,
    /// The contract run that dropped the counter (or recorded the decision of `drop =
    /// "nothing"`, or dropped it without recording it), if one did.
    pub contract_done: Option<contract::Done>,
    /// Whether the contract gate would open with its default options (None without a ledger).
    pub gate: Option<crate::gate::Verdict>,
    /// The `[contract] columns` the database does not have (any more) and no contract run
    /// dropped, as `table.column` in the mapping's order: a warning, not an error (`status`
    /// still exits 0; `contract`, `backfill` and `audit` refuse such a mapping, exit 2).
    pub missing_contract_columns: Vec<String>,
}

/// An audit run as `status` shows it: its ledger row read through the typed records.
#[derive(Debug, Clone)]
pub struct AuditRun {
    /// Ledger id.
    pub id: i64,
    /// Where the run stands.
    pub status: RunStatus,
    /// Its verdict: `Some(true)` passed, `Some(false)` failed; `None` when it has none
    /// (running, incomplete, failed).
    pub passed: Option<bool>,
    /// Start, milliseconds since the epoch.
    pub started_ms: i64,
    /// The fingerprint of the mapping it ran with (SHA-256 hex).
    pub fingerprint: String,
    /// Its summary; `None` when it recorded none or one without the keys of
    /// [`AuditSummaryRecord`] (a failed audit stores only its error): `status` then leaves the
    /// counts empty instead of failing.
    pub summary: Option<AuditSummaryRecord>,
    /// For a run recorded as `running`: whether its process still holds the audit's runner
    /// lock of its mapping (false: it was killed, or its server session ended; the next audit
    /// of the mapping marks it `abandoned`). False for every other status.
    pub alive: bool,
}

impl AuditRun {
    /// Reads a ledger row of stage `audit`. The `passed` column holds 1 (passed) or 0 (failed),
    /// as [`ledger::finish`] writes a verdict; only 1 reads as passed.
    fn of(e: &Entry) -> AuditRun {
        AuditRun {
            id: e.id,
            status: e.status,
            passed: e.passed,
            started_ms: e.started_ms,
            fingerprint: e.fingerprint.clone(),
            summary: AuditSummaryRecord::parse(e.summary.as_deref()).ok(),
            alive: false,
        }
    }
}

/// Reads the state of the stages.
pub async fn run(conn: &mut AnyConnection, mapping: &Mapping, dialect: Dialect) -> Result<Status> {
    let migrations: Vec<String> = expand::applied(conn, dialect)
        .await?
        .iter()
        .map(|m| m.to_string())
        .collect();
    let watermarks =
        if crate::db::catalog::table_exists(conn, dialect, &mapping.watermarks.table).await? {
            let sql = format!(
                "SELECT COUNT(*) FROM {}",
                dialect.quote(&mapping.watermarks.table)
            );
            Some(
                sqlx::query_scalar::<_, i64>(&sql)
                    .fetch_one(&mut *conn)
                    .await?,
            )
        } else {
            None
        };
    let (last_backfill, audits) =
        if crate::db::catalog::table_exists(conn, dialect, crate::tables::LEDGER_TABLE).await? {
            (
                ledger::recent(conn, Stage::Backfill, 1, dialect)
                    .await?
                    .into_iter()
                    .next(),
                ledger::recent(conn, Stage::Audit, TREND_AUDITS, dialect).await?,
            )
        } else {
            (None, Vec::new())
        };
    let latest = audits
        .iter()
        .filter(|a| a.fingerprint == mapping.fingerprint)
        .find(|a| matches!(a.status, RunStatus::Done | RunStatus::Scoped))
        .and_then(|a| {
            let summary = serde_json::from_str(a.summary.as_deref()?).ok()?;
            Some((a.id, summary))
        });
    let trend: Vec<AuditRun> = audits
        .iter()
        .rev()
        .filter(|a| a.status == RunStatus::Done && a.fingerprint == mapping.fingerprint)
        .map(AuditRun::of)
        .filter(|a| a.summary.is_some())
        .collect();
    let audits: Vec<Entry> = audits.into_iter().take(10).collect();
    let mut stored: Vec<i64> = Vec::new();
    for a in audits.iter().filter(|a| a.status == RunStatus::Done) {
        let options: AuditOptionsRecord = a
            .options
            .as_deref()
            .context("no options recorded")
            .and_then(|o| Ok(serde_json::from_str(o)?))
            .with_context(|| format!("reading the options of audit run #{} in the ledger", a.id))?;
        if options.store_rows {
            stored.push(a.id);
        }
        if stored.len() == 2 {
            break;
        }
    }
    let changes = match stored[..] {
        [newer, older] => {
            let (new, fixed) = ledger::drift_changes(conn, newer, older).await?;
            Some((newer, older, new, fixed))
        }
        _ => None,
    };
    let has_ledger = !migrations_empty(&migrations);
    let contract_done = if has_ledger {
        contract::standing(conn, mapping, dialect).await?
    } else {
        None
    };
    let gate = if has_ledger && contract_done.is_none() {
        Some(contract::verdict(conn, mapping, dialect, &crate::gate::GateOptions::default()).await?)
    } else {
        None
    };
    let backfill_alive = match &last_backfill {
        Some(b) if b.status == RunStatus::Running => {
            crate::lock::is_held(conn, dialect, &super::backfill::lock_name(mapping))
                .await
                .unwrap_or(true)
        }
        _ => false,
    };
    let mut audits: Vec<AuditRun> = audits.iter().map(AuditRun::of).collect();
    for a in audits.iter_mut().filter(|a| a.status == RunStatus::Running) {
        // The lock of the mapping the audit ran with: a free lock is a dead run.
        a.alive = crate::lock::is_held(conn, dialect, &super::audit::lock_name(&a.fingerprint))
            .await
            .unwrap_or(true);
    }
    let missing_contract_columns = schema::missing_contract_columns(conn, mapping, dialect)
        .await?
        .into_iter()
        .map(|dc| format!("{}.{}", dc.table, dc.column))
        .collect();
    Ok(Status {
        missing_contract_columns,
        backfill_alive,
        migrations,
        watermarks,
        last_backfill,
        audits,
        trend,
        latest,
        changes,
        contract_done,
        gate,
    })
}
