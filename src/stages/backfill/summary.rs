//! What a backfill did: its summary (the ledger's record of a run and of each checkpoint),
//! a leaf of the backfill folder that the run and each batch add to.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a backfill did (for a resumed run: all its parts together).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct BackfillSummary {
    /// Members considered (every member row, active or not, or counter rows without
    /// `[members]`).
    pub members: u64,
    /// Batches run.
    pub batches: u64,
    /// Watermarks created (no row before).
    pub written: u64,
    /// Existing watermarks moved forward.
    pub advanced: u64,
    /// Existing watermarks already at or past the evidence (left as they were).
    pub unchanged: u64,
    /// Active members with no evidence at all (no watermark written).
    pub no_evidence: u64,
    /// Members who left (not active) with no position or timestamp evidence: no watermark
    /// written, and none is owed (semantics.md "Backfill"). Absent in ledgers written before
    /// members who left were considered.
    #[serde(default)]
    pub left_without_evidence: u64,
    /// Watermarks per evidence kind (provenance).
    pub by_source: BTreeMap<String, u64>,
    /// Counters that no watermark can represent: k < 0 or k greater than the countable
    /// messages (semantics.md, Backfill 3).
    pub unrepresentable_counters: u64,
    /// Batches that hit a lock wait and were retried.
    pub retried_batches: u64,
    /// Existing watermarks left alone because the only evidence was the counter.
    pub kept_over_counter: u64,
    /// Whether `unread_changes` was counted (not with `--skip-change-count`).
    pub counted_changes: bool,
    /// Counter rows (per message: messages) whose unread number will differ once the counters
    /// are gone: the stored value differs from the one recomputed from the new watermarks.
    pub unread_changes: u64,
    /// The settle time in seconds this run left young conversations out with (semantics.md
    /// "Backfill", settle time); `None` when off or not possible (no `messages.created_at`).
    #[serde(default)]
    pub settle_time_s: Option<u64>,
    /// The mapping derives watermarks as "everything up to the newest message" (counter,
    /// timestamp or own message evidence) but has no `messages.created_at`: a position whose
    /// transaction had not committed yet may be covered (the hazard is not guarded).
    #[serde(default)]
    pub settle_unguarded: bool,
    /// Conversations with a message younger than the settle time whose members' derived
    /// watermarks were left for a later run (counted once per batch that met them).
    #[serde(default)]
    pub left_unsettled: u64,
    /// Members left without a watermark for that reason (run the backfill again later).
    #[serde(default)]
    pub left_unsettled_members: u64,
    /// When this run continued an interrupted one: the batches that run had finished.
    pub resumed_after_batches: Option<u64>,
    /// When this run continued an interrupted one: the last conversation of its checkpoint
    /// (the run went on after it), as text.
    #[serde(default)]
    pub resumed_after: Option<String>,
    /// Stopped by Ctrl-C before the last batch (run again to continue).
    pub interrupted: bool,
    /// The ledger run id.
    pub ledger_id: Option<i64>,
    /// The preflight's notices: the key columns whose collations differ (issue 25,
    /// [`crate::schema::KeyCollations::notice`]); empty when there is nothing to say.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<String>,
    /// The evidence measured on the data before the first batch (issue 24,
    /// [`crate::schema::evidence_share`]): each entry's share of values that fit the position
    /// space.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence_shares: Vec<crate::schema::evidence_share::Share>,
}
