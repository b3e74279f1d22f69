//! Before the gate: where each target stands (still there, dropped by an earlier run whose
//! archive holds it, or missing), and for each one still there the checks and the plan: its
//! archive keys name one row each and its values are integers the archive can keep, the
//! engine's drop plan, the rights it needs (named in a dry
//! run), the objects that depend on it, and the DDL as printed.

use anyhow::Result;
use sqlx::AnyConnection;

use super::archive::{refuse_ambiguous_keys, refuse_non_integers};
use super::dependents::{dependents, Dependent};
use super::options::ContractOptions;
use super::target::{keys_of, Keys, Origin, Target};
use super::unrecorded::{self, Standing};
use crate::db::catalog::{is_view, table_columns};
use crate::dialect::{DropPlan, SqlContext};
use crate::error::input_error;
use crate::ledger::records::Checksum;
use crate::mapping::{Mapping, Shape};

/// A target and what the run learnt of it.
pub struct Planned {
    /// The target.
    pub target: Target,
    /// Done by an earlier contract run (its id): the column is gone and that run's archive
    /// holds it, recorded as done or verified ([`Planned::unrecorded`]).
    pub done_by: Option<i64>,
    /// Set when the run that did it is not recorded as done (its process ended after the DDL
    /// committed): the checksum of its archive of the target, equal to what the run recorded
    /// before its DDL ([`unrecorded::standing`]).
    pub unrecorded: Option<Checksum>,
    /// Its archive keys, its SQL context, its drop plan and the objects that depend on it
    /// (None when done).
    pub plan: Option<TargetPlan>,
}

/// What dropping one target takes.
pub struct TargetPlan {
    /// The archive keys.
    pub keys: Keys,
    /// The SQL context whose counter is the target.
    pub ctx: SqlContext,
    /// The engine's drop plan.
    pub drop: DropPlan,
    /// The objects that depend on the column.
    pub dependents: Vec<Dependent>,
}

/// Where each target stands: still there, or dropped by the contract run whose archive holds
/// it (recorded as done, or not recorded with an archive that verifies against what the run
/// recorded before its DDL); and for a counter column without a `[contract]` section, whether
/// its table holds nothing else (`--drop-table`).
///
/// Errors (exit 2): a target on a view, a target that is gone without an archive of it or
/// whose archive nothing proves complete ([`unrecorded::standing`]), `--drop-table` on a table
/// that holds more than the keys and the counter.
pub async fn find(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    ctx: &SqlContext,
    targets: Vec<Target>,
    opts: &ContractOptions,
    notes: &mut Vec<String>,
) -> Result<Vec<Planned>> {
    let dialect = ctx.dialect;
    let mut out = Vec::new();
    for mut target in targets {
        if is_view(conn, dialect, &target.table).await? {
            return Err(input_error(match target.origin {
                Origin::Counter => format!(
                    "the counter lives in {:?}, which is a view: contract drops a column of a table; map the table that holds the counter (the view's base table) to contract it",
                    target.table
                ),
                Origin::Declared => format!(
                    "[contract] names {:?}, which is a view: contract drops columns of tables; name the table that holds the column",
                    target.table
                ),
            }));
        }
        let columns = table_columns(conn, ctx, &target.table).await?;
        let present = if target.drop_table {
            !columns.is_empty()
        } else {
            columns
                .iter()
                .any(|c| c.eq_ignore_ascii_case(&target.column))
        };
        let (mut done_by, mut unrecorded) = (None, None);
        if !present {
            let Some(run) =
                crate::ledger::archived_by(conn, dialect, &target.table, &target.column).await?
            else {
                return Err(gone(&target, columns.is_empty()));
            };
            done_by = Some(run);
            if let Standing::Unrecorded(sum) = unrecorded::standing(conn, ctx, &target, run).await?
            {
                unrecorded = Some(sum);
            }
        } else if target.origin == Origin::Counter {
            own_table(mapping, &mut target, &columns, opts, notes)?;
        }
        out.push(Planned {
            target,
            done_by,
            unrecorded,
            plan: None,
        });
    }
    Ok(out)
}

/// When every target is gone: the newest contract run that dropped one of them, if the ledger
/// does not record its end (its process ended after its last DDL committed; its archive
/// verifies: [`Planned::unrecorded`]). None when a target is still there, or that run is
/// recorded as done.
pub fn unrecorded_run(planned: &[Planned]) -> Option<i64> {
    if planned.is_empty() || planned.iter().any(|p| p.done_by.is_none()) {
        return None;
    }
    let newest = planned.iter().filter_map(|p| p.done_by).max()?;
    planned
        .iter()
        .any(|p| p.done_by == Some(newest) && p.unrecorded.is_some())
        .then_some(newest)
}

/// A target that is gone and that no archive holds.
fn gone(target: &Target, table_gone: bool) -> anyhow::Error {
    input_error(match (target.origin, table_gone) {
        (Origin::Counter, true) => format!(
            "counter table {:?} does not exist, and tidemark_counter_archive holds no archive of it",
            target.table
        ),
        (Origin::Counter, false) => format!(
            "counter.column {:?} not found in table {:?}, and tidemark_counter_archive holds no archive of it",
            target.column, target.table
        ),
        (Origin::Declared, true) => format!(
            "[contract] table {:?} does not exist, and tidemark_counter_archive holds no archive of it",
            target.table
        ),
        (Origin::Declared, false) => format!(
            "[contract] column {:?} not found in table {:?}, and tidemark_counter_archive holds no archive of it",
            target.column, target.table
        ),
    })
}

/// Whether the counter's table holds nothing but the keys and the counter (then
/// `--drop-table` may drop it whole, and a note says so), and `--drop-table`'s refusals.
///
/// Errors (exit 2): `--drop-table` on the messages table or on a table that holds more.
fn own_table(
    mapping: &Mapping,
    target: &mut Target,
    columns: &[String],
    opts: &ContractOptions,
    notes: &mut Vec<String>,
) -> Result<()> {
    let keys_and_counter = [&target.conversation, &target.subject, &target.column];
    let others: Vec<String> = columns
        .iter()
        .filter(|c| !keys_and_counter.iter().any(|k| k.eq_ignore_ascii_case(c)))
        .cloned()
        .collect();
    let members_table = mapping.members.as_ref().map(|m| m.table.as_str());
    target.table_of_its_own = target.shape == Shape::PerMember
        && others.is_empty()
        && members_table != Some(target.table.as_str());
    if !opts.drop_table {
        if target.table_of_its_own {
            notes.push(format!(
                "{} holds nothing but the keys and the counter: --drop-table drops the whole table instead of the column",
                target.table
            ));
        }
        return Ok(());
    }
    if target.shape == Shape::PerMessage {
        return Err(input_error(format!(
            "--drop-table: a per_message counter lives on the messages table {:?}; only its column is dropped",
            target.table
        )));
    }
    if !target.table_of_its_own {
        return Err(input_error(format!(
            "--drop-table: table {:?} holds more than the keys and the counter ({}); only the column can be dropped",
            target.table,
            if others.is_empty() {
                "it is the members table".to_string()
            } else {
                others.join(", ")
            }
        )));
    }
    Ok(())
}

/// Plans each target still there: its keys name one row each, the engine's drop plan, the
/// rights it needs (named in a dry run; `--execute` stops on them before writing anything),
/// the objects that depend on it. Returns the DDL as printed; notes go into `notes`.
///
/// Errors: exit 2 for keys that name several rows or a drop the engine refuses (a SQLite
/// trigger that uses the column); exit 3 for a database failure.
pub async fn plan(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    ctx: &SqlContext,
    planned: &mut [Planned],
    opts: &ContractOptions,
    notes: &mut Vec<String>,
) -> Result<Vec<String>> {
    let declared = mapping.contract.is_some();
    let mut ddl = Vec::new();
    if declared {
        ddl.push(format!(
            "-- the counter's value: {} (read by the final audit before any archive)",
            mapping.counter.value_sql(|s| s.to_string())
        ));
    }
    if planned.is_empty() {
        notes.push(
            "[contract] drop = \"nothing\": the counter was never stored; the contract archives nothing and drops nothing, and --execute records the gate's decision in the ledger"
                .into(),
        );
        ddl.push("-- [contract] drop = \"nothing\": no archive, no DDL; --execute records the gate's decision".into());
    }
    for p in planned.iter_mut() {
        let t = &p.target;
        if let Some(id) = p.done_by {
            notes.push(format!(
                "{} is gone: dropped by contract run #{id}, whose archive holds its values",
                t.describe()
            ));
            ddl.push(format!("-- {}: done by contract run #{id}", t.describe()));
            continue;
        }
        let (keys, tctx) = keys_of(conn, mapping, ctx, t).await?;
        let subject = (!keys.subject.is_empty()).then_some(keys.subject.as_str());
        refuse_ambiguous_keys(conn, &tctx, &keys.conv, subject, &t.describe()).await?;
        refuse_non_integers(conn, &tctx, &keys, t).await?;
        let drop = ctx
            .dialect
            .ddl()
            .plan_drop(conn, &t.drop_target(), opts.lock_timeout, opts.execute)
            .await?;
        notes.extend(drop.notes.iter().cloned());
        if !opts.execute {
            notes.extend(
                crate::db::privileges::missing_ddl_right(
                    conn,
                    ctx.dialect,
                    &t.table,
                    t.drop_table,
                    opts.lock_timeout,
                )
                .await?,
            );
        }
        if declared {
            ddl.push(format!(
                "-- {}: archived per row of {} ({}), verified, then:",
                t.describe(),
                t.table,
                if keys.subject.is_empty() {
                    "one row per conversation".to_string()
                } else {
                    format!("conversation, {}", keys.subject_col)
                }
            ));
        }
        ddl.extend(drop.lines(&t.drop_target()));
        let found = dependents(conn, &tctx, &t.table, &t.column).await?;
        p.plan = Some(TargetPlan {
            keys,
            ctx: tctx,
            drop,
            dependents: found,
        });
    }
    Ok(ddl)
}
