//! The gate's verdict for a contract run and for `status`, and what the ledger says of an
//! earlier contract ([`dropped_by`], [`standing`]). Reads only.

use anyhow::Result;
use sqlx::AnyConnection;

use super::dependents::{self, dependents};
use super::options::ContractOptions;
use super::planning::{self, Planned};
use super::target::{first_target, targets_of};
use crate::db::catalog::table_exists;
use crate::dialect::{Dialect, SqlContext};
use crate::error::ErrorKind;
use crate::gate::{self, read_audits, statement_use, GateOptions};
use crate::mapping::Mapping;
use crate::tables::LEDGER_TABLE;
use crate::values::now_ms;

/// The gate's verdict for a run: the ledger's audits and the statement statistics of the
/// first target still there (or the counter's), closed by any object that depends on a
/// target (its notes name those that go with it).
///
/// Errors (exit 3): the ledger or the catalog cannot be read.
pub(super) async fn decide(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    ctx: &SqlContext,
    planned: &[Planned],
    opts: &ContractOptions,
    notes: &mut Vec<String>,
) -> Result<gate::Verdict> {
    let (table, column) = match planned.iter().find(|p| p.done_by.is_none()) {
        Some(p) => (p.target.table.as_str(), p.target.column.as_str()),
        None => (mapping.counter_table(), mapping.counter.column.as_str()),
    };
    let statements = statement_use(conn, ctx, table, column, mapping).await;
    let audits = read_audits(conn, ctx.dialect, &mapping.fingerprint).await?;
    let mut verdict = gate::decide(
        &audits,
        &mapping.fingerprint,
        now_ms(),
        &opts.gate,
        &statements,
    );
    for p in planned {
        if let Some(plan) = &p.plan {
            dependents::apply(&mut verdict, notes, &plan.dependents, &p.target.column);
        }
    }
    Ok(verdict)
}

/// The gate's verdict alone, for `status`: reads the ledger, the statement statistics and the
/// objects that depend on the first target; plans nothing and writes nothing.
///
/// Errors (exit 3): the ledger or the catalog cannot be read.
pub async fn verdict(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
    gate_options: &GateOptions,
) -> Result<gate::Verdict> {
    let ctx = SqlContext::new(mapping, dialect);
    let target = first_target(mapping);
    let statements = statement_use(conn, &ctx, &target.table, &target.column, mapping).await;
    let audits = read_audits(conn, dialect, &mapping.fingerprint).await?;
    let mut verdict = gate::decide(
        &audits,
        &mapping.fingerprint,
        now_ms(),
        gate_options,
        &statements,
    );
    let found = dependents(conn, &ctx, &target.table, &target.column).await?;
    dependents::apply(&mut verdict, &mut Vec::new(), &found, &target.column);
    Ok(verdict)
}

/// The contract run that dropped this mapping's counter (its first target), if one did: for
/// `status` ("contract: done, run #N").
///
/// Errors (exit 3): the ledger cannot be read.
pub async fn dropped_by(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
) -> Result<Option<i64>> {
    if !table_exists(conn, dialect, LEDGER_TABLE).await? {
        return Ok(None);
    }
    let target = first_target(mapping);
    crate::ledger::contract_that_dropped(conn, dialect, &target.table, &target.column).await
}

/// Where a mapping's contract stands once a run did it (`status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Done {
    /// Contract run #N dropped the counter; the ledger records it done.
    Dropped(i64),
    /// `[contract] drop = "nothing"`: run #N recorded the gate's decision; nothing was dropped.
    Decided(i64),
    /// Every target is gone, dropped by run #N, whose process ended after its DDL committed and
    /// before the ledger recorded it; its archive verifies against what the run recorded before
    /// the DDL, and `contract --execute` records the drop (issue 25 row 8).
    Unrecorded(i64),
}

impl Done {
    /// The contract run.
    pub fn run(self) -> i64 {
        match self {
            Done::Dropped(id) | Done::Decided(id) | Done::Unrecorded(id) => id,
        }
    }

    /// `dropped`, `decided` or `unrecorded` (the JSON of `status`).
    pub fn as_str(self) -> &'static str {
        match self {
            Done::Dropped(_) => "dropped",
            Done::Decided(_) => "decided",
            Done::Unrecorded(_) => "unrecorded",
        }
    }
}

/// Where this mapping's contract stands once a run did it, for `status`: the run the ledger
/// records as having dropped the counter (or, for `drop = "nothing"`, decided), else the run
/// that dropped every target without recording it (its archive verified); None when no run
/// did (the gate then says what is left), or when the targets' state is bad input (the
/// contract names it).
///
/// Errors (exit 3): the ledger, the archive or the catalog cannot be read.
pub async fn standing(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
) -> Result<Option<Done>> {
    let Ok(targets) = targets_of(mapping, false) else {
        return Ok(None);
    };
    if let Some(id) = dropped_by(conn, mapping, dialect).await? {
        let decided = mapping.contract.is_some() && targets.is_empty();
        return Ok(Some(if decided {
            Done::Decided(id)
        } else {
            Done::Dropped(id)
        }));
    }
    if targets.is_empty() || !table_exists(conn, dialect, LEDGER_TABLE).await? {
        return Ok(None);
    }
    let ctx = SqlContext::new(mapping, dialect);
    let opts = ContractOptions::default();
    let planned = match planning::find(conn, mapping, &ctx, targets, &opts, &mut Vec::new()).await {
        Ok(planned) => planned,
        Err(e) if crate::error::kind(&e) == ErrorKind::BadInput => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(planning::unrecorded_run(&planned).map(Done::Unrecorded))
}
