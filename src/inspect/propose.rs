//! Choosing a mapping from a [`Catalog`]: candidates by name and type for each part of the
//! mapping file (README "The mapping file"), the best of each chosen, the others kept as
//! alternatives for the comments. Pure: the facts that need the data (does a counter column
//! hold values, which values a membership column takes) are read first and passed in.

use super::catalog::{Catalog, Column, Table, TypeClass};
use super::columns::{col, is_receipts, lower, pick};
use super::lookup::lookup_note;
use super::names::{
    CONVERSATION, COUNTER, CREATED, NOT_COUNTABLE, POSITION, RECEIPT_POSITION, SENDER, USER,
};
use crate::dialect::Dialect;
use crate::mapping::{EvidenceKind, Shape};

pub use super::proposal::{
    CounterCandidate, EvidenceChoice, Facts, MembersChoice, MessagesCandidate, Proposal,
};

/// Rank of a table's name as a messages table (lower is better).
fn messages_name_rank(table: &Table) -> usize {
    let n = lower(&table.bare);
    if n == "messages" {
        0
    } else if n.contains("message") {
        1
    } else if n == "events" || n.contains("event") {
        2
    } else if n.contains("post") || n.contains("chat") {
        3
    } else {
        4
    }
}
/// A predicate that is true for a row to count, from a flag or time column.
fn not_countable_predicate(dialect: Dialect, column: &Column) -> Option<String> {
    let name = col(dialect, &column.name);
    match column.class {
        TypeClass::Boolean => Some(format!("NOT {name}")),
        TypeClass::Integer if !lower(&column.name).ends_with("_at") => Some(format!("{name} = 0")),
        TypeClass::Timestamp | TypeClass::Integer => Some(format!("{name} IS NULL")),
        _ => None,
    }
}

/// Every table that holds messages: a conversation, a sender and a position column.
fn messages_candidates(catalog: &Catalog, dialect: Dialect) -> Vec<MessagesCandidate> {
    let mut out = Vec::new();
    for t in &catalog.tables {
        let n = lower(&t.bare);
        if is_receipts(t)
            || ["summary", "counter", "member"]
                .iter()
                .any(|w| n.contains(w))
        {
            continue;
        }
        let name_rank = messages_name_rank(t);
        let Some((_, conv)) = pick(t, CONVERSATION) else {
            continue;
        };
        let sender = pick(t, SENDER)
            .map(|(_, c)| c)
            .or_else(|| (name_rank < 4).then(|| t.column("user_id")).flatten());
        let Some(sender) = sender else { continue };
        let positions: Vec<&Column> = POSITION
            .iter()
            .filter_map(|p| t.column(p))
            .filter(|c| c.name != conv.name && c.name != sender.name)
            .collect();
        let Some(position) = positions
            .iter()
            .find(|c| c.class == TypeClass::Integer)
            .or(positions.first())
        else {
            continue;
        };
        let countable = NOT_COUNTABLE
            .iter()
            .filter_map(|n| t.column(n))
            .filter_map(|c| not_countable_predicate(dialect, c))
            .collect();
        out.push(MessagesCandidate {
            table: t.name.clone(),
            conversation: conv.name.clone(),
            sender: sender.name.clone(),
            position: position.name.clone(),
            position_declared: position.declared.clone(),
            position_integer: position.class == TypeClass::Integer,
            created_at: pick(t, CREATED).map(|(_, c)| c.name.clone()),
            countable,
            is_view: t.is_view,
            rank: (position.class != TypeClass::Integer, name_rank),
        });
    }
    out.sort_by_key(|m| m.rank);
    out
}

/// Every counter column: on a table keyed by user and conversation (per_member), or on the
/// messages table (per_message).
pub fn counter_candidates(catalog: &Catalog, messages: Option<&str>) -> Vec<CounterCandidate> {
    let mut out = Vec::new();
    for t in &catalog.tables {
        let key = match (pick(t, USER), pick(t, CONVERSATION)) {
            (Some((_, u)), Some((_, c))) => Some((u.name.clone(), c.name.clone())),
            _ => None,
        };
        let on_messages = Some(t.name.as_str()) == messages;
        if key.is_none() && !on_messages {
            continue;
        }
        for c in &t.columns {
            let name = lower(&c.name);
            let rank = match COUNTER.iter().position(|n| *n == name) {
                Some(r) => r,
                None if name.contains("unread") && !name.starts_with("last_") => COUNTER.len(),
                None => continue,
            };
            out.push(CounterCandidate {
                table: t.name.clone(),
                column: c.name.clone(),
                declared: c.declared.clone(),
                integer: c.class == TypeClass::Integer,
                shape: if on_messages {
                    Shape::PerMessage
                } else {
                    Shape::PerMember
                },
                key: if on_messages { None } else { key.clone() },
                rank,
            });
        }
    }
    out
}

/// Text columns of membership tables whose values decide who is still a member.
pub fn membership_value_columns(catalog: &Catalog) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for t in catalog.tables.iter().filter(|t| is_members(t)) {
        for n in ["membership", "status", "state"] {
            if let Some(c) = t.column(n).filter(|c| c.class == TypeClass::Text) {
                out.push((t.name.clone(), c.name.clone()));
            }
        }
    }
    out
}

fn is_members(t: &Table) -> bool {
    let n = lower(&t.bare);
    !is_receipts(t)
        && pick(t, USER).is_some()
        && pick(t, CONVERSATION).is_some()
        && ["member", "participant", "subscri", "_users", "joined"]
            .iter()
            .any(|w| n.contains(w))
}

/// The `[members]` choice for a table: keys, active predicate, join position.
fn members_choice(t: &Table, facts: &Facts, dialect: Dialect) -> MembersChoice {
    let user = pick(t, USER)
        .map(|(_, c)| c.name.clone())
        .unwrap_or_default();
    let conversation = pick(t, CONVERSATION)
        .map(|(_, c)| c.name.clone())
        .unwrap_or_default();
    let mut notes = Vec::new();
    let mut active = None;
    for c in &t.columns {
        let n = lower(&c.name);
        let name = col(dialect, &c.name);
        let predicate = match n.as_str() {
            "active" | "is_active" | "is_member" | "joined" => match c.class {
                TypeClass::Boolean => Some(name.clone()),
                TypeClass::Integer => Some(format!("{name} = 1")),
                _ => None,
            },
            "left_at" | "removed_at" | "deleted_at" | "left_on" => Some(format!("{name} IS NULL")),
            "is_left" | "left" | "has_left" | "is_removed" | "removed" | "is_deleted" => {
                match c.class {
                    TypeClass::Boolean => Some(format!("NOT {name}")),
                    TypeClass::Integer => Some(format!("{name} = 0")),
                    _ => None,
                }
            }
            "membership" | "status" | "state" => {
                let values = facts
                    .values
                    .get(&(t.name.clone(), c.name.clone()))
                    .cloned()
                    .unwrap_or_default();
                notes.push(format!("{} takes the values {:?}", c.name, values));
                ["join", "joined", "active", "member"]
                    .iter()
                    .find(|v| values.iter().any(|x| x == *v))
                    .map(|v| format!("{name} = '{v}'"))
            }
            _ => None,
        };
        match (&active, predicate) {
            (None, Some(p)) => active = Some(p),
            (Some(_), Some(p)) => notes.push(format!("another active rule is possible: {p}")),
            _ => {}
        }
    }
    let mut join_position = None;
    for c in t.columns.iter().filter(|c| lower(&c.name).contains("join")) {
        let is_time = c.class == TypeClass::Timestamp
            || (c.class == TypeClass::Integer && lower(&c.name).ends_with("_at"));
        if is_time {
            notes.push(format!(
                "{0} is a join time, not a position: add join_time = \"{0}\" (the join \
                 position is the highest message position created at or before it; needs \
                 messages.created_at)",
                c.name
            ));
        } else if c.class == TypeClass::Integer && join_position.is_none() {
            join_position = Some(c.name.clone());
        }
    }
    if active.is_none() {
        notes.push("no column says who left: every row is taken as a member".into());
    }
    MembersChoice {
        table: t.name.clone(),
        user,
        conversation,
        active,
        join_position,
        notes,
    }
}

/// Chooses the mapping: the messages table, the counter, the members table and the evidence,
/// each with the alternatives seen; what a complete mapping lacks in [`Proposal::missing`].
pub fn propose(catalog: &Catalog, facts: &Facts, dialect: Dialect) -> Proposal {
    let mut p = Proposal::default();
    choose_messages(&mut p, catalog, dialect);
    choose_counter(&mut p, catalog, facts);
    choose_members(&mut p, catalog, facts, dialect);
    choose_evidence(&mut p, catalog, dialect);
    p
}

/// `[messages]`: the best messages candidate (missing when its position is not an integer),
/// the others as alternatives; missing when there is none.
fn choose_messages(p: &mut Proposal, catalog: &Catalog, dialect: Dialect) {
    let mut messages = messages_candidates(catalog, dialect);
    if !messages.is_empty() {
        let chosen = messages.remove(0);
        if !chosen.position_integer {
            p.missing.push(format!(
                "an integer position on {}: {} is {}",
                chosen.table, chosen.position, chosen.position_declared
            ));
        }
        p.messages = Some(chosen);
    } else {
        p.missing.push(
            "a messages table: no table or view has a conversation column (conv_id, \
             conversation_id, room_id, channel_id…), a sender column (sender_id, sender, \
             author_id…) and a position (seq, position, stream_ordering, id…)"
                .into(),
        );
    }
    p.messages_alternatives = messages;
}

/// `[counter]`: integers before other types, columns holding values before empty ones,
/// per_member before per_message, then by name; the others as alternatives; missing when there
/// is none.
fn choose_counter(p: &mut Proposal, catalog: &Catalog, facts: &Facts) {
    let msg_table = p.messages.as_ref().map(|m| m.table.as_str());
    let mut counters = counter_candidates(catalog, msg_table);
    counters.sort_by_key(|c| {
        let has = facts
            .has_values
            .get(&(c.table.clone(), c.column.clone()))
            .copied()
            .unwrap_or(true);
        (!c.integer, !has, c.shape == Shape::PerMessage, c.rank)
    });
    if counters.is_empty() {
        p.missing.push(
            "a counter column: no integer column named unread_count, unread, unread_messages, \
             msg_count… on a table keyed by user and conversation, or on the messages table"
                .into(),
        );
    } else {
        p.counter = Some(counters.remove(0));
    }
    p.counter_alternatives = counters;
}

/// `[members]`: the membership table with an `active` column first, then the shortest name;
/// the others as alternatives; missing only when a per_message counter needs one.
fn choose_members(p: &mut Proposal, catalog: &Catalog, facts: &Facts, dialect: Dialect) {
    let msg_table = p.messages.as_ref().map(|m| m.table.clone());
    let mut members: Vec<&Table> = catalog
        .tables
        .iter()
        .filter(|t| is_members(t) && Some(&t.name) != msg_table.as_ref())
        .collect();
    members.sort_by_key(|t| (t.column("active").is_none(), t.name.len()));
    if let Some(t) = members.first() {
        p.members = Some(members_choice(t, facts, dialect));
    } else if p.counter.as_ref().map(|c| c.shape) == Some(Shape::PerMessage) {
        p.missing.push(
            "a members table (user and conversation columns, named like members or \
             participants): a per_message counter counts the members who have not read"
                .into(),
        );
    }
    p.members_alternatives = members.iter().skip(1).map(|t| t.name.clone()).collect();
}

/// A table keyed by user and conversation, other than the messages table, read for evidence.
struct Keyed<'a> {
    catalog: &'a Catalog,
    dialect: Dialect,
    /// The messages candidates, the chosen one first (a lookup's view names its position).
    messages: &'a [MessagesCandidate],
    /// The table.
    t: &'a Table,
    /// Its user column.
    user: &'a Column,
    /// Its conversation column.
    conv: &'a Column,
}

impl Keyed<'_> {
    /// An evidence entry's source: (table, user, conversation, `column`).
    fn source(&self, column: &Column) -> (String, String, String, String) {
        (
            self.t.name.clone(),
            self.user.name.clone(),
            self.conv.name.clone(),
            column.name.clone(),
        )
    }

    /// [`lookup_note`] for `column` of this table.
    fn lookup_note(&self, column: &Column, general: String) -> String {
        lookup_note(
            self.dialect,
            self.catalog,
            self.t,
            (&self.user.name, &self.conv.name),
            column,
            self.messages,
            general,
        )
    }
}

/// `[[evidence]]`: receipts tables, then last-read positions, then last-read times, then (for
/// a per_member counter) the stored counter itself; notes on what was seen but is not usable
/// unedited; missing when a per_message counter has no read evidence.
fn choose_evidence(p: &mut Proposal, catalog: &Catalog, dialect: Dialect) {
    let msg_table = p.messages.as_ref().map(|m| m.table.clone());
    let created = p.messages.as_ref().is_some_and(|m| m.created_at.is_some());
    let messages: Vec<MessagesCandidate> = p
        .messages
        .iter()
        .chain(&p.messages_alternatives)
        .cloned()
        .collect();
    let (mut receipts, mut positions, mut times) = (Vec::new(), Vec::new(), Vec::new());
    for t in &catalog.tables {
        let (Some((_, user)), Some((_, conv))) = (pick(t, USER), pick(t, CONVERSATION)) else {
            continue;
        };
        if Some(&t.name) == msg_table.as_ref() {
            continue;
        }
        let keyed = Keyed {
            catalog,
            dialect,
            messages: &messages,
            t,
            user,
            conv,
        };
        if is_receipts(t) {
            receipts_evidence(p, &keyed, &mut receipts);
        } else {
            read_columns(p, &keyed, created, &mut positions, &mut times);
        }
    }
    p.evidence.extend(receipts);
    p.evidence.extend(positions);
    p.evidence.extend(times);
    note_lookup_views(p, catalog);
    counter_evidence(p);
}

/// A receipts table: named in [`Proposal::receipts_tables`]; its highest integer read position
/// per member as evidence (into `receipts`), else a note (a lookup view when a column names a
/// message by another key); a note when it has receipt types or threads.
fn receipts_evidence(p: &mut Proposal, k: &Keyed, receipts: &mut Vec<EvidenceChoice>) {
    let t = k.t;
    p.receipts_tables.push(if t.is_view {
        format!("{} (view)", t.name)
    } else {
        t.name.clone()
    });
    let kinds: Vec<&str> = ["receipt_type", "type", "kind", "thread_id"]
        .into_iter()
        .filter(|n| t.column(n).is_some())
        .collect();
    if !kinds.is_empty() {
        p.evidence_notes.push(format!(
            "{} has {}: every row counts as a read, whatever its type or thread; if \
             some are not, keep the read receipts with the entry's `filter` (a predicate \
             over the receipt row `this`, e.g. filter = \"this.receipt_type = 'm.read'\")",
            t.name,
            kinds.join(", ")
        ));
    }
    match RECEIPT_POSITION
        .iter()
        .filter_map(|n| t.column(n))
        .find(|c| c.class == TypeClass::Integer)
    {
        Some(col) => receipts.push(EvidenceChoice {
            kind: EvidenceKind::Position,
            source: Some(k.source(col)),
            why: format!(
                "receipts table {}: the highest {} per member is the read position",
                t.name, col.name
            ),
        }),
        None => {
            let general = format!(
                "receipts table {} has no integer read position; if it names a message \
                 by another key (event_id…), map a view that resolves it to the position",
                t.name
            );
            // The first column that names a message by a key the messages table has.
            let note = t
                .columns
                .iter()
                .filter(|x| {
                    let n = lower(&x.name);
                    x.class != TypeClass::Integer
                        && x.name != k.user.name
                        && x.name != k.conv.name
                        && ["event", "message", "msg"].iter().any(|w| n.contains(w))
                })
                .map(|x| k.lookup_note(x, String::new()))
                .find(|n| !n.is_empty())
                .unwrap_or(general);
            p.evidence_notes.push(note);
        }
    }
}

/// The last-read columns of a table that is not a receipts table: integer positions (into
/// `positions`), times (into `times`, when the messages table has a creation time; else a
/// note), and a note for any other type (a lookup view when it names a message by another key).
fn read_columns(
    p: &mut Proposal,
    k: &Keyed,
    created: bool,
    positions: &mut Vec<EvidenceChoice>,
    times: &mut Vec<EvidenceChoice>,
) {
    let t = k.t;
    for col in &t.columns {
        let n = lower(&col.name);
        let read_like = n.starts_with("last_read")
            || n.starts_with("last_seen")
            || n.starts_with("last_viewed")
            || n.starts_with("last_receipt")
            || n == "read_at"
            || n == "read_up_to";
        if !read_like {
            continue;
        }
        let is_time = col.class == TypeClass::Timestamp
            || n.ends_with("_at")
            || n.ends_with("_ts")
            || n.ends_with("_time");
        if is_time {
            if created {
                times.push(EvidenceChoice {
                    kind: EvidenceKind::Timestamp,
                    source: Some(k.source(col)),
                    why: format!(
                        "{}.{} ({}) is a last-read time: the highest position created at or \
                         before it",
                        t.name, col.name, col.declared
                    ),
                });
            } else {
                p.evidence_notes.push(format!(
                    "{}.{} is a last-read time, usable once messages.created_at is mapped",
                    t.name, col.name
                ));
            }
        } else if col.class == TypeClass::Integer {
            positions.push(EvidenceChoice {
                kind: EvidenceKind::Position,
                source: Some(k.source(col)),
                why: format!("{}.{} is a last-read position", t.name, col.name),
            });
        } else {
            let general = format!(
                "{}.{} ({}) looks like read evidence but is neither an integer nor a time",
                t.name, col.name, col.declared
            );
            p.evidence_notes.push(k.lookup_note(col, general));
        }
    }
}

/// A view already chosen as evidence may be such a lookup: when a note proposes a lookup view,
/// another note says so beside the proposed ones.
fn note_lookup_views(p: &mut Proposal, catalog: &Catalog) {
    let views: Vec<String> = p
        .evidence
        .iter()
        .filter_map(|e| e.source.as_ref().map(|s| s.0.clone()))
        .filter(|name| catalog.tables.iter().any(|t| &t.name == name && t.is_view))
        .collect();
    if !views.is_empty()
        && p.evidence_notes
            .iter()
            .any(|n| n.contains("looks the position up"))
    {
        p.evidence_notes.push(format!(
            "the view {} (used as evidence above) may already be such a lookup: check it before \
             creating another",
            views.join(", ")
        ));
    }
}

/// The evidence's end: the stored counter itself last for a per_member counter; missing, for a
/// per_message counter, when no position or time evidence was found.
fn counter_evidence(p: &mut Proposal) {
    match p.counter.as_ref().map(|c| c.shape) {
        Some(Shape::PerMember) => p.evidence.push(EvidenceChoice {
            kind: EvidenceKind::Counter,
            source: None,
            why: "when none above has a value: the stored counter itself (the position that \
                  leaves that many countable messages unread)"
                .into(),
        }),
        Some(Shape::PerMessage)
            if !p
                .evidence
                .iter()
                .any(|e| matches!(e.kind, EvidenceKind::Position | EvidenceKind::Timestamp)) =>
        {
            p.missing.push(
                "read evidence for a per_message counter: a receipts table or a last-read \
                 column (position or time)"
                    .into(),
            )
        }
        _ => {}
    }
}
