//! What a backfill did: its summary (the ledger's record of a run and of each checkpoint),
//! a leaf of the backfill folder that the run and each batch add to.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::stages::batch::Key;

/// The checkpoint stored in the ledger after every batch (with `--jobs`, after every batch
/// that ends the run of batches finished in key order).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Checkpoint {
    /// The last conversation of the last finished batch.
    pub lo: Option<Key>,
    /// Counts so far.
    pub summary: BackfillSummary,
}

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
    /// Members whose timestamp evidence held only values that are no time (a zero date, a
    /// text that does not parse as a time: semantics.md "Backfill", timestamp; issue 29 rows
    /// 3 and 5): no evidence, the next source applied. Absent in older ledgers.
    #[serde(default)]
    pub times_not_times: u64,
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
    /// The mapping derives watermarks (counter, timestamp, own message or read flags evidence)
    /// but has no `messages.created_at`: a position whose
    /// transaction had not committed yet may be covered (the hazard is not guarded).
    #[serde(default)]
    pub settle_unguarded: bool,
    /// Conversations of the members in [`BackfillSummary::left_unsettled_members`] (counted
    /// once per batch that met them).
    #[serde(default)]
    pub left_unsettled: u64,
    /// Members whose derived watermark would newly cover a message younger than the settle
    /// time (issue 29 row 19: per member, so that busy conversations converge), left for a
    /// later run (run the backfill again later).
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
    /// With read_flags evidence (issue 22, semantics.md "Shape C"): what the members' read
    /// flags say beside their watermarks; None when the mapping lists no such evidence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_flags: Option<FlagCounts>,
    /// The preflight's notices: the key columns whose collations differ (issue 25,
    /// [`crate::schema::KeyCollations::notice`]); empty when there is nothing to say.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<String>,
    /// The evidence measured on the data before the first batch (issue 24,
    /// [`crate::schema::evidence_share`]): each entry's share of values that fit the position
    /// space.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence_shares: Vec<crate::schema::evidence_share::Share>,
    /// Members whose position evidence held values, all below 0 (issue 29 row 23: −1, −2
    /// written as "nothing read" markers): no position, so the next source applied. A 0 stays
    /// the evidence "nothing read" (watermark 0), as shared/spec/scenarios.json expects.
    #[serde(default)]
    pub not_positions: u64,
    /// `--accept-evidence-share`: the share was accepted unmeasured, so not measured at all
    /// (issue 29 row 18); [`BackfillSummary::evidence_shares`] is then empty.
    #[serde(default)]
    pub evidence_share_accepted: bool,
}

/// What the read flags say beside the watermarks a backfill leaves (issue 22): counted in each
/// batch, after its write, from t = max(watermark, join position) as the audit counts
/// (`sql/common/backfill_flags.sql`); members without a watermark are not counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlagCounts {
    /// Members with at least one flag the watermark disagrees with.
    pub members: u64,
    /// Flag rows saying read on countable messages of others after the watermark: messages
    /// read out of order, unread under the watermark.
    pub read_out_of_order: u64,
    /// Flag rows saying unread at or before the watermark: marked read by it (0 where the
    /// watermark came from the flags: nothing below it is unread, by construction).
    pub unread_marked_read: u64,
}
