//! The contract of a mapping with a `[contract]` section (issue 12): targets declared apart
//! from the counter's value: columns on any mapped table, the counter table, or nothing.
//!
//! The same steps as the one-column contract ([`super::run`]), per target:
//!
//! - each column is archived with the keys of its own table (`[counter]`/`[members]`:
//!   conversation and user; `[conversations]`: the conversation alone, user NULL, so a
//!   conversation-wide total is archived once per conversation; `[messages]`: conversation and
//!   message id), verified (no row missing with its keys and value; rows, non-NULL values,
//!   sum and sum of squares equal to the column's), then dropped under its table's lock after
//!   the checksum is taken again inside it (SQLite: in place or by the table rebuild);
//! - dependents (views, indexes, triggers, foreign keys) are found per target by the dry run;
//! - one final audit runs before the first archive;
//! - `drop = "nothing"` (a counter that was never stored): the gate is decided, the final audit
//!   runs, the ledger records the decision; nothing is archived or dropped.
//!
//! Resuming after a kill (`kill -9` between two drops): a target whose column is gone and
//! whose archive rows exist is done, by the contract run that archived it. The counter's value
//! cannot be read any more once one of its columns is gone, so a resumed run does not audit
//! again: it relies on the final audit of the run that dropped the first target (recorded
//! with that run's archive rows) and goes on with the targets left, each archived and
//! verified as above. `--archive FILE` and `--drop-table` belong to the one-column form.

use anyhow::{bail, Context, Result};
use serde::Serialize;
use sqlx::AnyConnection;
use std::time::Duration;

use super::archive::checksum;
use super::execute::{evidence, final_audit, run_plan};
use super::{
    dependents, plan, runner_lock_name, ArchiveSummary, ContractOptions, ContractOutcome, Keys,
    Target, ARCHIVE_TABLE,
};
use crate::db::catalog::table_columns;
use crate::db::tx::{begin_write, commit, rollback};
use crate::dialect::{render, Dialect, SqlContext};
use crate::error::{input_error, EXIT_DRIFT, EXIT_OK};
use crate::gate::{self, read_audits, statement_use};
use crate::ledger::{self, RunStatus, Stage};
use crate::lock::{self, RunnerLock};
use crate::mapping::{ContractTargets, DropColumn, Mapping, Shape};
use crate::schema::{self, KeyKind};
use crate::stages::batch::BatchUnit;
use crate::tables::LEDGER_TABLE;
use crate::values::now_ms;

/// One target's archive, as verified.
#[derive(Debug, Clone, Serialize)]
pub struct TargetArchive {
    /// `table.column` archived.
    pub target: String,
    /// The checksum of the archived values, equal to the column's.
    pub checksum: super::Checksum,
}

/// A target with its keys, quoted, and its SQL context (the counter location replaced by the
/// target: the archive templates read `ctr.table` and `ctr.column`).
struct Planned {
    target: Target,
    keys: Keys,
    ctx: SqlContext,
    /// Done by an earlier contract run (its id): the column is gone and its archive exists.
    done_by: Option<i64>,
}

/// The contract of a mapping with a `[contract]` section (see the module documentation).
///
/// Errors: as [`super::run`]; exit 2 also for `--drop-table` or `--archive` (the one-column
/// form's options), `drop = "table"` with a counter given as `value`, a target column that is
/// gone without an archive of it.
pub(super) async fn run(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
    opts: &ContractOptions,
) -> Result<ContractOutcome> {
    if opts.drop_table {
        return Err(input_error(
            "--drop-table: the mapping's [contract] section says what is dropped (drop = \"table\")",
        ));
    }
    if opts.archive_csv.is_some() {
        return Err(input_error(
            "--archive FILE: not available with a [contract] section yet; the archive table tidemark_counter_archive holds every dropped value (query it per counter_table, counter_column)",
        ));
    }
    let ctx = SqlContext::new(mapping, dialect);
    let targets = targets_of(mapping)?;
    let mut planned = Vec::new();
    for t in targets {
        let (keys, tctx) = keys_of(conn, mapping, &ctx, &t).await?;
        planned.push(Planned {
            target: t,
            keys,
            ctx: tctx,
            done_by: None,
        });
    }
    for p in &mut planned {
        let t = &p.target;
        if crate::db::catalog::is_view(conn, dialect, &t.table).await? {
            return Err(input_error(format!(
                "[contract] names {:?}, which is a view: contract drops columns of tables; name the table that holds the column",
                t.table
            )));
        }
        let columns = table_columns(conn, &ctx, &t.table).await?;
        let present = if t.drop_table {
            !columns.is_empty()
        } else {
            columns.iter().any(|c| c.eq_ignore_ascii_case(&t.column))
        };
        if !present {
            match crate::ledger::archived_by(conn, dialect, &t.table, &t.column).await? {
                Some(id) => p.done_by = Some(id),
                None if columns.is_empty() => {
                    return Err(input_error(format!(
                        "[contract] table {:?} does not exist, and tidemark_counter_archive holds no archive of it",
                        t.table
                    )))
                }
                None => {
                    return Err(input_error(format!(
                        "[contract] column {:?} not found in table {:?}, and tidemark_counter_archive holds no archive of it",
                        t.column, t.table
                    )))
                }
            }
        }
    }
    let describe_all = planned
        .iter()
        .map(|p| p.target.describe())
        .collect::<Vec<_>>()
        .join(", ");
    let first = planned
        .first()
        .map(|p| p.target.clone())
        .unwrap_or_else(|| nothing_target(mapping));
    let mut outcome = ContractOutcome {
        target: first.clone(),
        targets: planned.iter().map(|p| p.target.clone()).collect(),
        value: Some(mapping.counter.value_sql(|s| s.to_string())),
        target_archives: Vec::new(),
        nothing_to_drop: None,
        verdict: None,
        ddl: Vec::new(),
        notes: Vec::new(),
        executed: false,
        final_audit: None,
        archive: None,
        forced: None,
        ledger_id: None,
        exit_code: EXIT_OK,
        failure: None,
    };
    if !planned.is_empty() && planned.iter().all(|p| p.done_by.is_some()) {
        let runs: Vec<String> = planned
            .iter()
            .filter_map(|p| p.done_by.map(|id| format!("#{id}")))
            .collect();
        outcome.nothing_to_drop = Some(format!(
            "nothing left to drop: {describe_all} are gone (dropped by contract run {})",
            dedup(runs).join(", ")
        ));
        return Ok(outcome);
    }
    let resumed_from = planned.iter().find_map(|p| p.done_by);
    if resumed_from.is_none() {
        schema::preflight(conn, mapping, dialect).await?;
    }
    if !crate::db::catalog::table_exists(conn, dialect, LEDGER_TABLE).await? {
        return Err(input_error(
            "the ledger table tidemark_ledger does not exist: run `tidemark expand`, `backfill` and `audit` first",
        ));
    }
    if !crate::db::catalog::table_exists(conn, dialect, ARCHIVE_TABLE).await? {
        return Err(input_error(format!(
            "the archive table {ARCHIVE_TABLE} does not exist: run `tidemark expand` (migration V3__counter_archive)"
        )));
    }

    // Plans, dependents and the gate.
    // The counter's value is shown by the outcome's `value` and the first DDL line.
    let mut notes = Vec::new();
    if planned.is_empty() {
        notes.push(
            "[contract] drop = \"nothing\": the counter was never stored; the contract archives nothing and drops nothing, and --execute records the gate's decision in the ledger"
                .into(),
        );
    }
    let mut plans = Vec::new();
    let mut found_all = Vec::new();
    let mut ddl = vec![format!(
        "-- the counter's value: {} (read by the final audit before any archive)",
        mapping.counter.value_sql(|s| s.to_string())
    )];
    if planned.is_empty() {
        ddl.push("-- [contract] drop = \"nothing\": no archive, no DDL; --execute records the gate's decision".into());
    }
    for p in &planned {
        if let Some(id) = p.done_by {
            notes.push(format!(
                "{} is gone: dropped by contract run #{id}, whose archive holds its values",
                p.target.describe()
            ));
            ddl.push(format!(
                "-- {}: done by contract run #{id}",
                p.target.describe()
            ));
            plans.push(None);
            continue;
        }
        super::archive::refuse_ambiguous_keys(
            conn,
            &p.ctx,
            &p.keys.conv,
            (!p.keys.subject.is_empty()).then_some(p.keys.subject.as_str()),
            &p.target.describe(),
        )
        .await?;
        let pl = plan(conn, &p.ctx, &p.target, opts).await?;
        notes.extend(pl.notes.iter().cloned());
        if !opts.execute {
            // The right to change each table, named in the dry run (issue 13; `--execute`
            // stops on it before writing anything).
            notes.extend(
                crate::db::privileges::missing_ddl_right(
                    conn,
                    dialect,
                    &p.target.table,
                    p.target.drop_table,
                    opts.lock_timeout,
                )
                .await?,
            );
        }
        ddl.push(format!(
            "-- {}: archived per row of {} ({}), verified, then:",
            p.target.describe(),
            p.target.table,
            if p.keys.subject.is_empty() {
                "one row per conversation".to_string()
            } else {
                format!("conversation, {}", p.keys.subject_col)
            }
        ));
        ddl.extend(pl.lines(&p.target.drop_target()));
        let found = dependents(conn, &p.ctx, &p.target.table, &p.target.column).await?;
        found_all.push((found, p.target.column.clone()));
        plans.push(Some(pl));
    }
    let statements = match planned.iter().find(|p| p.done_by.is_none()) {
        Some(p) => statement_use(conn, &ctx, &p.target.table, &p.target.column, mapping).await,
        None => {
            statement_use(
                conn,
                &ctx,
                mapping.counter_table(),
                &mapping.counter.column,
                mapping,
            )
            .await
        }
    };
    let audits = read_audits(conn, dialect, &mapping.fingerprint).await?;
    let mut verdict = gate::decide(
        &audits,
        &mapping.fingerprint,
        now_ms(),
        &opts.gate,
        &statements,
    );
    for (found, column) in &found_all {
        super::dependents::apply(&mut verdict, &mut notes, found, column);
    }
    if let Some(id) = resumed_from {
        notes.push(format!(
            "resuming: a target was dropped by contract run #{id}; the counter's value cannot be read any more, so the final audit of that run stands"
        ));
    }
    outcome.ddl = ddl;
    outcome.notes = notes;
    outcome.verdict = Some(verdict.clone());
    outcome.exit_code = if verdict.open { EXIT_OK } else { EXIT_DRIFT };
    if !verdict.open && opts.force {
        outcome.forced = opts.reason.clone();
    }
    if !opts.execute || (!verdict.open && !opts.force) {
        return Ok(outcome);
    }

    // --execute.
    let ddl_targets: Vec<(&str, bool)> = planned
        .iter()
        .filter(|p| p.done_by.is_none())
        .map(|p| (p.target.table.as_str(), p.target.drop_table))
        .collect();
    crate::db::privileges::for_contract(conn, dialect, &ddl_targets, opts.lock_timeout).await?;
    let lock_name = runner_lock_name(&mapping.fingerprint);
    let runner = RunnerLock::acquire(conn, dialect, &lock_name).await?;
    let options_json = serde_json::to_value(super::options_record(opts))?;
    let result = async {
        let id = ledger::start(
            conn,
            dialect,
            Stage::Contract,
            &mapping.fingerprint,
            &options_json,
        )
        .await?;
        // Under the runner lock: an older contract run still `running` here was killed.
        ledger::abandon_stale(conn, dialect, Stage::Contract, &mapping.fingerprint, id).await?;
        outcome.ledger_id = Some(id);
        let result = execute(
            conn,
            dialect,
            mapping,
            &planned,
            &plans,
            opts,
            id,
            resumed_from,
            &mut verdict,
            &mut outcome,
        )
        .await;
        let mut summary = evidence(&outcome, &verdict, opts, result.as_ref().err())?;
        summary["targets"] = serde_json::to_value(&outcome.targets)?;
        summary["target_archives"] = serde_json::to_value(&outcome.target_archives)?;
        summary["value"] = serde_json::to_value(&outcome.value)?;
        let (status, open) = match &result {
            Ok(()) if outcome.executed => (RunStatus::Done, Some(verdict.open)),
            Ok(()) => (RunStatus::Refused, Some(false)),
            Err(_) => (RunStatus::Failed, None),
        };
        let finished = ledger::finish(conn, dialect, id, status, &summary, open, None, None).await;
        match (&result, finished) {
            (Ok(()), Err(e)) if outcome.executed => {
                return Err(e.context(format!(
                    "{describe_all} dropped (archive: contract run #{id} in {ARCHIVE_TABLE}), but the ledger could not record it"
                )))
            }
            (Ok(()), Err(e)) => return Err(e),
            _ => {}
        }
        result
    }
    .await;
    let _ = runner.release(conn).await;
    super::conclude(outcome, verdict, result, dialect)
}

/// `--execute` after the gate: the final audit (unless resuming), then per target the
/// archive, its verification and the DDL.
#[allow(clippy::too_many_arguments)] // one call site, in `run`: the run's whole state
async fn execute(
    conn: &mut AnyConnection,
    dialect: Dialect,
    mapping: &Mapping,
    planned: &[Planned],
    plans: &[Option<crate::dialect::DropPlan>],
    opts: &ContractOptions,
    contract_id: i64,
    resumed_from: Option<i64>,
    verdict: &mut gate::Verdict,
    outcome: &mut ContractOutcome,
) -> Result<()> {
    let audit_id = match resumed_from {
        None => match final_audit(conn, mapping, dialect, opts, verdict, outcome).await? {
            Some(id) => id,
            None => return Ok(()),
        },
        Some(run) => {
            outcome.verdict = Some(verdict.clone());
            audit_of_run(conn, dialect, run).await?
        }
    };
    let mut ran = Vec::new();
    for (p, pl) in planned.iter().zip(plans) {
        let Some(pl) = pl else {
            continue;
        };
        let t = &p.target;
        // The archive: one INSERT … SELECT of every row of the target's table.
        let sql = render(
            "contract_archive.sql",
            &p.ctx,
            minijinja::context! {
                p => (1..=5).map(|n| dialect.placeholder(n)).collect::<Vec<_>>(),
                range => crate::dialect::RangeParams::default(),
                key_conv => p.keys.conv.clone(),
                key_subject => (!p.keys.subject.is_empty()).then(|| p.keys.subject.clone()),
                subject_col => p.keys.subject_col,
            },
        )?;
        begin_write(conn, dialect).await?;
        let q = sqlx::query(&sql)
            .bind(contract_id)
            .bind(audit_id)
            .bind(t.table.clone())
            .bind(t.column.clone())
            .bind(now_ms());
        match q.execute(&mut *conn).await {
            Ok(_) => commit(conn).await?,
            Err(e) => {
                rollback(conn).await;
                return Err(anyhow::Error::from(e)
                    .context(format!("archiving the values of {}", t.describe())));
            }
        }
        // Verification.
        let archive_of = [literal(&t.table), literal(&t.column)];
        let source = checksum(conn, &p.ctx, &p.keys, "source", None).await?;
        let archived = archive_checksum(conn, &p.ctx, &p.keys, contract_id, &archive_of).await?;
        let missing: i64 = {
            let sql = render(
                "contract_missing.sql",
                &p.ctx,
                minijinja::context! {
                    param => dialect.placeholder(1),
                    key_conv => p.keys.conv.clone(),
                    key_subject => (!p.keys.subject.is_empty()).then(|| p.keys.subject.clone()),
                    subject_col => p.keys.subject_col,
                    archive_of => archive_of.clone(),
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
                "the archive of {} (contract run #{contract_id}) does not verify: {missing} row(s) not archived with the same keys and value; source {source:?}, archive {archived:?}; {} not dropped",
                t.describe(),
                t.describe()
            );
        }
        outcome.target_archives.push(TargetArchive {
            target: format!("{}.{}", t.table, t.column),
            checksum: archived.clone(),
        });
        if outcome.archive.is_none() {
            outcome.archive = Some(ArchiveSummary {
                table: ARCHIVE_TABLE.into(),
                contract_id,
                audit_id,
                checksum: archived.clone(),
                csv: None,
                csv_sha256: None,
            });
        }
        // The DDL, under a bounded lock wait, retried.
        if let Some(hook) = &opts.before_ddl {
            hook().await.context("the before-DDL hook")?;
        }
        let mut attempt = 0;
        loop {
            match run_plan(conn, &p.ctx, &p.keys, pl, &archived, t).await {
                Ok(lines) => {
                    ran.extend(lines);
                    break;
                }
                Err(e) if lock::is_lock_wait(&e) && attempt < opts.lock_retries => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(500u64 << attempt.min(4))).await;
                }
                Err(e) => {
                    let tries = attempt + 1;
                    outcome.ddl = ran;
                    return Err(e.context(format!(
                        "dropping {} ({tries} attempt(s)); it and the archive of contract run #{contract_id} are intact",
                        t.describe()
                    )));
                }
            }
        }
    }
    outcome.ddl = ran;
    outcome.executed = true;
    outcome.exit_code = EXIT_OK;
    Ok(())
}

/// The checksum of one target's rows in one contract run's archive.
async fn archive_checksum(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    keys: &Keys,
    contract_id: i64,
    archive_of: &[String; 2],
) -> Result<super::Checksum> {
    let sql = render(
        "contract_checksum.sql",
        ctx,
        minijinja::context! {
            side => "archive",
            param => ctx.dialect.placeholder(1),
            exact_type => ctx.dialect.exact_decimal(),
            text_type => ctx.dialect.text_type(),
            key_conv => keys.conv.clone(),
            archive_of => archive_of.clone(),
        },
    )?;
    let row = sqlx::query(&sql)
        .bind(contract_id)
        .fetch_one(&mut *conn)
        .await
        .context("computing the archive checksum")?;
    use sqlx::Row;
    Ok(super::Checksum {
        rows: row.try_get("n")?,
        non_null: row.try_get("non_null")?,
        sum: super::archive::normalise_decimal(
            &crate::values::text(&row, "total")?.unwrap_or_default(),
        ),
        sum_squares: super::archive::normalise_decimal(
            &crate::values::text(&row, "squares")?.unwrap_or_default(),
        ),
    })
}

/// An identifier the mapping validated (letters, digits, `_`, `$`, one dot) as an SQL string
/// literal.
fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The audit that covered contract run `run`'s archive (its final audit).
async fn audit_of_run(conn: &mut AnyConnection, dialect: Dialect, run: i64) -> Result<Option<i64>> {
    let sql = format!(
        "SELECT MAX(audit_id) AS id FROM {ARCHIVE_TABLE} WHERE contract_id = {}",
        dialect.placeholder(1)
    );
    Ok(sqlx::query_scalar(&sql)
        .bind(run)
        .fetch_one(&mut *conn)
        .await?)
}

/// The first target of the mapping's `[contract]` section (for `drop = "nothing"`, the
/// counter table without a column): what a finished run records as its `target`.
///
/// Errors (exit 2): as [`targets_of`].
pub(super) fn first_target(mapping: &Mapping) -> Result<Target> {
    Ok(targets_of(mapping)?
        .into_iter()
        .next()
        .unwrap_or_else(|| nothing_target(mapping)))
}

/// The targets of the mapping's `[contract]` section.
fn targets_of(mapping: &Mapping) -> Result<Vec<Target>> {
    let shape = mapping.counter.shape;
    Ok(match mapping.contract_targets() {
        ContractTargets::Nothing => Vec::new(),
        ContractTargets::Table(table) => {
            let Some(column) = mapping.counter.stored_column() else {
                return Err(input_error(format!(
                    "[contract] drop = \"table\" with [counter] value: tidemark archives a stored column before it drops a table; list the columns the value reads (drop = \"columns\") or map the counter as column = \"…\" (table {table:?})"
                )));
            };
            vec![Target {
                shape,
                table,
                column: column.to_string(),
                conversation: mapping.counter.conversation.clone().unwrap_or_default(),
                subject: mapping.counter.user.clone().unwrap_or_default(),
                table_of_its_own: true,
                drop_table: true,
            }]
        }
        ContractTargets::Columns(cols) => cols
            .iter()
            .map(|DropColumn { table, column }| {
                let (conversation, subject) = row_keys(mapping, table);
                Target {
                    shape,
                    table: table.clone(),
                    column: column.clone(),
                    conversation,
                    subject,
                    table_of_its_own: false,
                    drop_table: false,
                }
            })
            .collect(),
    })
}

/// The key columns of a mapped table's rows (unquoted): (conversation, subject), the subject
/// empty for the `[conversations]` table.
fn row_keys(mapping: &Mapping, table: &str) -> (String, String) {
    let c = &mapping.counter;
    if mapping.counter_table() == table && c.shape == Shape::PerMember {
        return (
            c.conversation.clone().unwrap_or_default(),
            c.user.clone().unwrap_or_default(),
        );
    }
    if let Some(m) = mapping.members.as_ref().filter(|m| m.table == table) {
        return (m.conversation.clone(), m.user.clone());
    }
    if let Some(k) = mapping.conversations.as_ref().filter(|k| k.table == table) {
        return (k.key.clone(), String::new());
    }
    (
        mapping.messages.conversation.clone(),
        mapping.messages.id.clone(),
    )
}

/// The archive keys of a target and the SQL context whose counter is the target.
async fn keys_of(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    ctx: &SqlContext,
    t: &Target,
) -> Result<(Keys, SqlContext)> {
    let (user, conv) = schema::watermark_key_types(conn, mapping, ctx).await?;
    let d = ctx.dialect;
    let on_messages =
        t.table == mapping.messages.table && t.subject == mapping.messages.id && !t.drop_table;
    let keys = Keys {
        conv: d.quote(&t.conversation),
        subject: if t.subject.is_empty() {
            String::new()
        } else {
            d.quote(&t.subject)
        },
        subject_col: if on_messages { "message_id" } else { "user_id" },
        unit: BatchUnit::Counters,
        conv_kind: conv.kind,
        subject_kind: if on_messages {
            KeyKind::Integer
        } else {
            user.kind
        },
    };
    let mut tctx = ctx.clone();
    tctx.ctr.table = d.quote(&t.table);
    tctx.ctr.column = d.quote(&t.column);
    tctx.ctr.conv = keys.conv.clone();
    tctx.ctr.user = keys.subject.clone();
    Ok((keys, tctx))
}

/// A target describing "nothing to drop" (drop = "nothing"): the counter table, no column.
fn nothing_target(mapping: &Mapping) -> Target {
    Target {
        shape: mapping.counter.shape,
        table: mapping.counter_table().to_string(),
        column: String::new(),
        conversation: mapping.counter.conversation.clone().unwrap_or_default(),
        subject: mapping.counter.user.clone().unwrap_or_default(),
        table_of_its_own: false,
        drop_table: false,
    }
}

/// `v` without repeats, in order.
fn dedup(v: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in v {
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}
