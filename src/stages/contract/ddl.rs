//! The drop itself: the engine's plan run under a bounded lock wait, retried a few times after
//! a lock wait, with the column compared with the archive again inside the lock, row by row
//! (keys and value) and by checksum, so that a value written since the archive (even two
//! values swapped, which keeps every sum) stops the drop instead of being lost.

use anyhow::{bail, Context, Result};
use sqlx::AnyConnection;
use std::time::Duration;

use super::archive::{checksum, missing, Checksum};
use super::options::ContractOptions;
use super::target::{Keys, Target};
use crate::dialect::{DropPlan, DropStep, SqlContext};
use crate::gate::db_message;
use crate::tables::ARCHIVE_TABLE;

/// Runs `plan` for `target`, again after a lock wait (at most `--lock-retries` more times, with
/// a growing pause); returns the statements that ran, as printed.
///
/// Errors (exit 3): the drop failed (the attempt is undone: ROLLBACK or UNLOCK TABLES), or
/// the column changed after it was archived; the column and the archive are intact. When the
/// session with the server was lost while the drop ran, the message says that whether the
/// server applied it is not known, and that the archive stays.
#[allow(clippy::too_many_arguments)] // one call site, in execute.rs: the target, its plan and the run
pub async fn drop_with_retries(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    keys: &Keys,
    plan: &DropPlan,
    archived: &Checksum,
    target: &Target,
    opts: &ContractOptions,
    contract_id: i64,
) -> Result<Vec<String>> {
    let mut attempt = 0;
    loop {
        match run_plan(conn, ctx, keys, plan, archived, target, contract_id).await {
            Ok(lines) => return Ok(lines),
            Err(e) if crate::lock::is_lock_wait(&e) && attempt < opts.lock_retries => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(500u64 << attempt.min(4))).await;
            }
            Err(e) => {
                let tries = attempt + 1;
                let what = target.describe();
                // Issue 25, row 14: a lost session leaves the statement's fate unknown.
                if crate::dialect::Dialect::error_is_connection_lost(&e) {
                    return Err(e.context(format!(
                        "dropping {what} ({tries} attempt(s)): the connection to the database was lost while it ran, so whether the server applied it is not known; the verified archive of contract run #{contract_id} stays in {ARCHIVE_TABLE}; run the same command again (it names a target already gone as dropped by this run)"
                    )));
                }
                return Err(e.context(format!(
                    "dropping {what} ({tries} attempt(s)); it and the archive of contract run #{contract_id} are intact"
                )));
            }
        }
    }
}

/// Runs the plan once; returns the statements that ran, as printed. On failure, undoes the
/// attempt (ROLLBACK / UNLOCK TABLES) before returning the error. The check inside the lock
/// (`DropStep::Verify`) compares the column with contract run `contract_id`'s archive.
async fn run_plan(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    keys: &Keys,
    plan: &DropPlan,
    archived: &Checksum,
    target: &Target,
    contract_id: i64,
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
                    let now = checksum(conn, ctx, target, None).await?;
                    let missing = missing(conn, ctx, keys, target, contract_id)
                        .await
                        .context("comparing the column with the archive inside the lock")?;
                    if &now != archived || missing != 0 {
                        bail!(
                            "{}.{} changed after it was archived ({missing} row(s) no longer as archived, keys and value; archive {archived:?}, now {now:?}): something still writes it; nothing was dropped",
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
