//! The gate's evidence from the ledger: the audit runs, their tolerance and verdict, read by
//! column name into typed records. An audit whose options or summary cannot be read carries
//! the reason, and the gate closes on it (issue 13, row 8): never a default.

use anyhow::{Context, Result};
use serde::Serialize;
use sqlx::AnyConnection;

use crate::dialect::Dialect;
use crate::ledger::records::AuditSummaryRecord;
use crate::ledger::{self, BackfillState, Entry, RunStatus, Stage, Tolerance};
use crate::tables::LEDGER_TABLE;

/// One audit run of the ledger, as the gate sees it.
#[derive(Debug, Clone, Serialize)]
pub struct AuditRecord {
    /// Ledger run id.
    pub id: i64,
    /// `done`, `failed` (the run errored), `running`…
    pub status: RunStatus,
    /// Start, milliseconds since the epoch.
    pub started_ms: i64,
    /// End, milliseconds since the epoch.
    pub finished_ms: Option<i64>,
    /// The mapping fingerprint the audit ran with.
    pub fingerprint: String,
    /// Whether drift was within the audit's tolerance (None: no verdict recorded).
    pub passed: Option<bool>,
    /// The tolerance it ran with.
    pub tolerance: Tolerance,
    /// The tolerance limits it crossed (from its summary), for the reasons.
    pub crossed: Vec<String>,
    /// Its report's SHA-256.
    pub report_sha256: Option<String>,
    /// Why its evidence (options or summary) cannot be read, when it cannot: the gate closes
    /// on it. Not stored with the contract's evidence.
    #[serde(skip)]
    pub unreadable: Option<String>,
    /// The newest backfill of the mapping as the audit found it (from its summary; None for
    /// an audit recorded before tidemark kept it): the gate never counts an audit that found
    /// it unfinished (issue 25, row 10). Not stored with the contract's evidence.
    #[serde(skip)]
    pub backfill: Option<BackfillState>,
}

impl AuditRecord {
    /// Whether the run finished with a verdict (pass or fail).
    pub fn has_verdict(&self) -> bool {
        self.status == RunStatus::Done && self.passed.is_some()
    }

    /// The gate's view of a ledger run. A finished audit must have readable options (its
    /// tolerance) and summary (the limits it crossed); when it has not, the record says why.
    pub fn of(e: &Entry) -> AuditRecord {
        let mut unreadable = None;
        let mut tolerance = Tolerance::zero();
        let mut crossed = Vec::new();
        let mut backfill = None;
        if e.status == RunStatus::Done {
            let options = e
                .options
                .as_deref()
                .context("the audit recorded no options")
                .and_then(|o| {
                    serde_json::from_str::<serde_json::Value>(o).context("its options are not JSON")
                })
                .and_then(|o| Tolerance::from_options(&o));
            match options {
                Ok(t) => tolerance = t,
                Err(err) => unreadable = Some(format!("{err:#}")),
            }
            match AuditSummaryRecord::parse(e.summary.as_deref()) {
                Ok(s) => {
                    crossed = s.crossed;
                    backfill = s.backfill;
                }
                Err(err) => {
                    unreadable.get_or_insert(format!("{err:#}"));
                }
            }
        }
        AuditRecord {
            id: e.id,
            status: e.status,
            started_ms: e.started_ms,
            finished_ms: e.finished_ms,
            fingerprint: e.fingerprint.clone(),
            passed: e.passed,
            tolerance,
            crossed,
            report_sha256: e.report_sha256.clone(),
            unreadable,
            backfill,
        }
    }
}

/// The audit runs of the ledger the gate decides on: those of this mapping, and the newest of
/// the others (to name them when none of this mapping exists). A finished audit whose options
/// or summary cannot be read is returned with [`AuditRecord::unreadable`] set.
pub async fn read_audits(
    conn: &mut AnyConnection,
    dialect: Dialect,
    fingerprint: &str,
) -> Result<Vec<AuditRecord>> {
    let mut out = Vec::new();
    for (cmp, limit) in [("=", 1000), ("<>", 100)] {
        let sql = format!(
            "SELECT {} FROM {LEDGER_TABLE} WHERE stage = '{}' AND mapping_fingerprint {cmp} {p} ORDER BY id DESC LIMIT {limit}",
            ledger::entry_columns(dialect),
            Stage::Audit,
            p = dialect.placeholder(1),
        );
        let rows = sqlx::query(&sql)
            .bind(fingerprint.to_string())
            .fetch_all(&mut *conn)
            .await
            .context("reading the audits from the ledger")?;
        for r in &rows {
            out.push(AuditRecord::of(&Entry::read(r)?));
        }
    }
    Ok(out)
}
