//! `--execute` once the gate is open (or bypassed by `--force --reason`): under the contract's
//! runner lock and recorded in the ledger from the start, the final audit, then per target its
//! archive, the archive's verification and the drop; the ledger then records what was done
//! with the evidence. One sequence for every mapping: the counter column alone, several
//! `[contract]` columns, a table, or nothing (`drop = "nothing"`: the decision is recorded).

use anyhow::Result;
use sqlx::AnyConnection;

use super::archive::{archive_rows, audit_of_run, verify, write_csv, ArchiveSummary};
use super::ddl::drop_with_retries;
use super::evidence::evidence;
use super::final_audit::final_audit;
use super::options::ContractOptions;
use super::outcome::{ContractOutcome, TargetArchive};
use super::planning::{Planned, TargetPlan};
use super::test_pause::pause_at;
use crate::dialect::SqlContext;
use crate::gate;
use crate::ledger::{self, records::ContractOptionsRecord, RunStatus, Stage};
use crate::lock::RunnerLock;
use crate::mapping::Mapping;
use crate::tables::ARCHIVE_TABLE;

/// What one `--execute` run works on.
pub struct Run<'a> {
    /// The mapping.
    pub mapping: &'a Mapping,
    /// Its SQL context.
    pub ctx: &'a SqlContext,
    /// The targets and their plans.
    pub planned: &'a [Planned],
    /// The run's options.
    pub opts: &'a ContractOptions,
    /// A contract run that dropped some of the targets already (its final audit stands).
    pub resumed_from: Option<i64>,
}

/// Runs `--execute` under the runner lock, recorded in the ledger: checks the rights the
/// drop needs before writing anything, takes the lock, records the run, runs [`execute`] and
/// records its end (done, refused by the final audit, or failed).
///
/// Errors: a missing right (exit 3, with its GRANT), another runner (exit 3), the run's own
/// error; the ledger records a failed run as failed.
pub async fn execute_locked(
    conn: &mut AnyConnection,
    run: &Run<'_>,
    verdict: &mut gate::Verdict,
    outcome: &mut ContractOutcome,
) -> Result<()> {
    let (mapping, opts, dialect) = (run.mapping, run.opts, run.ctx.dialect);
    let ddl_targets: Vec<(&str, bool)> = run
        .planned
        .iter()
        .filter(|p| p.done_by.is_none())
        .map(|p| (p.target.table.as_str(), p.target.drop_table))
        .collect();
    crate::db::privileges::for_contract(conn, dialect, &ddl_targets, opts.lock_timeout).await?;
    let runner = RunnerLock::acquire(
        conn,
        dialect,
        &crate::lock::runner_name(Stage::Contract, &mapping.fingerprint),
    )
    .await?;
    let options = serde_json::to_value(options_record(opts))?;
    let result = async {
        let id = ledger::start(conn, dialect, Stage::Contract, &mapping.fingerprint, &options)
            .await?;
        // Under the runner lock: an older contract run still `running` here was killed.
        ledger::abandon_stale(conn, dialect, Stage::Contract, &mapping.fingerprint, id).await?;
        outcome.ledger_id = Some(id);
        let result = execute(conn, run, id, verdict, outcome).await;
        let summary = evidence(outcome, verdict, opts, result.as_ref().err())?;
        let (status, open) = match &result {
            Ok(()) if outcome.executed => (RunStatus::Done, Some(verdict.open)),
            Ok(()) => (RunStatus::Refused, Some(false)),
            Err(_) => (RunStatus::Failed, None),
        };
        let csv = outcome.archive.as_ref().and_then(|a| a.csv.as_deref());
        let sha = outcome.archive.as_ref().and_then(|a| a.csv_sha256.as_deref());
        let finished = ledger::finish(conn, dialect, id, status, &summary, open, csv, sha).await;
        match (&result, finished) {
            (Ok(()), Err(e)) if outcome.executed => Err(e.context(format!(
                "{} dropped (archive: contract run #{id} in {ARCHIVE_TABLE}), but the ledger could not record it",
                outcome.describe_targets()
            ))),
            (Ok(()), Err(e)) => Err(e),
            _ => result,
        }
    }
    .await;
    let _ = runner.release(conn).await;
    result
}

/// The ledger's record of a contract run's options.
fn options_record(opts: &ContractOptions) -> ContractOptionsRecord {
    ContractOptionsRecord {
        execute: true,
        min_clean_audits: opts.gate.min_clean_audits,
        max_audit_age_ms: opts.gate.max_audit_age.as_millis() as u64,
        accept_tolerance: opts.gate.accept_tolerance,
        require_unused: opts.gate.require_unused,
        archive: opts.archive_csv.as_ref().map(|p| p.display().to_string()),
        drop_table: opts.drop_table,
        force: opts.force,
        reason: opts.reason.clone(),
        lock_timeout_ms: opts.lock_timeout.as_millis() as u64,
        lock_retries: opts.lock_retries,
        batch_size: opts.batch_size,
    }
}

/// The final audit (unless resuming: a run that dropped a first target relied on its own, and
/// the counter's value cannot be read any more), then per target still there its archive,
/// the archive's verification and the drop.
async fn execute(
    conn: &mut AnyConnection,
    run: &Run<'_>,
    contract_id: i64,
    verdict: &mut gate::Verdict,
    outcome: &mut ContractOutcome,
) -> Result<()> {
    let (ctx, opts) = (run.ctx, run.opts);
    let audit_id = match run.resumed_from {
        None => match final_audit(conn, run.mapping, ctx.dialect, opts, verdict, outcome).await? {
            Some(id) => id,
            None => return Ok(()),
        },
        Some(run) => {
            outcome.verdict = Some(verdict.clone());
            audit_of_run(conn, ctx, run).await?
        }
    };
    let mut ran = Vec::new();
    for p in run.planned {
        let Some(plan) = &p.plan else { continue };
        match drop_target(conn, p, plan, opts, contract_id, audit_id, outcome).await {
            Ok(lines) => ran.extend(lines),
            Err(e) => {
                outcome.ddl = ran;
                return Err(e);
            }
        }
    }
    outcome.ddl = ran;
    outcome.executed = true;
    Ok(())
}

/// One target: its archive, batch by batch; the archive verified (and its CSV copy with
/// `--archive FILE`); then the drop. Returns the statements that ran.
async fn drop_target(
    conn: &mut AnyConnection,
    p: &Planned,
    plan: &TargetPlan,
    opts: &ContractOptions,
    contract_id: i64,
    audit_id: Option<i64>,
    outcome: &mut ContractOutcome,
) -> Result<Vec<String>> {
    let (t, keys, ctx) = (&p.target, &plan.keys, &plan.ctx);
    archive_rows(conn, ctx, keys, t, contract_id, audit_id, opts.batch_size).await?;
    pause_at("checksum").await;
    let archived = verify(conn, ctx, keys, t, contract_id).await?;
    let mut summary = ArchiveSummary {
        table: ARCHIVE_TABLE.into(),
        contract_id,
        audit_id,
        checksum: archived.clone(),
        csv: None,
        csv_sha256: None,
    };
    if let Some(path) = &opts.archive_csv {
        let (csv_sum, sha) =
            write_csv(conn, ctx, keys, contract_id, path, opts.report_mode).await?;
        if csv_sum != archived {
            anyhow::bail!(
                "the CSV archive {} does not verify: {csv_sum:?}, archive table {archived:?}; nothing was dropped",
                path.display()
            );
        }
        summary.csv = Some(path.display().to_string());
        summary.csv_sha256 = Some(sha);
    }
    outcome.target_archives.push(TargetArchive {
        target: format!("{}.{}", t.table, t.column),
        checksum: archived.clone(),
    });
    if outcome.archive.is_none() {
        outcome.archive = Some(summary);
    }
    pause_at("ddl").await;
    #[cfg(feature = "test-hooks")]
    if let Some(hook) = &opts.before_ddl {
        anyhow::Context::context(hook().await, "the before-DDL hook")?;
    }
    drop_with_retries(conn, ctx, keys, &plan.drop, &archived, t, opts, contract_id).await
}
