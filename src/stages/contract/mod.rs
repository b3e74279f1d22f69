//! Stage 4, contract: the gated drop of the legacy counter (semantics.md, "The gate before the
//! drop").
//!
//! What is dropped are the contract's targets ([`target`]): the counter column (with
//! `--drop-table`, its whole table), or what a `[contract]` section names (several columns on
//! any mapped table, the counter table, or nothing for a counter that was never stored). One
//! sequence serves them all:
//!
//! 1. where each target stands ([`planning::find`]): still there, or gone with an archive of
//!    it (dropped by an earlier run: a run that resumes after a kill goes on with the others;
//!    when every one is gone there is nothing left to drop);
//! 2. the preflight, then per target its checks and the engine's drop plan
//!    ([`planning::plan`]), and the gate ([`crate::gate`]), closed by an object that depends
//!    on a column ([`dependents`]). Without `--execute` the verdict (every reason) and the
//!    exact statements are returned, and nothing changes;
//! 3. with `--execute`, when the gate is open (or `--force --reason TEXT` bypasses it,
//!    recorded), under the runner lock and in the ledger ([`execute`]): a final audit with the
//!    tolerance of the newest clean audit, which must pass; per target, its values archived
//!    into `tidemark_counter_archive` batch by batch (and with `--archive FILE` into a CSV),
//!    the archive verified row by row and by checksum ([`archive`]), and the drop under a
//!    bounded lock wait, retried after a lock wait, the checksum taken again inside the lock
//!    ([`ddl`]); the ledger records the run with its evidence ([`evidence`]).
//!
//! A failure anywhere before a target's DDL commits leaves it (and its archive rows) in place.

mod archive;
mod ddl;
mod dependents;
mod evidence;
mod execute;
mod final_audit;
mod options;
mod outcome;
mod planning;
mod state;
mod target;
mod test_pause;

pub use archive::{ArchiveSummary, Checksum};
pub use dependents::{dependents, Dependent};
#[cfg(feature = "test-hooks")]
pub use options::Hook;
pub use options::{check_options, ContractOptions, DEFAULT_AUDIT_REPORT};
pub use outcome::{ContractFailed, ContractOutcome, Failure, FinalAudit, TargetArchive};
pub use state::{dropped_by, verdict};
pub use target::Target;

use anyhow::Result;
use sqlx::AnyConnection;

use crate::db::catalog::table_exists;
use crate::dialect::{Dialect, SqlContext};
use crate::error::input_error;
use crate::mapping::Mapping;
use crate::tables::{ARCHIVE_TABLE, LEDGER_TABLE};
use planning::Planned;

/// Runs the contract stage (see the module documentation).
///
/// Errors: exit 2 for bad input (`--force` without `--reason`, `--drop-table` on a table that
/// holds more than the counter, `--drop-table` or `--archive` with a `[contract]` section, a
/// mapping that does not match, migrations not applied, a target that is gone without an
/// archive, a SQLite trigger or view that still uses a column); exit 3 for database and I/O
/// failures (a lock that was not granted after the retries, an archive that does not verify:
/// the error is then a [`ContractFailed`] carrying what was found and done). Neither leaves a
/// column half-dropped.
pub async fn run(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
    opts: &ContractOptions,
) -> Result<ContractOutcome> {
    check_options(opts)?;
    check_form(mapping, opts)?;
    let ctx = SqlContext::new(mapping, dialect);
    if !table_exists(conn, dialect, LEDGER_TABLE).await? {
        return Err(input_error(
            "the ledger table tidemark_ledger does not exist: run `tidemark expand`, `backfill` and `audit` first",
        ));
    }
    let mut notes = Vec::new();
    let targets = target::targets_of(mapping, opts.drop_table)?;
    let mut planned = planning::find(conn, mapping, &ctx, targets, opts, &mut notes).await?;
    let mut outcome = new_outcome(mapping, &planned);
    if !planned.is_empty() && planned.iter().all(|p| p.done_by.is_some()) {
        outcome.nothing_to_drop = Some(nothing_left(&planned));
        return Ok(outcome);
    }
    let resumed_from = planned.iter().find_map(|p| p.done_by);
    let collations = if resumed_from.is_none() {
        crate::schema::preflight(conn, mapping, dialect).await?
    } else {
        crate::schema::KeyCollations::read(conn, mapping, dialect).await?
    };
    // Key columns in different collations: the archive reads each batch by its keys
    // (issue 25), and the notice names the columns.
    let ctx = collations.apply(ctx, mapping);
    notes.extend(collations.notices());
    if !table_exists(conn, dialect, ARCHIVE_TABLE).await? {
        return Err(input_error(format!(
            "the archive table {ARCHIVE_TABLE} does not exist: run `tidemark expand` (migration V3__counter_archive)"
        )));
    }
    outcome.ddl = planning::plan(conn, mapping, &ctx, &mut planned, opts, &mut notes).await?;
    let mut verdict = state::decide(conn, mapping, &ctx, &planned, opts, &mut notes).await?;
    if let Some(id) = resumed_from {
        notes.push(format!(
            "resuming: a target was dropped by contract run #{id}; the counter's value cannot be read any more, so the final audit of that run stands"
        ));
    }
    outcome.notes = notes;
    outcome.verdict = Some(verdict.clone());
    if !verdict.open && opts.force {
        outcome.forced = opts.reason.clone();
    }
    if !opts.execute || (!verdict.open && !opts.force) {
        return Ok(outcome);
    }
    let run = execute::Run {
        mapping,
        ctx: &ctx,
        planned: &planned,
        opts,
        resumed_from,
    };
    let result = execute::execute_locked(conn, &run, &mut verdict, &mut outcome).await;
    conclude(outcome, verdict, result, dialect)
}

/// The options that belong to the one-column form, refused with a `[contract]` section.
///
/// Errors (exit 2): `--drop-table` or `--archive FILE` with a `[contract]` section.
fn check_form(mapping: &Mapping, opts: &ContractOptions) -> Result<()> {
    if mapping.contract.is_none() {
        return Ok(());
    }
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
    Ok(())
}

/// The outcome before the gate: the targets, and the counter's value with a `[contract]`
/// section.
fn new_outcome(mapping: &Mapping, planned: &[Planned]) -> ContractOutcome {
    ContractOutcome {
        target: planned
            .first()
            .map(|p| p.target.clone())
            .unwrap_or_else(|| target::first_target(mapping)),
        targets: planned.iter().map(|p| p.target.clone()).collect(),
        value: mapping
            .contract
            .is_some()
            .then(|| mapping.counter.value_sql(|s| s.to_string())),
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
        failure: None,
    }
}

/// "nothing left to drop: column a.b is gone (dropped by contract run #3)".
fn nothing_left(planned: &[Planned]) -> String {
    let mut runs: Vec<String> = Vec::new();
    for id in planned.iter().filter_map(|p| p.done_by) {
        let run = format!("#{id}");
        if !runs.contains(&run) {
            runs.push(run);
        }
    }
    let what: Vec<String> = planned.iter().map(|p| p.target.describe()).collect();
    format!(
        "nothing left to drop: {} {} gone (dropped by contract run {})",
        what.join(", "),
        if what.len() == 1 { "is" } else { "are" },
        runs.join(", ")
    )
}

/// The outcome of an `--execute` run once the runner lock is released: with its verdict, or,
/// when `result` failed, a [`ContractFailed`] that still carries the verdict, what was archived
/// and the database's own detail (issue 13 row 5: printed even on failure).
fn conclude(
    mut outcome: ContractOutcome,
    verdict: crate::gate::Verdict,
    result: Result<()>,
    dialect: Dialect,
) -> Result<ContractOutcome> {
    outcome.verdict = Some(verdict);
    if let Err(error) = result {
        outcome.failure = Some(Failure {
            message: crate::error::describe(&error),
            detail: error
                .chain()
                .filter_map(|cause| cause.downcast_ref::<sqlx::Error>())
                .find_map(|e| dialect.ddl().error_detail(e)),
        });
        return Err(anyhow::Error::new(ContractFailed {
            outcome: Box::new(outcome),
            error,
        }));
    }
    Ok(outcome)
}
