//! Choosing a mapping from a [`Catalog`]: candidates by name and type for each part of the
//! mapping file (the book: docs/src/mapping.md, "The mapping file"), the best of each chosen, the others kept as
//! alternatives for the comments. Pure: the facts that need the data (does a counter column
//! hold values, which values a membership column takes) are read first and passed in.

use super::catalog::{Catalog, Column, Table, TypeClass};
use super::columns::{col, is_receipts, lower, pick};
use super::lookup::lookup_note;
use super::messages::messages_candidates;
use super::names::{COUNTER, RECEIPT_POSITION, USER};
use super::proposal::{figure, judged};
use super::structure::{conversation_names, pick_named};
use crate::dialect::Dialect;
use crate::mapping::{EvidenceKind, Shape};

pub use super::proposal::{
    CounterCandidate, EvidenceChoice, Facts, MembersChoice, MessagesCandidate, Proposal,
};

/// Whether a column's name says it holds a read position, a time, a key or a flag, never a
/// count.
fn named_like_position(name: &str) -> bool {
    let n = lower(name);
    [
        "last_", "read", "seen", "_id", "number", "position", "seq", "ordering", "join", "left",
        "active", "is_", "has_", "flag", "status", "state", "type", "kind", "deleted",
    ]
    .iter()
    .any(|w| n.contains(w))
        || n == "id"
}

/// The integer columns of the tables keyed by user and conversation that neither a name
/// recognises as a counter nor as a position: measured for their range (`facts.ranges`), a
/// counter by its values (issue 24).
pub fn range_columns(catalog: &Catalog) -> Vec<(String, String, String)> {
    let convs = conversation_names(catalog);
    let mut out = Vec::new();
    for t in &catalog.tables {
        let (Some((_, u)), Some(c)) = (pick(t, USER), pick_named(t, &convs)) else {
            continue;
        };
        for x in &t.columns {
            if x.class == TypeClass::Integer
                && x.name != u.name
                && x.name != c.name
                && !named_like_position(&x.name)
            {
                out.push((t.name.clone(), c.name.clone(), x.name.clone()));
            }
        }
    }
    out
}

/// Every counter column: on a table keyed by user and conversation (per_member), or on the
/// messages table (per_message); by its name, or (rank after every name) an integer column
/// whose values lie between 0 and the conversation's message count in at least 90 % of a
/// sample (`facts.ranges`).
pub fn counter_candidates(
    catalog: &Catalog,
    messages: Option<&str>,
    facts: &Facts,
) -> Vec<CounterCandidate> {
    let convs = conversation_names(catalog);
    let mut out = Vec::new();
    for t in &catalog.tables {
        let key = match (pick(t, USER), pick_named(t, &convs)) {
            (Some((_, u)), Some(c)) => Some((u.name.clone(), c.name.clone())),
            _ => None,
        };
        let on_messages = Some(t.name.as_str()) == messages;
        if key.is_none() && !on_messages {
            continue;
        }
        for c in &t.columns {
            let name = lower(&c.name);
            let by_values = facts
                .ranges
                .get(&(t.name.clone(), c.name.clone()))
                .and_then(|m| judged(*m))
                .is_some_and(|s| s >= crate::schema::evidence_share::MIN_SHARE);
            let rank = match COUNTER.iter().position(|n| *n == name) {
                Some(r) => r,
                None if name.contains("unread") && !name.starts_with("last_") => COUNTER.len(),
                None if by_values && key.is_some() && !on_messages => COUNTER.len() + 1,
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
                figure: None,
            });
        }
    }
    out
}

/// Text columns of membership tables whose values decide who is still a member.
pub fn membership_value_columns(catalog: &Catalog) -> Vec<(String, String)> {
    let convs = conversation_names(catalog);
    let mut out = Vec::new();
    for t in catalog.tables.iter().filter(|t| is_members(t, &convs)) {
        for n in ["membership", "status", "state"] {
            if let Some(c) = t.column(n).filter(|c| c.class == TypeClass::Text) {
                out.push((t.name.clone(), c.name.clone()));
            }
        }
    }
    out
}

fn is_members(t: &Table, convs: &[String]) -> bool {
    let n = lower(&t.bare);
    !is_receipts(t)
        && pick(t, USER).is_some()
        && pick_named(t, convs).is_some()
        && ["member", "participant", "subscri", "_users", "joined"]
            .iter()
            .any(|w| n.contains(w))
}

/// The `[members]` choice for a table: keys, active predicate, join position (or join time,
/// when the messages have a creation time: `created`).
fn members_choice(
    t: &Table,
    convs: &[String],
    facts: &Facts,
    dialect: Dialect,
    created: bool,
) -> MembersChoice {
    let user = pick(t, USER)
        .map(|(_, c)| c.name.clone())
        .unwrap_or_default();
    let conversation = pick_named(t, convs)
        .map(|c| c.name.clone())
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
    let mut join_times = Vec::new();
    for c in t.columns.iter().filter(|c| lower(&c.name).contains("join")) {
        let is_time = c.class == TypeClass::Timestamp || lower(&c.name).ends_with("_at");
        if is_time {
            join_times.push(c.name.clone());
        } else if c.class == TypeClass::Integer && join_position.is_none() {
            join_position = Some(c.name.clone());
        }
    }
    let mut join_time = None;
    for j in join_times {
        if join_position.is_none() && join_time.is_none() && created {
            notes.push(format!(
                "{j} is a join time: the join position is the highest message position created \
                 at or before it (messages the member never saw are not owed)"
            ));
            join_time = Some(j);
        } else {
            notes.push(format!(
                "{j} is a join time, not a position: add join_time = \"{j}\" (the join \
                 position is the highest message position created at or before it; needs \
                 messages.created_at)"
            ));
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
        join_time,
        notes,
    }
}

/// Chooses the mapping: the messages table, the counter, the members table and the evidence,
/// each with the alternatives seen; what a complete mapping lacks in [`Proposal::missing`].
pub fn propose(catalog: &Catalog, facts: &Facts, dialect: Dialect) -> Proposal {
    let mut p = Proposal::default();
    choose_messages(&mut p, catalog, facts, dialect);
    choose_counter(&mut p, catalog, facts);
    choose_members(&mut p, catalog, facts, dialect);
    choose_evidence(&mut p, catalog, facts, dialect);
    p
}

/// `[messages]`: the best messages candidate (missing when its position is not an integer),
/// the others as alternatives; missing when there is none.
fn choose_messages(p: &mut Proposal, catalog: &Catalog, facts: &Facts, dialect: Dialect) {
    let mut messages = messages_candidates(catalog, facts, dialect, &mut p.explain);
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
            "a messages table: no table or view has a conversation key (conv_id, room_id…, \
             or the first column of a unique index on (conversation, integer), a declared \
             foreign key, or a <x>_id of a table <x> or its plural), a sender column (sender_id, author_id…) and a position (an \
             integer unique within the conversation or alone, or seq, position, id…); \
             --explain lists each table's reason"
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
    let mut counters = counter_candidates(catalog, msg_table, facts);
    let range = |c: &CounterCandidate| facts.ranges.get(&(c.table.clone(), c.column.clone()));
    for c in counters.iter_mut() {
        if let Some(m) = range(c) {
            c.figure = Some(format!(
                "values between 0 and the conversation's message count: {}",
                figure(*m)
            ));
        }
    }
    counters.sort_by_key(|c| {
        let has = facts
            .has_values
            .get(&(c.table.clone(), c.column.clone()))
            .copied()
            .unwrap_or(true);
        let out_of_range = range(c)
            .and_then(|m| judged(*m))
            .is_some_and(|s| s < crate::schema::evidence_share::MIN_COUNTER_SHARE);
        // A column found by its values alone comes after every named one.
        (
            !c.integer,
            !has,
            c.rank > COUNTER.len(),
            out_of_range,
            c.shape == Shape::PerMessage,
            c.rank,
        )
    });
    for c in &counters {
        p.explain.push(format!(
            "counter candidate {}.{} ({}, {}{})",
            c.table,
            c.column,
            c.declared,
            Shape::as_str(c.shape),
            c.figure
                .as_ref()
                .map(|f| format!("; {f}"))
                .unwrap_or_default()
        ));
    }
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
    let created = p.messages.as_ref().is_some_and(|m| m.created_at.is_some());
    let convs = conversation_names(catalog);
    let mut members: Vec<&Table> = catalog
        .tables
        .iter()
        .filter(|t| is_members(t, &convs) && Some(&t.name) != msg_table.as_ref())
        .collect();
    members.sort_by_key(|t| (t.column("active").is_none(), t.name.len()));
    if let Some(t) = members.first() {
        p.members = Some(members_choice(t, &convs, facts, dialect, created));
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
fn choose_evidence(p: &mut Proposal, catalog: &Catalog, facts: &Facts, dialect: Dialect) {
    let msg_table = p.messages.as_ref().map(|m| m.table.clone());
    let convs = conversation_names(catalog);
    let created = p.messages.as_ref().is_some_and(|m| m.created_at.is_some());
    let messages: Vec<MessagesCandidate> = p
        .messages
        .iter()
        .chain(&p.messages_alternatives)
        .cloned()
        .collect();
    let (mut receipts, mut positions, mut times) = (Vec::new(), Vec::new(), Vec::new());
    for t in &catalog.tables {
        let (Some((_, user)), Some(conv)) = (pick(t, USER), pick_named(t, &convs)) else {
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
    evidence_figures(p, facts);
    note_lookup_views(p, catalog);
    counter_evidence(p);
}

/// The figures seen for each position and timestamp entry (issue 24): the share of its values
/// that are positions of their conversation in the chosen position (or the share of its times
/// at or after the conversation's first message), said in its comment; an entry under the
/// share that stops a backfill is said to be another position space.
fn evidence_figures(p: &mut Proposal, facts: &Facts) {
    let Some(m) = p.messages.clone() else {
        return;
    };
    for e in p.evidence.iter_mut() {
        let Some((table, _, _, column)) = e.source.clone() else {
            continue;
        };
        let measure = match e.kind {
            EvidenceKind::Position => facts
                .fits
                .get(&(
                    table.clone(),
                    column.clone(),
                    m.table.clone(),
                    m.position.clone(),
                ))
                .map(|x| {
                    (
                        *x,
                        format!(
                            "positions of their conversation in {}.{}",
                            m.table, m.position
                        ),
                    )
                }),
            EvidenceKind::Timestamp => facts.times.get(&(table.clone(), column.clone())).map(|x| {
                (
                    *x,
                    "at or after their conversation's first message".to_string(),
                )
            }),
            _ => None,
        };
        let Some((x, what)) = measure else { continue };
        e.why
            .push_str(&format!("; on a sample, {} values are {what}", figure(x)));
        if judged(x).is_some_and(|s| s < crate::schema::evidence_share::MIN_SHARE) {
            e.why
                .push_str(": ANOTHER POSITION SPACE? the backfill stops on it");
            p.evidence_notes.push(format!(
                "{table}.{column} fits {}.{} in only {} sampled values: map the position it \
                 uses as messages.id (the backfill refuses it otherwise)",
                m.table,
                m.position,
                figure(x)
            ));
        }
        p.explain
            .push(format!("evidence {table}.{column}: {}", e.why));
    }
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
            || n.starts_with("last_visit")
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
