//! A drop the ledger does not record (issue 25 row 8): a contract run whose process (or server
//! session) ends after a DDL committed and before the run recorded its end leaves its ledger
//! row `running` with the target gone.
//!
//! So that a later run can tell such a drop from a column dropped by hand, each run records in
//! its ledger row's `checkpoint`, after the target's archive is verified and before its DDL
//! runs ([`before_ddl`]), what it is about to drop: the target, its archive's checksum as
//! verified, the DDL as planned, and the summary the run records once that DDL has committed
//! ([`ContractCheckpointRecord`]). A later run that finds a target gone asks [`standing`]
//! where the run whose archive holds it stands: recorded (`done`), or not recorded but its
//! archive still has the rows and checksum recorded before the DDL; anything else is bad input
//! (nothing proves that the archive holds what was dropped). [`complete`] then writes the
//! killed run's row as the run would have (under the runner lock: `execute.rs`).

use anyhow::{Context, Result};
use sqlx::AnyConnection;

use super::archive::checksum;
use super::target::Target;
use crate::dialect::{Dialect, SqlContext};
use crate::error::input_error;
use crate::ledger::records::{Checksum, ContractCheckpointRecord, VerifiedArchiveRecord};
use crate::ledger::{self, Entry, RunStatus};
use crate::values::now_ms;

/// Where the contract run whose archive holds a target that is gone stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// The ledger records the run as done.
    Recorded,
    /// The ledger does not record the run's end, but its archive of the target has the rows
    /// and the checksum the run recorded before its DDL (this checksum).
    Unrecorded(Checksum),
}

/// Records `record` in contract run `id`'s checkpoint: every target verified so far (the last
/// one about to be dropped) and what the run records once the last of their DDL has
/// committed. Written (and committed) before that DDL runs.
///
/// Errors (exit 3): the ledger cannot be written (the run then stops before the DDL).
pub async fn before_ddl(
    conn: &mut AnyConnection,
    dialect: Dialect,
    id: i64,
    record: &ContractCheckpointRecord,
) -> Result<()> {
    ledger::save_checkpoint(conn, dialect, id, &serde_json::to_value(record)?)
        .await
        .with_context(|| format!("recording in contract run #{id} what its DDL drops"))
}

/// Where contract run `run`, whose archive holds `target` (which is gone), stands: recorded
/// as done, or not recorded with an archive that verifies against what the run recorded
/// before its DDL.
///
/// Errors: exit 2 when the run is not in the ledger, recorded no verified archive of the
/// target before a DDL (a column dropped by hand after a run archived it?), or its archive no
/// longer has those rows and that checksum; exit 3 for a database failure.
pub async fn standing(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    target: &Target,
    run: i64,
) -> Result<Standing> {
    let entry = ledger::entry(conn, ctx.dialect, run).await?;
    let Some(entry) = entry else {
        return Err(unproven(target, run, "that run is not in the ledger"));
    };
    if entry.status == RunStatus::Done {
        return Ok(Standing::Recorded);
    }
    let Some(verified) = verified_of(&entry, target)? else {
        return Err(unproven(
            target,
            run,
            &format!(
                "the ledger records that run as {} and records no verified archive of it before a DDL",
                entry.status
            ),
        ));
    };
    let now = checksum(conn, ctx, target, Some(run)).await?;
    if now != verified.checksum {
        return Err(unproven(
            target,
            run,
            &format!(
                "its archive no longer has the rows and checksum that run recorded before its DDL (recorded {:?}, now {now:?})",
                verified.checksum
            ),
        ));
    }
    Ok(Standing::Unrecorded(now))
}

/// Writes contract run `id`'s row as the run would have once its last DDL committed: `done`,
/// its gate verdict, the summary recorded before that DDL (its DDL as planned) with a note of
/// who recorded it and when, and its CSV archive. Checks first, again, that the run is not
/// recorded and that its archive of each of `targets` (those it dropped) still verifies
/// ([`standing`]).
/// Returns whether it wrote the row (false: the ledger records the run as done already).
/// Call it under the runner lock of the run's mapping.
///
/// Errors: as [`standing`]; exit 3 when the ledger cannot be written.
pub async fn complete(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    targets: &[&Target],
    id: i64,
) -> Result<bool> {
    let entry = ledger::entry(conn, ctx.dialect, id)
        .await?
        .with_context(|| format!("contract run #{id} is not in the ledger"))?;
    if entry.status == RunStatus::Done {
        return Ok(false);
    }
    for target in targets {
        standing(conn, ctx, target, id).await?;
    }
    let record = checkpoint_of(&entry)?
        .with_context(|| format!("contract run #{id} recorded no checkpoint"))?;
    let mut summary = record.summary;
    if let Some(map) = summary.as_object_mut() {
        map.insert(
            "recorded_later".into(),
            serde_json::json!({
                "at_ms": now_ms(),
                "note": "this run's process ended after its last DDL committed, before it recorded its end; a later contract run found its archive as verified before the DDL (rows and checksum) and recorded the drop (the DDL as planned)",
            }),
        );
    }
    ledger::finish(
        conn,
        ctx.dialect,
        id,
        RunStatus::Done,
        &summary,
        Some(record.gate_open),
        record.csv.as_deref(),
        record.csv_sha256.as_deref(),
    )
    .await
    .with_context(|| format!("recording the drop of contract run #{id} in the ledger"))?;
    Ok(true)
}

/// A contract run's checkpoint, if it recorded one.
///
/// Errors: a checkpoint this tidemark cannot read (it is not guessed at).
fn checkpoint_of(entry: &Entry) -> Result<Option<ContractCheckpointRecord>> {
    entry
        .checkpoint
        .as_deref()
        .map(serde_json::from_str)
        .transpose()
        .with_context(|| format!("reading the checkpoint of contract run #{}", entry.id))
}

/// What run `entry` recorded of `target` before its DDL, if it did.
fn verified_of(entry: &Entry, target: &Target) -> Result<Option<VerifiedArchiveRecord>> {
    Ok(checkpoint_of(entry)?.and_then(|c| {
        c.verified
            .into_iter()
            .find(|v| v.table == target.table && v.column == target.column)
    }))
}

/// A target that is gone whose archive nothing proves complete.
fn unproven(target: &Target, run: i64, why: &str) -> anyhow::Error {
    input_error(format!(
        "{} is gone and tidemark_counter_archive holds it as archived by contract run #{run}, but {why}: tidemark cannot tell that the archive holds every value that was dropped; compare that archive (contract_id {run}) with a backup before going on",
        target.describe()
    ))
}
