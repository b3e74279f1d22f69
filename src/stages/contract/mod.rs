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
//!    when every one is gone there is nothing left to drop, and a drop whose run died before
//!    it recorded it is recorded now, [`unrecorded`]); with `drop = "nothing"`, an earlier run
//!    that recorded the decision leaves nothing to do;
//! 2. the preflight, then per target its checks and the engine's drop plan
//!    ([`planning::plan`]), and the gate ([`crate::gate`]), closed by an object that depends
//!    on a column ([`dependents`]). Without `--execute` the verdict (every reason) and the
//!    exact statements are returned, and nothing changes;
//! 3. with `--execute`, when the gate is open (or `--force --reason TEXT` bypasses it,
//!    recorded), under the runner lock, and the backfill's runner lock of the mapping (a
//!    running backfill stops the run, `--force` or not: issue 29 row 10), and in the ledger
//!    ([`execute`]): a final audit with the
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
mod unrecorded;

pub use archive::{ArchiveSummary, Checksum};
pub use dependents::{dependents, Dependent};
pub use final_audit::audit_report_path;
#[cfg(feature = "test-hooks")]
pub use options::Hook;
pub use options::{check_options, ContractOptions, DEFAULT_AUDIT_REPORT};
pub use outcome::{ContractFailed, ContractOutcome, Failure, FinalAudit, TargetArchive};
pub use state::{dropped_by, standing, verdict, Done};
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
/// archive, a SQLite trigger or view that still uses a column, a file of another user where
/// the final audit's report goes); exit 3 for database and I/O failures (a backfill of the
/// mapping running, a lock that was not granted after the retries, an archive that does not verify:
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
    if nothing_left_to_do(conn, mapping, &ctx, &planned, opts, &mut outcome).await? {
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
    if resumed_from.is_none() {
        final_audit::check_audit_report(opts)?;
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
    if mapping.contract.is_none() && mapping.several_counters() {
        if opts.drop_table {
            return Err(input_error(
                "--drop-table: the mapping has several counters, each a column of the counter table: tidemark drops the columns (add a [contract] section with drop = \"table\" to drop the table)",
            ));
        }
        if opts.archive_csv.is_some() {
            return Err(input_error(
                "--archive FILE: the mapping has several counters; the archive table tidemark_counter_archive holds every dropped value (query it per counter_table, counter_column)",
            ));
        }
        return Ok(());
    }
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
        recorded_drop_of: None,
        verdict: None,
        ddl: Vec::new(),
        notes: Vec::new(),
        executed: false,
        dropped: Vec::new(),
        final_audit: None,
        archive: None,
        forced: None,
        ledger_id: None,
        failure: None,
    }
}

/// Whether there is nothing left to do, the outcome saying why: for `drop = "nothing"`, an
/// earlier run recorded the gate's decision; else every target is gone, dropped by earlier
/// runs. When the newest of those is not recorded as done (its process ended after its last
/// DDL committed, issue 25 row 8), `--execute` records its drop ([`execute::record_unrecorded`])
/// and a dry run says that it would.
///
/// Errors: those of [`execute::record_unrecorded`]; exit 3 when the ledger cannot be read.
async fn nothing_left_to_do(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    ctx: &SqlContext,
    planned: &[Planned],
    opts: &ContractOptions,
    outcome: &mut ContractOutcome,
) -> Result<bool> {
    if outcome.drops_nothing() {
        let Some(id) = state::dropped_by(conn, mapping, ctx.dialect).await? else {
            return Ok(false);
        };
        outcome.nothing_to_drop = Some(format!(
            "already done: contract run #{id} recorded the gate's decision ([contract] drop = \"nothing\": nothing to archive or drop)"
        ));
        return Ok(true);
    }
    if planned.is_empty() || planned.iter().any(|p| p.done_by.is_none()) {
        return Ok(false);
    }
    outcome.nothing_to_drop = Some(match planning::unrecorded_run(planned) {
        Some(id) if opts.execute => {
            if execute::record_unrecorded(conn, ctx, planned, id).await? {
                outcome.recorded_drop_of = Some(id);
                recorded(planned, id)
            } else {
                nothing_left(planned, None)
            }
        }
        other => nothing_left(planned, other),
    });
    Ok(true)
}

/// "nothing left to drop: column a.b is gone (dropped by contract run #3)"; with `unrecorded`,
/// the run among them whose end the ledger does not record, and that `--execute` records it.
fn nothing_left(planned: &[Planned], unrecorded: Option<i64>) -> String {
    let mut runs: Vec<String> = Vec::new();
    for id in planned.iter().filter_map(|p| p.done_by) {
        let run = format!("#{id}");
        if !runs.contains(&run) {
            runs.push(run);
        }
    }
    let what: Vec<String> = planned.iter().map(|p| p.target.describe()).collect();
    let note = match unrecorded {
        None => String::new(),
        Some(_) if runs.len() == 1 => {
            ", whose end the ledger does not record: its archive verifies; --execute records it"
                .to_string()
        }
        Some(id) => format!(
            "; the ledger does not record the end of run #{id}: its archive verifies; --execute records it"
        ),
    };
    format!(
        "nothing left to drop: {} {} gone (dropped by contract run {}{note})",
        what.join(", "),
        if what.len() == 1 { "is" } else { "are" },
        runs.join(", ")
    )
}

/// What a run that recorded the drop of run `id` says.
fn recorded(planned: &[Planned], id: i64) -> String {
    let done: Vec<&Planned> = planned.iter().filter(|p| p.done_by == Some(id)).collect();
    let what: Vec<String> = done.iter().map(|p| p.target.describe()).collect();
    let rows: i64 = done
        .iter()
        .filter_map(|p| p.unrecorded.as_ref())
        .map(|c| c.rows)
        .sum();
    format!(
        "recorded: contract run #{id} dropped {}; its process ended before the ledger recorded it, and its archive verifies ({rows} rows, as recorded before the DDL)",
        what.join(", ")
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
