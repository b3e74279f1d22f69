//! The final audit, run inside the gate with `--execute` before anything is archived: the gate
//! never opens on old evidence alone (semantics.md, "The gate before the drop").

use anyhow::{Context, Result};
use sqlx::AnyConnection;
use std::path::PathBuf;

use super::options::{ContractOptions, DEFAULT_AUDIT_REPORT};
use super::outcome::{ContractOutcome, FinalAudit};
use crate::dialect::Dialect;
use crate::gate::{self, Reason, Tolerance};
use crate::ledger::records::{AuditOptionsRecord, Checked};
use crate::mapping::Mapping;
use crate::stages::audit;
use crate::tables::LEDGER_TABLE;

/// The final audit, inside the gate (step 1 of `--execute`), with the tolerance of the newest
/// clean audit. Returns the audit's ledger id (`Some`), or `None` when it failed, or found the
/// mapping's backfill unfinished (issue 25, row 10), and no `--force` bypasses it (the verdict
/// and the outcome then say so).
///
/// Errors: the audit itself fails (exit 2 or 3, as the audit's).
pub async fn final_audit(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
    opts: &ContractOptions,
    verdict: &mut gate::Verdict,
    outcome: &mut ContractOutcome,
) -> Result<Option<Option<i64>>> {
    let newest = verdict.newest_clean.clone();
    let tolerance = newest
        .as_ref()
        .map(|a| a.tolerance.clone())
        .unwrap_or_else(Tolerance::zero);
    let batch_size = match &newest {
        Some(a) => audit_batch_size(conn, dialect, a.id).await?,
        None => crate::stages::batch::DEFAULT_BATCH_SIZE,
    };
    let report = audit_report_path(opts);
    #[allow(clippy::needless_update)] // options the audit may gain later keep their defaults
    let audit_opts = audit::AuditOptions {
        cap: tolerance.cap,
        report: report.clone(),
        report_mode: opts.report_mode,
        batch_size,
        ledger: true,
        max_drift_rows: tolerance.max_drift_rows.unwrap_or(0),
        max_drift_ratio: tolerance.max_drift_ratio.unwrap_or(0.0),
        max_abs_drift: tolerance.max_abs_drift.unwrap_or(0),
        checked: Checked::of(&tolerance),
        // An empty counter table has nothing to lose: the drop goes on as it always did.
        allow_empty: true,
        quiet: opts.quiet,
        ..Default::default()
    };
    let audited = audit::run(conn, mapping, dialect, &audit_opts)
        .await
        .context("the final audit (nothing was archived or dropped)")?;
    let s = &audited.summary;
    outcome.final_audit = Some(FinalAudit {
        id: s.ledger_id,
        passed: s.passed,
        crossed: s.crossed.clone(),
        tolerance,
        rows_checked: s.rows_checked,
        drifting_rows: s.drifting_rows,
        report: s.report.clone(),
        report_sha256: s.report_sha256.clone(),
    });
    let unfinished = s.backfill_unfinished();
    if !s.passed || unfinished.is_some() {
        // Issue 25, row 10: an audit against an unfinished backfill never counts.
        if let Some(b) = unfinished {
            verdict.reasons.push(Reason::BackfillUnfinished {
                id: s.ledger_id,
                backfill: b.id,
                state: b.describe(),
            });
        }
        if !s.passed {
            verdict.reasons.push(Reason::FinalAuditFailed {
                id: s.ledger_id,
                crossed: s.crossed.clone(),
            });
        }
        verdict.open = false;
        outcome.verdict = Some(verdict.clone());
        if !opts.force {
            return Ok(None);
        }
        outcome.forced = opts.reason.clone();
    }
    outcome.verdict = Some(verdict.clone());
    Ok(Some(s.ledger_id))
}

/// Where the final audit writes its report (issue 29, row 7): `--audit-report FILE` when
/// given, else [`DEFAULT_AUDIT_REPORT`] beside the `--archive` CSV when there is one, else in
/// the working directory, next to the other reports (not a predictable path of the shared
/// temporary folder, which another local user could create first).
pub fn audit_report_path(opts: &ContractOptions) -> PathBuf {
    if let Some(path) = &opts.audit_report {
        return path.clone();
    }
    match opts
        .archive_csv
        .as_ref()
        .and_then(|p| p.parent())
        .filter(|p| !p.as_os_str().is_empty())
    {
        Some(dir) => dir.join(DEFAULT_AUDIT_REPORT),
        None => PathBuf::from(DEFAULT_AUDIT_REPORT),
    }
}

/// Checks, before `--execute` writes anything, that the final audit may write its report
/// ([`audit_report_path`]): not a directory, link or device, its folder there, and not a file
/// that belongs to another user (issue 29, row 7: never written through).
///
/// Errors: exit 2 for a file of another user or that is not a regular file; exit 3 for a
/// folder that does not exist (as [`crate::report::check_destination`]).
pub fn check_audit_report(opts: &ContractOptions) -> Result<()> {
    let path = audit_report_path(opts);
    crate::report::check_destination(&path)?;
    crate::report::check_own(&path)
        .context("the final audit's report (--audit-report FILE names another)")
}

/// The batch size audit run `id` recorded (the final audit runs with the same).
async fn audit_batch_size(conn: &mut AnyConnection, dialect: Dialect, id: i64) -> Result<u64> {
    let sql = format!(
        "SELECT options FROM {LEDGER_TABLE} WHERE id = {}",
        dialect.placeholder(1)
    );
    let row = sqlx::query(&sql).bind(id).fetch_one(&mut *conn).await?;
    let options: AuditOptionsRecord = crate::values::text(&row, "options")?
        .context("no options recorded")
        .and_then(|s| Ok(serde_json::from_str(&s)?))
        .with_context(|| format!("reading the options of audit run #{id} in the ledger"))?;
    Ok(options.batch_size.max(1))
}
