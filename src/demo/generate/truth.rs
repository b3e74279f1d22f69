//! What the generator made, and the drift an audit must find there.

use std::collections::BTreeMap;

/// What was generated, and the drift that an audit must find.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroundTruth {
    /// Rows of `members` (equals [`GenerateOptions::members`]).
    ///
    /// [`GenerateOptions::members`]: super::GenerateOptions::members
    pub members: u64,
    /// Rows of `messages`.
    pub messages: u64,
    /// Conversations (distinct `conv_id`, numbered 1, 2, …).
    pub conversations: u64,
    /// Rows of `unread_counters` (what an audit checks).
    pub counter_rows: u64,
    /// Rows of `read_receipts`.
    pub receipt_rows: u64,
    /// Drifting counter rows injected, per class name (as in [`DriftClass::as_str`]), every
    /// class listed (0 when none was injected). An audit with the scenario mapping must report
    /// exactly these rows per class.
    ///
    /// [`DriftClass::as_str`]: crate::drift::DriftClass::as_str
    pub injected: BTreeMap<String, u64>,
}

impl GroundTruth {
    /// Drifting rows injected in all (the sum of [`GroundTruth::injected`]).
    pub fn drifting_rows(&self) -> u64 {
        self.injected.values().sum()
    }
}
