//! What the database and the ledger say about the counter: its table's columns, the contract
//! run that dropped it, and the gate's verdict alone (for `status`). Reads only.

use anyhow::Result;
use sqlx::AnyConnection;

use super::{target_of, ContractOptions, Target};
use crate::dialect::{render, Dialect, SqlContext};
use crate::gate::{self, read_audits, statement_use, GateOptions};
use crate::ledger;
use crate::mapping::Mapping;
use crate::schema;
use crate::tables::LEDGER_TABLE;
use crate::values::now_ms;

/// The columns of `table`, in order (empty when it does not exist).
pub async fn table_columns(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    table: &str,
) -> Result<Vec<String>> {
    let sql = render("contract_columns.sql", ctx, minijinja::context! {})?;
    let mut q = sqlx::query(&sql);
    for bind in ctx.dialect.catalog().table_columns_binds(table) {
        q = q.bind(bind);
    }
    let rows = q.fetch_all(&mut *conn).await?;
    rows.iter()
        .map(|r| Ok(crate::values::text(r, "name")?.unwrap_or_default()))
        .collect()
}

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
    if !schema::table_exists(conn, dialect, LEDGER_TABLE).await? {
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
