//! `--execute` after the gate: the final audit, the archive and its verification, the DDL
//! under a bounded lock wait, and the evidence the ledger keeps with the run.

use anyhow::{bail, Context, Result};
use serde::Serialize;
use sqlx::AnyConnection;
use std::path::PathBuf;
use std::time::Duration;

use super::archive::{archive_rows, checksum, write_csv};
use super::{
    ArchiveSummary, Checksum, ContractOptions, ContractOutcome, Keys, Target, ARCHIVE_TABLE,
    DEFAULT_AUDIT_REPORT,
};
use crate::dialect::{render, Dialect, DropPlan, DropStep, SqlContext};
use crate::error::{EXIT_DRIFT, EXIT_OK};
use crate::gate::{self, db_message, Reason, Tolerance};
use crate::ledger::records::{AuditOptionsRecord, Checked};
use crate::lock;
use crate::mapping::Mapping;
use crate::stages::audit;
use crate::tables::LEDGER_TABLE;

/// The final audit run inside the gate.
#[derive(Debug, Clone, Serialize)]
pub struct FinalAudit {
    /// Its ledger id.
    pub id: Option<i64>,
    /// Whether it passed.
    pub passed: bool,
    /// The limits it crossed.
    pub crossed: Vec<String>,
    /// The tolerance it ran with.
    pub tolerance: Tolerance,
    /// Rows checked.
    pub rows_checked: u64,
    /// Drifting rows.
    pub drifting_rows: u64,
    /// Its report.
    pub report: String,
    /// The report's SHA-256.
    pub report_sha256: String,
}

/// `--execute` after the gate: final audit, archive, verification, DDL.
#[allow(clippy::too_many_arguments)] // one call site, in `run`: the run's whole state
pub(super) async fn execute(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    ctx: &SqlContext,
    keys: &Keys,
    plan: &DropPlan,
    opts: &ContractOptions,
    contract_id: i64,
    verdict: &mut gate::Verdict,
    outcome: &mut ContractOutcome,
) -> Result<()> {
    // 1. The final audit, inside the gate.
    let Some(audit_id) = final_audit(conn, mapping, ctx.dialect, opts, verdict, outcome).await?
    else {
        return Ok(());
    };
    let dialect = ctx.dialect;

    // 2. The archive table, batch by batch.
    archive_rows(
        conn,
        ctx,
        keys,
        &outcome.target,
        contract_id,
        audit_id,
        opts.batch_size,
    )
    .await?;

    super::test_pause::pause_at("checksum").await;
    // 3. Verification: every row with its keys and value, and the checksums.
    let source = checksum(conn, ctx, keys, "source", None).await?;
    let archived = checksum(conn, ctx, keys, "archive", Some(contract_id)).await?;
    let missing: i64 = {
        let sql = render(
            "contract_missing.sql",
            ctx,
            minijinja::context! {
                param => dialect.placeholder(1),
                key_conv => keys.conv.clone(),
                key_subject => keys.subject.clone(),
                subject_col => keys.subject_col,
            },
        )?;
        sqlx::query_scalar(&sql)
            .bind(contract_id)
            .fetch_one(&mut *conn)
            .await
            .context("verifying the archive")?
    };
    if missing != 0 || source != archived {
        bail!(
            "the archive of contract run #{contract_id} does not verify: {missing} counter row(s) not archived with the same keys and value; source {source:?}, archive {archived:?} (a value changed while archiving?); nothing was dropped"
        );
    }
    let mut summary = ArchiveSummary {
        table: ARCHIVE_TABLE.into(),
        contract_id,
        audit_id,
        checksum: archived.clone(),
        csv: None,
        csv_sha256: None,
    };
    if let Some(path) = &opts.archive_csv {
        let (csv_sum, sha) = write_csv(conn, ctx, keys, contract_id, path).await?;
        if csv_sum != archived {
            bail!(
                "the CSV archive {} does not verify: {csv_sum:?}, archive table {archived:?}; nothing was dropped",
                path.display()
            );
        }
        summary.csv = Some(path.display().to_string());
        summary.csv_sha256 = Some(sha);
    }
    outcome.archive = Some(summary);

    // 4. The DDL, under a bounded lock wait, retried.
    super::test_pause::pause_at("ddl").await;
    if let Some(hook) = &opts.before_ddl {
        hook().await.context("the before-DDL hook")?;
    }
    let mut attempt = 0;
    loop {
        match run_plan(conn, ctx, keys, plan, &archived, &outcome.target).await {
            Ok(ran) => {
                outcome.ddl = ran;
                break;
            }
            Err(e) if lock::is_lock_wait(&e) && attempt < opts.lock_retries => {
                attempt += 1;
                let pause = Duration::from_millis(500u64 << attempt.min(4));
                tokio::time::sleep(pause).await;
            }
            Err(e) => {
                let tries = attempt + 1;
                return Err(e.context(format!(
                    "dropping {} ({tries} attempt(s)); the column and the archive of contract run #{contract_id} are intact",
                    outcome.target.describe()
                )));
            }
        }
    }
    outcome.executed = true;
    outcome.exit_code = EXIT_OK;
    Ok(())
}

/// The final audit, inside the gate (step 1 of `--execute`), with the tolerance of the newest
/// clean audit. Returns the audit's ledger id (`Some`), or `None` when it failed and no
/// `--force` bypasses it (the verdict and the outcome then say so).
///
/// Errors: the audit itself fails (exit 2 or 3, as the audit's).
pub(super) async fn final_audit(
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
        None => 5000,
    };
    let report = opts.audit_report.clone().unwrap_or_else(|| {
        match opts
            .archive_csv
            .as_ref()
            .and_then(|p| p.parent())
            .filter(|p| !p.as_os_str().is_empty())
        {
            Some(dir) => dir.join(DEFAULT_AUDIT_REPORT),
            None => PathBuf::from(DEFAULT_AUDIT_REPORT),
        }
    });
    #[allow(clippy::needless_update)] // options the audit may gain later keep their defaults
    let audit_opts = audit::AuditOptions {
        cap: tolerance.cap,
        report: report.clone(),
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
        .context("the final audit")?;
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
    if !s.passed {
        verdict.reasons.push(Reason::FinalAuditFailed {
            id: s.ledger_id,
            crossed: s.crossed.clone(),
        });
        verdict.open = false;
        outcome.exit_code = EXIT_DRIFT;
        outcome.verdict = Some(verdict.clone());
        if !opts.force {
            return Ok(None);
        }
        outcome.forced = opts.reason.clone();
    }
    outcome.verdict = Some(verdict.clone());
    Ok(Some(s.ledger_id))
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

/// Runs the plan once; returns the statements that ran, as printed. On failure, undoes the
/// attempt (ROLLBACK / UNLOCK TABLES) before returning the error.
pub(super) async fn run_plan(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    keys: &Keys,
    plan: &DropPlan,
    archived: &Checksum,
    target: &Target,
) -> Result<Vec<String>> {
    let mut ran = Vec::new();
    let result: Result<()> = async {
        for step in &plan.steps {
            match step {
                DropStep::Sql(sql) => {
                    sqlx::raw_sql(sql)
                        .execute(&mut *conn)
                        .await
                        .with_context(|| format!("running {sql}"))?;
                    ran.push(format!("{sql};"));
                }
                DropStep::Verify => {
                    let now = checksum(conn, ctx, keys, "source", None).await?;
                    if &now != archived {
                        bail!(
                            "{}.{} changed after it was archived (archive {archived:?}, now {now:?}): something still writes it; nothing was dropped",
                            target.table,
                            target.column
                        );
                    }
                    ran.extend(step.lines(&target.drop_target()));
                }
                DropStep::ForeignKeyCheck(sql) => {
                    let rows = sqlx::query(sql).fetch_all(&mut *conn).await?;
                    if !rows.is_empty() {
                        bail!("{sql} found {} foreign key violation(s)", rows.len());
                    }
                    ran.push(format!("{sql};"));
                }
                DropStep::InstantOrDefault { instant, default } => {
                    match sqlx::raw_sql(instant).execute(&mut *conn).await {
                        Ok(_) => ran.push(format!("{instant};")),
                        Err(e) if ctx.dialect.ddl().instant_refused(&e) => {
                            sqlx::raw_sql(default)
                                .execute(&mut *conn)
                                .await
                                .with_context(|| format!("running {default}"))?;
                            ran.push(format!(
                                "-- the server refused INSTANT: {}",
                                db_message(&e)
                            ));
                            ran.push(format!("{default};"));
                        }
                        Err(e) => {
                            return Err(anyhow::Error::from(e).context(format!("running {instant}")))
                        }
                    }
                }
            }
        }
        Ok(())
    }
    .await;
    match result {
        Ok(()) => Ok(ran),
        Err(e) => {
            for sql in &plan.on_failure {
                let _ = sqlx::raw_sql(sql).execute(&mut *conn).await;
            }
            Err(e)
        }
    }
}

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
    gate: GateEvidence<'a>,
    statements: &'a gate::StatementUse,
    final_audit: &'a Option<super::FinalAudit>,
    archive: &'a Option<ArchiveSummary>,
    ddl: &'a [String],
    executed: bool,
    forced: Option<Forced<'a>>,
    error: Option<String>,
}

/// The summary the ledger keeps with the run: the gate's evidence and what was done.
pub(super) fn evidence(
    outcome: &ContractOutcome,
    verdict: &gate::Verdict,
    opts: &ContractOptions,
    error: Option<&anyhow::Error>,
) -> Result<serde_json::Value> {
    let reasons: Vec<String> = verdict.reasons.iter().map(|r| r.to_string()).collect();
    Ok(serde_json::to_value(ContractEvidence {
        target: &outcome.target,
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
        error: error.map(|e| format!("{e:#}")),
    })?)
}
