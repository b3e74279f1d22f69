//! What `inspect` proposes: the choices, the alternatives seen and what is missing (what
//! [`render`](super::render) writes), and the data facts the choice needs (read by
//! [`checks`](super::checks)). The choice itself is [`propose`](super::propose).

use std::collections::BTreeMap;

use crate::mapping::{EvidenceKind, Shape};

/// The data facts the choice needs, read by the caller.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// (table, column) of counter candidates -> whether any row holds a value.
    pub has_values: BTreeMap<(String, String), bool>,
    /// (table, column) of membership text columns -> their distinct values (a few).
    pub values: BTreeMap<(String, String), Vec<String>>,
    /// (table, column) of kind columns on messages candidates (`post_type`) -> their values
    /// with row counts, most frequent first (a few).
    pub kinds: BTreeMap<(String, String), Vec<(String, u64)>>,
    /// (evidence table, column, messages table, position column) -> (values sampled, values
    /// that are positions of their conversation or 0).
    pub fits: BTreeMap<(String, String, String, String), (u64, u64)>,
    /// (table, column) of counter candidates -> (values sampled, values between 0 and their
    /// conversation's message count).
    pub ranges: BTreeMap<(String, String), (u64, u64)>,
    /// (table, column) of time evidence -> (values sampled, values at or after their
    /// conversation's first message).
    pub times: BTreeMap<(String, String), (u64, u64)>,
    /// (messages table, position column) -> (rows, rows not earlier than the row before them
    /// in position order): the position increases with the creation time.
    pub order: BTreeMap<(String, String), (u64, u64)>,
    /// Sampled measures the engine refused, in words (for `--explain`).
    pub failed: Vec<String>,
}

/// A measure `(sampled, fitting)` in words: `100.0 % of 77`.
pub fn figure((measured, fits): (u64, u64)) -> String {
    if measured == 0 {
        return "no value to sample".into();
    }
    format!(
        "{:.1} % of {measured}",
        100.0 * fits as f64 / measured as f64
    )
}

/// The share of a measure, when it has enough values to judge
/// ([`crate::schema::evidence_share::MIN_VALUES`]).
pub fn judged((measured, fits): (u64, u64)) -> Option<f64> {
    (measured >= crate::schema::evidence_share::MIN_VALUES).then(|| fits as f64 / measured as f64)
}

/// A counter column tidemark could drop.
#[derive(Debug, Clone)]
pub struct CounterCandidate {
    /// Its table.
    pub table: String,
    /// The column.
    pub column: String,
    /// Its declared type.
    pub declared: String,
    /// Whether the type is an integer.
    pub integer: bool,
    /// per_member (keyed by user and conversation) or per_message (on the messages table).
    pub shape: Shape,
    /// User and conversation key columns (per_member).
    pub key: Option<(String, String)>,
    /// Rank of the name in [`COUNTER`](super::names::COUNTER) (lower is better; after every
    /// name: a column found by its values).
    pub(super) rank: usize,
    /// What its values showed on a sample, in words.
    pub figure: Option<String>,
}

/// A messages table.
#[derive(Debug, Clone)]
pub struct MessagesCandidate {
    /// The table.
    pub table: String,
    /// Conversation, sender and position columns.
    pub conversation: String,
    /// The sender column.
    pub sender: String,
    /// The position column.
    pub position: String,
    /// The position's declared type.
    pub position_declared: String,
    /// Whether the position is an integer.
    pub position_integer: bool,
    /// The creation time column, if one is named like it.
    pub created_at: Option<String>,
    /// Predicate parts for deleted / system rows, with the column they read.
    pub countable: Vec<String>,
    /// Whether it is a view (the comments say so: its indexes are its tables').
    pub is_view: bool,
    /// Why the position was chosen, with the figures seen (structure and data).
    pub reasons: Vec<String>,
    /// Position columns not chosen, each with why it lost.
    pub near_misses: Vec<String>,
    /// Sort key: a non-integer position last, the structure's weight (higher first), the
    /// name's rank (lower is better).
    pub(super) rank: (bool, u8, usize),
}

/// One evidence entry proposed, with the reason for the comment.
#[derive(Debug, Clone)]
pub struct EvidenceChoice {
    /// Kind.
    pub kind: EvidenceKind,
    /// (table, user, conversation, column) for position and timestamp.
    pub source: Option<(String, String, String, String)>,
    /// Why, in words.
    pub why: String,
}

/// The proposal: what was chosen, what else was seen, what is missing.
#[derive(Debug, Clone, Default)]
pub struct Proposal {
    /// The messages table chosen.
    pub messages: Option<MessagesCandidate>,
    /// Messages tables not chosen.
    pub messages_alternatives: Vec<MessagesCandidate>,
    /// The members table: (table, user, conversation, active, join_position, comments).
    pub members: Option<MembersChoice>,
    /// Membership tables not chosen.
    pub members_alternatives: Vec<String>,
    /// The counter chosen.
    pub counter: Option<CounterCandidate>,
    /// Every other counter candidate.
    pub counter_alternatives: Vec<CounterCandidate>,
    /// Evidence, best first.
    pub evidence: Vec<EvidenceChoice>,
    /// Evidence seen but not usable unedited, in words.
    pub evidence_notes: Vec<String>,
    /// Receipts tables seen (name), whether used or not.
    pub receipts_tables: Vec<String>,
    /// What a complete mapping lacks, in words.
    pub missing: Vec<String>,
    /// The full reasoning (`inspect --explain`): each candidate seen and its figures.
    pub explain: Vec<String>,
}

/// The chosen `[members]`.
#[derive(Debug, Clone)]
pub struct MembersChoice {
    /// Table.
    pub table: String,
    /// User key column.
    pub user: String,
    /// Conversation key column.
    pub conversation: String,
    /// The active predicate, if a column suggests one.
    pub active: Option<String>,
    /// The join position column, if any.
    pub join_position: Option<String>,
    /// The join time column, when there is no join position and the messages have a
    /// creation time.
    pub join_time: Option<String>,
    /// Remarks for the comment (the values of a membership column, a join time…).
    pub notes: Vec<String>,
}
