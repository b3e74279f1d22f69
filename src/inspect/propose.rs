//! Choosing a mapping from a [`Catalog`]: candidates by name and type for each part of the
//! mapping file (README "The mapping file"), the best of each chosen, the others kept as
//! alternatives for the comments. Pure: the facts that need the data (does a counter column
//! hold values, which values a membership column takes) are read first and passed in.

use std::collections::BTreeMap;

use super::catalog::{Catalog, Column, Table, TypeClass};
use super::names::{
    CONVERSATION, COUNTER, CREATED, NOT_COUNTABLE, POSITION, RECEIPT_POSITION, SENDER, USER,
};
use crate::dialect::Dialect;
use crate::mapping::{EvidenceKind, Shape};

/// The data facts the choice needs, read by the caller.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// (table, column) of counter candidates -> whether any row holds a value.
    pub has_values: BTreeMap<(String, String), bool>,
    /// (table, column) of membership text columns -> their distinct values (a few).
    pub values: BTreeMap<(String, String), Vec<String>>,
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
    /// Rank of the name in [`COUNTER`] (lower is better).
    rank: usize,
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
    rank: (bool, usize),
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
    /// Remarks for the comment (the values of a membership column, a join time…).
    pub notes: Vec<String>,
}

/// The first column of `table` named in `names` (its rank and the column).
fn pick<'a>(table: &'a Table, names: &[&str]) -> Option<(usize, &'a Column)> {
    names
        .iter()
        .enumerate()
        .find_map(|(i, n)| table.column(n).map(|c| (i, c)))
}

fn lower(s: &str) -> String {
    s.to_ascii_lowercase()
}

fn is_receipts(table: &Table) -> bool {
    let n = lower(&table.bare);
    n.contains("receipt") || n.contains("read_marker") || n.ends_with("_reads")
}

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

/// A column as a predicate names it: quoted when it has capitals (PostgreSQL folds unquoted
/// names to lower case), as it is otherwise so that the DBA reads plain SQL.
fn col(dialect: Dialect, name: &str) -> String {
    if name.chars().any(|c| c.is_ascii_uppercase()) {
        dialect.quote(name)
    } else {
        name.to_string()
    }
}

/// A table name as a statement writes it: each part quoted when it has capitals.
fn table_ref(dialect: Dialect, name: &str) -> String {
    name.split('.')
        .map(|part| col(dialect, part))
        .collect::<Vec<_>>()
        .join(".")
}

/// A message named by a key other than its position, and the view that looks the position up.
#[derive(Debug, Clone)]
struct Lookup {
    /// The messages table's key column the reference matches.
    key: String,
    /// The view's name: the referring table's, with `_positions`.
    view: String,
    /// The `CREATE VIEW` statement.
    statement: String,
}

/// When `column` of table `t` names a message by a key other than its position (a text
/// `event_id`, `last_read_event_id`, `message_uuid`…) and a messages candidate has that key
/// column (the name itself, or without its `last_read_`-like prefix), the view that looks the
/// position up in it: the member's user and conversation, and the message's position named
/// `alias` (the chosen messages table's position). Tables are tried before views (a view may
/// keep only some events, and a read of another event is still a read position). The join also
/// matches the conversation, so a key reused across conversations cannot cross.
fn lookup_view(
    dialect: Dialect,
    catalog: &Catalog,
    t: &Table,
    (user, conv): (&str, &str),
    column: &Column,
    candidates: &[MessagesCandidate],
    alias: &str,
) -> Option<(Lookup, String)> {
    let mut ordered: Vec<&MessagesCandidate> = candidates.iter().collect();
    ordered.sort_by_key(|m| m.is_view);
    ordered.into_iter().find_map(|m| {
        lookup_in(dialect, catalog, t, (user, conv), column, m, alias).map(|l| (l, m.table.clone()))
    })
}

/// [`lookup_view`] in one messages candidate `m`.
fn lookup_in(
    dialect: Dialect,
    catalog: &Catalog,
    t: &Table,
    (user, conv): (&str, &str),
    column: &Column,
    m: &MessagesCandidate,
    alias: &str,
) -> Option<Lookup> {
    let messages = catalog.tables.iter().find(|x| x.name == m.table)?;
    let name = lower(&column.name);
    let mut keys = vec![name.clone()];
    for prefix in [
        "last_read_",
        "last_seen_",
        "last_viewed_",
        "read_up_to_",
        "last_receipt_",
    ] {
        if let Some(rest) = name.strip_prefix(prefix) {
            keys.push(rest.to_string());
        }
    }
    let key = keys.iter().find_map(|k| {
        messages.column(k).filter(|c| {
            [&m.position, &m.conversation, &m.sender]
                .iter()
                .all(|taken| !c.name.eq_ignore_ascii_case(taken))
        })
    })?;
    let view = format!("{}_positions", t.bare);
    let statement = format!(
        "CREATE VIEW {view} AS SELECT r.{u} AS {u}, r.{c} AS {c}, m.{pos} AS {alias} FROM {t} r \
         JOIN {mt} m ON m.{key} = r.{col} AND m.{mconv} = r.{c}",
        u = col(dialect, user),
        c = col(dialect, conv),
        pos = col(dialect, &m.position),
        alias = col(dialect, alias),
        t = table_ref(dialect, &t.name),
        mt = table_ref(dialect, &m.table),
        key = col(dialect, &key.name),
        col = col(dialect, &column.name),
        mconv = col(dialect, &m.conversation),
    );
    Some(Lookup {
        key: key.name.clone(),
        view,
        statement,
    })
}

/// The note for a column that may name a message by another key: the lookup view to map
/// (see [`lookup_view`]), or `general` when the messages table has no such key.
fn lookup_note(
    dialect: Dialect,
    catalog: &Catalog,
    t: &Table,
    key: (&str, &str),
    column: &Column,
    candidates: &[MessagesCandidate],
    general: String,
) -> String {
    let Some(alias) = candidates.first().map(|m| m.position.clone()) else {
        return general;
    };
    let Some((l, table)) = lookup_view(dialect, catalog, t, key, column, candidates, &alias) else {
        return general;
    };
    format!(
        "{}.{} ({}) names a message by {}.{}, not by its position: give its [[evidence]] entry \
         lookup = {{ table = \"{}\", key = \"{}\", position = \"{}\" }}, or map a view that \
         looks the position up, `{}`, then an [[evidence]] kind = \"position\" with table = \
         \"{}\", column = \"{}\"",
        t.name,
        column.name,
        column.declared,
        table,
        l.key,
        table,
        l.key,
        alias,
        l.statement,
        l.view,
        alias
    )
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

/// Chooses the mapping.
pub fn propose(catalog: &Catalog, facts: &Facts, dialect: Dialect) -> Proposal {
    let mut p = Proposal::default();
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
    let msg_table = p.messages.as_ref().map(|m| m.table.clone());

    // Counters: integers before other types, per_member before per_message, columns holding
    // values before empty ones, then by name.
    let mut counters = counter_candidates(catalog, msg_table.as_deref());
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

    // Members.
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

    // Evidence: receipts tables, then last-read positions, then last-read times.
    let created = p.messages.as_ref().and_then(|m| m.created_at.clone());
    // The messages candidates, the chosen one first (a lookup's view names its position).
    let messages: Vec<MessagesCandidate> = p
        .messages
        .iter()
        .chain(&p.messages_alternatives)
        .cloned()
        .collect();
    let (mut receipts, mut positions, mut times) = (Vec::new(), Vec::new(), Vec::new());
    for t in &catalog.tables {
        let (Some((_, u)), Some((_, c))) = (pick(t, USER), pick(t, CONVERSATION)) else {
            continue;
        };
        if Some(&t.name) == msg_table.as_ref() {
            continue;
        }
        let source = |col: &Column| {
            (
                t.name.clone(),
                u.name.clone(),
                c.name.clone(),
                col.name.clone(),
            )
        };
        if is_receipts(t) {
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
                    source: Some(source(col)),
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
                                && x.name != u.name
                                && x.name != c.name
                                && ["event", "message", "msg"].iter().any(|w| n.contains(w))
                        })
                        .map(|x| {
                            lookup_note(
                                dialect,
                                catalog,
                                t,
                                (&u.name, &c.name),
                                x,
                                &messages,
                                String::new(),
                            )
                        })
                        .find(|n| !n.is_empty())
                        .unwrap_or(general);
                    p.evidence_notes.push(note);
                }
            }
            continue;
        }
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
                if created.is_some() {
                    times.push(EvidenceChoice {
                        kind: EvidenceKind::Timestamp,
                        source: Some(source(col)),
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
                    source: Some(source(col)),
                    why: format!("{}.{} is a last-read position", t.name, col.name),
                });
            } else {
                let general = format!(
                    "{}.{} ({}) looks like read evidence but is neither an integer nor a time",
                    t.name, col.name, col.declared
                );
                p.evidence_notes.push(lookup_note(
                    dialect,
                    catalog,
                    t,
                    (&u.name, &c.name),
                    col,
                    &messages,
                    general,
                ));
            }
        }
    }
    p.evidence.extend(receipts);
    p.evidence.extend(positions);
    p.evidence.extend(times);
    // A view already chosen as evidence may be such a lookup: say so beside the proposed ones.
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
    p
}
