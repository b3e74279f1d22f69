//! What the database and the ledger say about the counter: its table's columns, the contract
//! run that dropped it, and the gate's verdict alone (for `status`). Reads only.

use anyhow::Result;
use sqlx::AnyConnection;

use super::{target_of, ContractOptions, Target};
use crate::dialect::{Dialect, SqlContext};
use crate::gate::{self, read_audits, statement_use, GateOptions};
use crate::ledger;
use crate::mapping::Mapping;
use crate::tables::LEDGER_TABLE;
use crate::values::now_ms;

/// The target `status` reads: the counter column, or with a `[contract]` section its first
/// target (the one a finished `[contract]` run records as its `target` in the ledger).
fn status_target(mapping: &Mapping) -> Target {
    if mapping.contract.is_some() {
        if let Ok(t) = super::targets::first_target(mapping) {
            return t;
        }
    }
    target_of(mapping, &ContractOptions::default())
}

/// The gate's verdict alone, for `status`: reads the ledger and the statement statistics,
/// plans nothing and writes nothing.
pub async fn verdict(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
    gate_options: &GateOptions,
) -> Result<gate::Verdict> {
    let ctx = SqlContext::new(mapping, dialect);
    let target = status_target(mapping);
    let statements = statement_use(conn, &ctx, &target.table, &target.column, mapping).await;
    let audits = read_audits(conn, dialect, &mapping.fingerprint).await?;
    let mut verdict = gate::decide(
        &audits,
        &mapping.fingerprint,
        now_ms(),
        gate_options,
        &statements,
    );
    let found = super::dependents(conn, &ctx, &target.table, &target.column).await?;
    super::dependents::apply(&mut verdict, &mut Vec::new(), &found, &target.column);
    Ok(verdict)
}

/// The contract run that dropped this mapping's counter (column or table), if one did: for
/// `status` ("contract: done, run #N").
pub async fn dropped_by(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
) -> Result<Option<i64>> {
    if !crate::db::catalog::table_exists(conn, dialect, LEDGER_TABLE).await? {
        return Ok(None);
    }
    let target = status_target(mapping);
    last_contract(conn, dialect, &target).await
}

/// The newest finished contract run that dropped this counter, if any
/// ([`ledger::contract_that_dropped`]).
pub(super) async fn last_contract(
    conn: &mut AnyConnection,
    dialect: Dialect,
    target: &Target,
) -> Result<Option<i64>> {
    ledger::contract_that_dropped(conn, dialect, &target.table, &target.column).await
}
