//! Where the backfill of the audited mapping stands when an audit starts (issue 25, row 10):
//! an audit after a backfill that never ran or did not finish finds the members it has not
//! reached without a watermark, and reports their unread as drift. The summary says so (with
//! how many members have no watermark, counted batch by batch), and the gate never counts
//! such an audit.

use anyhow::Result;
use sqlx::AnyConnection;

use crate::db::catalog::table_exists;
use crate::dialect::Dialect;
use crate::ledger::{self, BackfillState, RunStatus, Stage};
use crate::mapping::Mapping;
use crate::tables::LEDGER_TABLE;

/// The newest backfill of the mapping (same fingerprint) in the ledger: never run, its
/// status, and for a run recorded as `running` whether its process still holds the
/// backfill's runner lock. None when the ledger cannot tell: no ledger table, or (with
/// `required` false: `--no-ledger`, where SELECT on the legacy tables suffices) the ledger
/// cannot be read.
///
/// Errors (exit 3), with `required` (an audit recorded in the ledger): the ledger cannot be
/// read.
pub(super) async fn read(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
    required: bool,
) -> Result<Option<BackfillState>> {
    let newest = async {
        if !table_exists(conn, dialect, LEDGER_TABLE).await? {
            return Ok(None);
        }
        ledger::newest_of_mapping(conn, dialect, Stage::Backfill, &mapping.fingerprint)
            .await
            .map(Some)
    }
    .await;
    let newest = match newest {
        Ok(Some(newest)) => newest,
        Ok(None) => return Ok(None),
        Err(_) if !required => return Ok(None),
        Err(e) => return Err(e),
    };
    let run = newest.map(|e| (e.id, e.status));
    let alive = match run {
        Some((_, RunStatus::Running)) => {
            let name = crate::lock::runner_name(Stage::Backfill, &mapping.fingerprint);
            crate::lock::is_held(conn, dialect, &name)
                .await
                .unwrap_or(true)
        }
        _ => false,
    };
    Ok(Some(BackfillState::of(run, alive)))
}

/// The state a resumed audit records: an earlier part that found the backfill unfinished
/// audited its rows against missing watermarks, so its finding stands; else the newest.
pub(super) fn merge(
    earlier: Option<BackfillState>,
    now: Option<BackfillState>,
) -> Option<BackfillState> {
    match earlier {
        Some(e) if !e.finished => Some(e),
        _ => now,
    }
}
