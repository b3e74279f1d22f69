//! The mapping's types: the [`Mapping`] and each section as the file gives it (`[messages]`,
//! `[members]`, `[counter]`, `[[evidence]]`, `[watermarks]`, `[backfill] policy`,
//! `[conversations]`, `[users]`, `[contract]`), and where each SQL predicate was written. A leaf
//! of `mapping`: the files that read and check the file import these types, and this file
//! imports none of them. Their serde shapes (names, field order, what is skipped when absent)
//! make the mapping's fingerprint, so they must not change.

use serde::Deserialize;

/// A parsed and validated mapping.
#[derive(Debug, Clone)]
pub struct Mapping {
    /// The messages table: positions, conversations, senders.
    pub messages: Messages,
    /// Membership (optional): active flag and join positions.
    pub members: Option<Members>,
    /// The legacy counter that the contract stage drops: the first (or only) counter of the
    /// file, the one `[[evidence]] kind = "counter"` reads.
    pub counter: Counter,
    /// Every counter of the file in its order (issue 22: `[[counter]]` several times, each
    /// with a `name`); one element for a single `[counter]`. See [`Mapping::per_counter`].
    pub counters: Vec<Counter>,
    /// Read evidence, best first.
    pub evidence: Vec<Evidence>,
    /// The watermark table that `expand` creates.
    pub watermarks: Watermarks,
    /// `[backfill] policy`: how the backfill chooses among evidence values.
    pub policy: EvidencePolicy,
    /// `[conversations]` (optional): the conversation row predicates read as `conv.`.
    pub conversations: Option<KeyedTable>,
    /// `[users]` (optional): the user row predicates read as `usr.`.
    pub users: Option<KeyedTable>,
    /// `[contract]` (optional): what the contract drops; without it, `[counter] column`.
    pub contract: Option<RawContract>,
    /// SHA-256 (hex) of the normalised mapping: what the ledger keys audits and checkpoints by.
    pub fingerprint: String,
    /// The SQL predicates with where each was written, for
    /// [`Mapping::check_predicates`] (not part of the fingerprint).
    pub predicates: Vec<PredicateSite>,
    /// `origin:line:col` of each key's value as written, by dotted key (`messages.id`,
    /// `evidence[2].column`, `contract.columns`), for [`Mapping::located`] (not part of the
    /// fingerprint).
    pub locations: std::collections::BTreeMap<String, String>,
}

/// `[messages]`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Messages {
    /// Table, optionally `schema.table`.
    pub table: String,
    /// The position column: an integer increasing within a conversation.
    pub id: String,
    /// The conversation key column.
    pub conversation: String,
    /// The sender's user key column.
    pub sender: String,
    /// Creation time column, needed by `timestamp` evidence.
    pub created_at: Option<String>,
    /// SQL predicate on a messages row: what counts as unread now (default: every message).
    pub countable: Option<String>,
    /// SQL predicate: what the legacy counter counted (default: every message).
    pub legacy_countable: Option<String>,
    /// Issue 22, "Messages only some readers count": an SQL predicate over the messages row
    /// (`this`, `conv`): a restricted message (a staff-only whisper) counts only for the
    /// readers [`Messages::restricted_readers`] admits. Given with it; needs `[members]`.
    /// Left out of the fingerprint when absent (as the two keys below).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restricted: Option<String>,
    /// An SQL predicate over the reader's members row (`this`, `usr`, `conv`): the readers
    /// for whom a [`Messages::restricted`] message counts (e.g. staff).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restricted_readers: Option<String>,
    /// An SQL expression over the messages row (`this`, `conv`): the user key of the one
    /// reader an addressed message counts for (an invite: its invitee), NULL for a message
    /// every reader counts. An addressed message is counted for that reader only, whatever
    /// `restricted` says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipient: Option<String>,
}

/// `[members]`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Members {
    /// Table, optionally `schema.table`.
    pub table: String,
    /// User key column.
    pub user: String,
    /// Conversation key column.
    pub conversation: String,
    /// SQL predicate on a members row: the member is still in the conversation.
    pub active: Option<String>,
    /// Column: positions at or below it are not the member's.
    pub join_position: Option<String>,
    /// Column: the time the member joined; the join position is the highest message position
    /// created at or before it (0 when none), as for [`Members::join_position`]. Exclusive with
    /// `join_position`; needs `messages.created_at`. Left out of the fingerprint when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join_time: Option<String>,
}

/// The legacy counter's shape (`shared/spec/semantics.md`, "Legacy shapes").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// Shape A (seed 000): one counter per (user, conversation).
    #[default]
    PerMember,
    /// Shape B (seed 003): one counter per message, how many members have not read it.
    PerMessage,
    /// Shape C (issue 22): no counter stored, a read flag per (member, message) row (Zulip's
    /// `zerver_usermessage.flags & 1`); the stored value of (user, conversation) is the number
    /// of its flag rows that are not read, the conversation being the message's. Audited as a
    /// per-member counter; the contract has nothing to drop (the flags carry other bits).
    ReadFlags,
}

impl Shape {
    /// The shape's name as the mapping file, the reports and the ledger write it
    /// (`per_member`, `per_message`).
    pub fn as_str(self) -> &'static str {
        match self {
            Shape::PerMember => "per_member",
            Shape::PerMessage => "per_message",
            Shape::ReadFlags => "read_flags",
        }
    }
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `[counter]`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Counter {
    /// per_member or per_message.
    pub shape: Shape,
    /// Table holding the counter; for per_message, the messages table (the default).
    pub table: Option<String>,
    /// User key column (per_member).
    pub user: Option<String>,
    /// Conversation key column (per_member).
    pub conversation: Option<String>,
    /// The counter column that `contract` drops (without a `[contract]` section); empty when
    /// the mapping gives `value` instead ([`Counter::stored_column`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub column: String,
    /// An SQL expression (integer) over the counter row `this`, the conversation row `conv`
    /// and the user row `usr`: the stored unread number (issue 12). Excludes `column`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// An SQL predicate over the counter row `this` (and `conv`, `usr`): which counter rows
    /// count (default: every row).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<String>,
    /// What several rows per member mean: `single` (the default: bad input) or `sum`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub combine: Option<Combine>,
    /// The counter's name (issue 22): required and unique when the file has several
    /// `[[counter]]` entries; the report's `counter` column, the summary's and the metrics'
    /// `counter` label. Left out of the fingerprint when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// An SQL predicate over the messages row `this` (and `conv`): what this counter counts
    /// besides `messages.countable` (ANDed with it, and with `legacy_countable`: e.g. root
    /// posts only, `this.root_id = ''`). Left out of the fingerprint when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub countable: Option<String>,
    /// A mention counter (issue 22): it counts the countable messages after the watermark
    /// that mention the member, the mentions given by this table. Left out of the fingerprint
    /// when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mentions: Option<Mentions>,
    /// A mention counter without a mentions table (issue 29 row 16): an SQL predicate over the
    /// message `this` and the reader's `[users]` row `usr` (and `conv`), true when the message
    /// mentions that reader (`this.body LIKE '%@' || usr.username || '%'`). The readers are
    /// the `[members]` rows (without `[members]`, the counter's rows) of the message's
    /// conversation. Exclusive with `mentions`. Left out of the fingerprint when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mentioned: Option<String>,
    /// Shape `read_flags`: the flag row's message column, holding a `[messages] id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Shape `read_flags`: an SQL predicate over the flag row `this`, true when the message
    /// is read (Zulip: `(this.flags & 1) <> 0`); a row where it is not true is unread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<String>,
}

/// `[[counter]] mentions = { table = "mentions", message = "post_id", user = "user_id" }`:
/// one row per (message, mentioned user). `message` matches the messages column `key`
/// (default `messages.id`, the position); a row whose message is not found, or whose message
/// the member sent, mentions nobody (semantics.md, "Several counters per member").
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Mentions {
    /// The mentions table, optionally `schema.table`.
    pub table: String,
    /// Its column naming the message (matched against the messages column `key`).
    pub message: String,
    /// Its column naming the mentioned user (a user key, as `members.user`).
    pub user: String,
    /// The messages column `message` is matched against (default: `messages.id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// An evidence kind (`shared/spec/semantics.md`, "Backfill").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EvidenceKind {
    /// A read position column or a receipts table (maximum per member).
    Position,
    /// A "last read at" time: the highest position created at or before it.
    Timestamp,
    /// The stored counter itself (per_member only).
    Counter,
    /// Lower bound: the member's own newest message.
    OwnMessage,
    /// Read flags per (member, message) (issue 22): the greatest position of the conversation
    /// below the member's lowest unread flagged message, or its greatest position when none is
    /// unread.
    ReadFlags,
}

impl EvidenceKind {
    /// The name recorded as a watermark's provenance (`watermark_source` in the report).
    pub fn as_str(self) -> &'static str {
        match self {
            EvidenceKind::Position => "position",
            EvidenceKind::Timestamp => "timestamp",
            EvidenceKind::Counter => "counter",
            EvidenceKind::OwnMessage => "own_message",
            EvidenceKind::ReadFlags => "read_flags",
        }
    }
}

/// One `[[evidence]]` entry: its kind, with the columns that kind reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Evidence {
    /// A read position column or a receipts table (maximum per member).
    Position(EvidenceSource),
    /// A "last read at" time column: the highest position created at or before it.
    Timestamp(EvidenceSource),
    /// The stored counter itself (per_member only); reads `[counter]`.
    Counter,
    /// Lower bound: the member's own newest message; reads the `[messages]` table.
    OwnMessage,
    /// Read flags per (member, message): `column` is the flag row's message (a `[messages]
    /// id`), `read` the predicate saying the flag is read; the conversation is the message's.
    ReadFlags(EvidenceSource),
}

/// The table and columns a `position` or `timestamp` evidence reads (`table`, `user` and
/// `column` always; `conversation` except for a timestamp keyed by the user alone), with the
/// optional row filter and position lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvidenceSource {
    /// Table, optionally `schema.table`.
    pub table: String,
    /// User key column.
    pub user: String,
    /// Conversation key column. `None` only for `timestamp` evidence keyed by the user alone
    /// (e.g. a users table's "mark all as read" time): its time applies in each of the user's
    /// conversations.
    pub conversation: Option<String>,
    /// Position column (`position`), time column (`timestamp`), or, with a [`Lookup`], the
    /// column holding the key the lookup resolves (e.g. an event id).
    pub column: String,
    /// `filter`: an SQL predicate over the evidence row (named `this`); rows where it is not
    /// true are not evidence (e.g. only receipts of type `m.read`).
    pub filter: Option<String>,
    /// `lookup` (`position` only): `column` holds a key resolved to a position through
    /// another table.
    pub lookup: Option<Lookup>,
    /// `read` (`read_flags` only): the predicate over the flag row `this` that says read.
    pub read: Option<String>,
}

/// `lookup = { table = "events", key = "event_id", position = "stream_ordering" }` on a
/// `position` evidence: the evidence column's value is matched against `table.key`, and the
/// matching row's `position` is the read position (a key that matches no row is no evidence;
/// the key should be unique in `table`: with several matches the highest position counts).
/// With `conversation` (a column of `table`), only a row of the evidence row's conversation
/// matches.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Lookup {
    /// The table to look the key up in, optionally `schema.table`.
    pub table: String,
    /// The column of `table` the evidence column's value is matched against.
    pub key: String,
    /// The column of `table` holding the position (an integer, as `messages.id`).
    pub position: String,
    /// Optional: the column of `table` holding the conversation key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<String>,
}

impl Evidence {
    /// The kind of this evidence.
    pub fn kind(&self) -> EvidenceKind {
        match self {
            Evidence::Position(_) => EvidenceKind::Position,
            Evidence::Timestamp(_) => EvidenceKind::Timestamp,
            Evidence::Counter => EvidenceKind::Counter,
            Evidence::OwnMessage => EvidenceKind::OwnMessage,
            Evidence::ReadFlags(_) => EvidenceKind::ReadFlags,
        }
    }

    /// The table and columns read (`position`, `timestamp`, `read_flags`), or None
    /// (`counter`, `own_message`).
    pub fn source(&self) -> Option<&EvidenceSource> {
        match self {
            Evidence::Position(s) | Evidence::Timestamp(s) | Evidence::ReadFlags(s) => Some(s),
            Evidence::Counter | Evidence::OwnMessage => None,
        }
    }
}

/// `[watermarks]`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Watermarks {
    /// The watermark table's name, optionally `schema.table`.
    pub table: String,
}

/// `[conversations]` or `[users]`: a table and its key column (unique: one row per key, the
/// table's primary key in practice; the join to it must not multiply rows).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct KeyedTable {
    /// Table, optionally `schema.table`.
    pub table: String,
    /// The key column: the conversation key (`[conversations]`) or the user key (`[users]`).
    pub key: String,
}

/// `[counter] combine`: what several counter rows of one member (after `rows`) mean.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Combine {
    /// One row per member (the default): more than one is bad input, reported (exit 2) with
    /// the number of members concerned and one of them.
    #[default]
    Single,
    /// The member's value is the sum of the values of their rows (a NULL row is left out of
    /// the sum; a member whose every row is NULL has a NULL counter).
    Sum,
}

impl Combine {
    /// The name as written in the mapping file.
    pub fn as_str(self) -> &'static str {
        match self {
            Combine::Single => "single",
            Combine::Sum => "sum",
        }
    }
}

/// `[contract] drop`: what the contract stage removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DropKind {
    /// The columns listed in `[contract] columns` (each `table.column` of a mapped table).
    Columns,
    /// The counter table, whole (`[contract] table`, which must be `[counter] table`).
    Table,
    /// Nothing: the counter was never stored (an expression over other state); the contract
    /// archives nothing, drops nothing and records the gate's decision.
    Nothing,
}

impl DropKind {
    /// The name as written in the mapping file.
    pub fn as_str(self) -> &'static str {
        match self {
            DropKind::Columns => "columns",
            DropKind::Table => "table",
            DropKind::Nothing => "nothing",
        }
    }
}

/// `[contract]` as written.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawContract {
    /// What is dropped.
    pub drop: DropKind,
    /// `drop = "columns"`: `table.column` (or `schema.table.column`) per column.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub columns: Vec<String>,
    /// `drop = "table"`: the counter table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
}

/// How the backfill picks a member's watermark when several evidence sources have a value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EvidencePolicy {
    /// The first source in the mapping's order that has a value wins (own messages stay a
    /// lower bound). Right when the sources are ranked by trust: an application's read
    /// position that is always current, listed first.
    #[default]
    First,
    /// The highest value among the position-space sources (position, timestamp,
    /// own_message) wins; a counter only fills a missing watermark when none of them has a
    /// value. Right when sources can lag one another: a stale read receipt must not beat a
    /// newer "last viewed" time.
    Highest,
}

impl EvidencePolicy {
    /// The name as written in the mapping file.
    pub fn as_str(self) -> &'static str {
        match self {
            EvidencePolicy::First => "first",
            EvidencePolicy::Highest => "highest",
        }
    }
}

/// One SQL predicate of the mapping and where it was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PredicateSite {
    /// `section.key`, e.g. `messages.countable`.
    pub key: String,
    /// The predicate as written.
    pub text: String,
    /// `origin:line:col` of the predicate's value in the mapping file.
    pub at: String,
}
