//! `--execute` once the gate is open (or bypassed by `--force --reason`): under the contract's
//! runner lock and the mapping's backfill runner lock ([`backfill_lock`]), and recorded in the
//! ledger from the start, the final audit, then per target its
//! archive, the archive's verification, what the run is about to drop recorded in its ledger
//! row, and the drop; the ledger then records what was done with the evidence. One sequence
//! for every mapping: the counter column alone, several `[contract]` columns, a table, or
//! nothing (`drop = "nothing"`: the decision is recorded). Also, under the same lock, the
//! record of a drop whose run died before it could record it ([`record_unrecorded`]).

use anyhow::Result;
use sqlx::AnyConnection;

use super::archive::{archive_rows, audit_of_run, verify, write_csv, ArchiveSummary};
use super::ddl::drop_with_retries;
use super::evidence::evidence;
use super::final_audit::final_audit;
use super::options::ContractOptions;
use super::outcome::{ContractOutcome, TargetArchive};
use super::planning::{Planned, TargetPlan};
use super::target::Target;
use super::test_pause::pause_at;
use super::unrecorded;
use crate::dialect::SqlContext;
use crate::gate;
use crate::ledger::records::{
    Checksum, ContractCheckpointRecord, ContractOptionsRecord, VerifiedArchiveRecord,
};
use crate::ledger::{self, RunStatus, Stage};
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
/// Errors: a missing right (exit 3, with its GRANT), another runner (exit 3), a backfill of
/// the mapping running (exit 3, [`backfill_lock`]), the run's own error; the ledger records a
/// failed run as failed.
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
    let backfill = match backfill_lock(conn, run).await {
        Ok(lock) => lock,
        Err(e) => {
            let _ = runner.release(conn).await;
            return Err(e);
        }
    };
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
    let _ = backfill.release(conn).await;
    let _ = runner.release(conn).await;
    result
}

/// The backfill runner lock of the run's mapping, held for the whole `--execute` run (issue
/// 29, row 10; semantics.md, "The gate before the drop": a drop never runs while another
/// tidemark holds the mapping's runner lock, `--force` or not): a backfill that runs now would
/// write watermarks from a counter about to be dropped, and one that starts later waits for
/// the contract to end.
///
/// Errors (exit 3, nothing written): a backfill of the mapping holds it; the message names it
/// (the engine's description of the holder: PostgreSQL backend pid and client, MySQL
/// connection id, SQLite pid and host).
async fn backfill_lock(conn: &mut AnyConnection, run: &Run<'_>) -> Result<RunnerLock> {
    let name = crate::lock::runner_name(Stage::Backfill, &run.mapping.fingerprint);
    RunnerLock::acquire(conn, run.ctx.dialect, &name)
        .await
        .map_err(|e| {
            let forced = if run.opts.force { " (--force does not bypass this)" } else { "" };
            e.context(format!(
                "a backfill of this mapping is running: the contract drops nothing while it runs{forced}; wait for it to finish, then run the contract again"
            ))
        })
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
    let mut progress = Progress {
        contract_id,
        audit_id,
        ran: Vec::new(),
        verified: Vec::new(),
    };
    let mut result = Ok(());
    for p in run.planned {
        let Some(plan) = &p.plan else { continue };
        result = drop_target(conn, run, p, plan, verdict, outcome, &mut progress).await;
        if result.is_err() {
            break;
        }
    }
    outcome.ddl = progress.ran;
    outcome.executed = result.is_ok();
    result
}

/// What an `--execute` run has done so far, target by target.
struct Progress {
    /// The run's ledger id.
    contract_id: i64,
    /// The audit that covered the values (its final audit, or the resumed run's).
    audit_id: Option<i64>,
    /// The statements that ran, as printed.
    ran: Vec<String>,
    /// The targets whose archive was verified before their DDL (the ledger's checkpoint).
    verified: Vec<VerifiedArchiveRecord>,
}

/// One target: its archive, verified; what the run is about to drop recorded in the ledger
/// ([`record_before_ddl`]); then the drop.
async fn drop_target(
    conn: &mut AnyConnection,
    run: &Run<'_>,
    p: &Planned,
    plan: &TargetPlan,
    verdict: &gate::Verdict,
    outcome: &mut ContractOutcome,
    progress: &mut Progress,
) -> Result<()> {
    let (t, keys, ctx, opts) = (&p.target, &plan.keys, &plan.ctx, run.opts);
    let archived = archive_target(conn, p, plan, opts, progress, outcome).await?;
    record_before_ddl(conn, run, p, &archived, verdict, outcome, progress).await?;
    pause_at("ddl").await;
    #[cfg(feature = "test-hooks")]
    if let Some(hook) = &opts.before_ddl {
        anyhow::Context::context(hook().await, "the before-DDL hook")?;
    }
    let id = progress.contract_id;
    let ran = drop_with_retries(conn, ctx, keys, &plan.drop, &archived, t, opts, id).await?;
    pause_at("dropped").await;
    progress.ran.extend(ran);
    outcome.dropped.push(t.describe());
    Ok(())
}

/// A target's archive, batch by batch; the archive verified (and its CSV copy with
/// `--archive FILE`). Returns the archive's checksum.
async fn archive_target(
    conn: &mut AnyConnection,
    p: &Planned,
    plan: &TargetPlan,
    opts: &ContractOptions,
    progress: &Progress,
    outcome: &mut ContractOutcome,
) -> Result<Checksum> {
    let (t, keys, ctx) = (&p.target, &plan.keys, &plan.ctx);
    let (contract_id, audit_id) = (progress.contract_id, progress.audit_id);
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
    Ok(archived)
}

/// Records in the run's ledger row, before the target's DDL runs, its archive as verified,
/// the DDL as planned, and the summary the run records once that DDL commits (issue 25
/// row 8): a run whose process dies between the DDL's commit and its last ledger write can
/// then be recorded by the next run ([`unrecorded`]).
///
/// Errors (exit 3): the ledger cannot be written; nothing is dropped.
async fn record_before_ddl(
    conn: &mut AnyConnection,
    run: &Run<'_>,
    p: &Planned,
    archived: &Checksum,
    verdict: &gate::Verdict,
    outcome: &ContractOutcome,
    progress: &mut Progress,
) -> Result<()> {
    let t = &p.target;
    let ddl = p
        .plan
        .as_ref()
        .map(|plan| plan.drop.lines(&t.drop_target()))
        .unwrap_or_default();
    progress.verified.push(VerifiedArchiveRecord {
        table: t.table.clone(),
        column: t.column.clone(),
        checksum: archived.clone(),
        ddl: ddl.clone(),
    });
    let mut done = outcome.clone();
    done.executed = true;
    done.ddl = progress.ran.iter().chain(&ddl).cloned().collect();
    done.dropped.push(t.describe());
    let archive = outcome.archive.as_ref();
    let record = ContractCheckpointRecord {
        verified: progress.verified.clone(),
        summary: evidence(&done, verdict, run.opts, None)?,
        gate_open: verdict.open,
        csv: archive.and_then(|a| a.csv.clone()),
        csv_sha256: archive.and_then(|a| a.csv_sha256.clone()),
    };
    unrecorded::before_ddl(conn, run.ctx.dialect, progress.contract_id, &record).await
}

/// Records in the ledger the drop of contract run `id`, whose process ended after its last DDL
/// committed and before it recorded its end (issue 25 row 8): under the runner lock of that
/// run's mapping (so that the run, were it still alive, is not overtaken), checks again that
/// it is not recorded and that its archive of each target of `planned` it dropped verifies,
/// and writes its row ([`unrecorded::complete`]); other runs of that mapping still
/// `running` are then marked `abandoned`. Returns whether this call wrote the row (false: the
/// ledger records it already).
///
/// Errors: another runner holds the lock (exit 3); the archive does not verify (exit 2); the
/// ledger cannot be read or written (exit 3).
pub async fn record_unrecorded(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    planned: &[Planned],
    id: i64,
) -> Result<bool> {
    let dialect = ctx.dialect;
    let Some(entry) = ledger::entry(conn, dialect, id).await? else {
        anyhow::bail!("contract run #{id} is not in the ledger");
    };
    let name = crate::lock::runner_name(Stage::Contract, &entry.fingerprint);
    let runner = RunnerLock::acquire(conn, dialect, &name).await?;
    let result = async {
        let targets: Vec<&Target> = planned
            .iter()
            .filter(|p| p.done_by == Some(id))
            .map(|p| &p.target)
            .collect();
        let wrote = unrecorded::complete(conn, ctx, &targets, id).await?;
        if wrote {
            ledger::abandon_stale(conn, dialect, Stage::Contract, &entry.fingerprint, id).await?;
        }
        Ok(wrote)
    }
    .await;
    let _ = runner.release(conn).await;
    result
}
