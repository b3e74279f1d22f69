//! The proposed mapping file's text: the book's layout ("The mapping file", docs/src/mapping.md), a comment on each
//! choice and each alternative seen, the warnings at the top.

use std::fmt::Write;

use super::catalog::Catalog;
use super::propose::{MessagesCandidate, Proposal};
use super::warning::Warning;
use crate::dialect::Dialect;
use crate::legacy_schema::WATERMARK_TABLE;
use crate::mapping::{EvidenceKind, Shape};

/// A TOML basic string (identifiers and predicates hold no control characters).
fn s(value: &str) -> String {
    format!("\"{}\"", value.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The mapping file for `p`, with `warnings` and comments: the header, then the sections in
/// the book's order (docs/src/mapping.md) (`[messages]`, `[members]`, `[counter]`, `[[evidence]]`, `[watermarks]`).
///
/// With `explain`, the header ends with the full reasoning ([`Proposal::explain`]): every
/// candidate seen and the figures measured.
pub fn render(
    p: &Proposal,
    warnings: &[Warning],
    catalog: &Catalog,
    dialect: Dialect,
    explain: bool,
) -> String {
    let mut out = String::new();
    let w = &mut out;
    header(w, p, warnings, catalog, dialect);
    if explain {
        let _ = writeln!(w, "#\n# How the proposal was reached (--explain):");
        for line in &p.explain {
            let _ = writeln!(w, "#   {}", line.replace(['\n', '\r'], " "));
        }
    }
    messages(w, p);
    members(w, p);
    counter(w, p, catalog);
    evidence(w, p);
    watermarks(w);
    out
}

/// The header: where the proposal comes from, what to do with it, the tables not considered,
/// what is missing and the warnings (with their fixes).
fn header(w: &mut String, p: &Proposal, warnings: &[Warning], catalog: &Catalog, dialect: Dialect) {
    let _ = writeln!(
        w,
        "# Proposed by `tidemark inspect` from the catalog of a {} database ({} tables and views \
         read).",
        dialect.name(),
        catalog.tables.len()
    );
    let _ = writeln!(
        w,
        "# Review each choice (the comments name what else was seen), then `tidemark plan`."
    );
    if !catalog.skipped.is_empty() {
        let _ = writeln!(
            w,
            "# Not considered (tidemark's own, or a name tidemark cannot quote): {}",
            catalog.skipped.join(", ")
        );
    }
    for m in &p.missing {
        let _ = writeln!(w, "# MISSING: {m}");
    }
    for warning in warnings {
        let _ = writeln!(w, "# WARNING: {}", warning.message);
        if let Some(fix) = &warning.fix {
            let _ = writeln!(w, "#   fix: {fix}");
        }
    }
}

/// `[messages]`: the table chosen and the alternatives (a remark when a view and tables
/// compete), its columns, `created_at` and `countable` when seen.
fn messages(w: &mut String, p: &Proposal) {
    let _ = writeln!(w, "\n[messages]");
    match &p.messages {
        Some(m) => {
            let view = |m: &MessagesCandidate| if m.is_view { "view " } else { "" };
            let _ = writeln!(
                w,
                "# chosen: {}{} (conversation {}, sender {}, position {} {})",
                view(m),
                m.table,
                m.conversation,
                m.sender,
                m.position,
                m.position_declared
            );
            for reason in &m.reasons {
                let _ = writeln!(w, "#   {reason}");
            }
            for miss in &m.near_misses {
                let _ = writeln!(w, "# near miss: {miss}");
            }
            for alt in &p.messages_alternatives {
                let _ = writeln!(
                    w,
                    "# alternative: {}{} (conversation {}, sender {}, position {} {})",
                    view(alt),
                    alt.table,
                    alt.conversation,
                    alt.sender,
                    alt.position,
                    alt.position_declared
                );
            }
            if m.is_view && p.messages_alternatives.iter().any(|a| !a.is_view) {
                let _ = writeln!(
                    w,
                    "# a view is chosen by its name over the tables above: keep it when it keeps \
                     only what counts as a message (no state or system events), else map the \
                     table and say what counts in `countable`"
                );
            } else if !m.is_view && p.messages_alternatives.iter().any(|a| a.is_view) {
                let _ = writeln!(
                    w,
                    "# the table is chosen by its name over the views above: if one of them keeps \
                     only what counts as a message, map it instead"
                );
            }
            let _ = writeln!(w, "table = {}", s(&m.table));
            let _ = writeln!(
                w,
                "id = {}{}",
                s(&m.position),
                if m.position_integer {
                    "   # the position: must increase within a conversation in commit order"
                } else {
                    "   # NOT an integer: see the warning above"
                }
            );
            let _ = writeln!(w, "conversation = {}", s(&m.conversation));
            let _ = writeln!(w, "sender = {}", s(&m.sender));
            match &m.created_at {
                Some(c) => {
                    let _ = writeln!(
                        w,
                        "created_at = {}   # needed only by timestamp evidence",
                        s(c)
                    );
                }
                None => {
                    let _ = writeln!(w, "# created_at: no creation time column seen");
                }
            }
            if m.countable.is_empty() {
                let _ = writeln!(
                    w,
                    "# countable: no deleted/system flag seen; every message counts"
                );
            } else {
                let _ = writeln!(
                    w,
                    "countable = {}   # from the flag and kind columns: check what the \
                     application counts",
                    s(&m.countable.join(" AND "))
                );
            }
        }
        None => {
            let _ = writeln!(w, "# no messages table found (see MISSING above)");
        }
    }
}

/// `[members]`: the table chosen, the alternatives and the notes, its keys, `active` and
/// `join_position` when seen; a comment when there is none.
fn members(w: &mut String, p: &Proposal) {
    let _ = writeln!(
        w,
        "\n# [members]: who the counter is owed to (optional for per_member)"
    );
    match &p.members {
        Some(mb) => {
            let _ = writeln!(w, "[members]");
            let _ = writeln!(w, "# chosen: {}", mb.table);
            for alt in &p.members_alternatives {
                let _ = writeln!(w, "# alternative: {alt}");
            }
            for note in &mb.notes {
                let _ = writeln!(w, "# {note}");
            }
            let _ = writeln!(w, "table = {}", s(&mb.table));
            let _ = writeln!(w, "user = {}", s(&mb.user));
            let _ = writeln!(w, "conversation = {}", s(&mb.conversation));
            if let Some(a) = &mb.active {
                let _ = writeln!(w, "active = {}", s(a));
            }
            if let Some(j) = &mb.join_time {
                let _ = writeln!(
                    w,
                    "join_time = {}   # positions created at or before it are not the member's",
                    s(j)
                );
            }
            if let Some(j) = &mb.join_position {
                let _ = writeln!(
                    w,
                    "join_position = {}   # positions at or below it are not the member's",
                    s(j)
                );
            }
        }
        None => {
            let _ = writeln!(
                w,
                "# no membership table seen (named like members/participants)"
            );
        }
    }
}

/// `[counter]`: the column chosen and the other candidates, its shape, and for per_member its
/// table and keys (with a remark when they are not unique).
fn counter(w: &mut String, p: &Proposal, catalog: &Catalog) {
    let _ = writeln!(w);
    match &p.counter {
        Some(c) => {
            let _ = writeln!(w, "[counter]");
            let figure = |c: &super::propose::CounterCandidate| {
                c.figure
                    .as_ref()
                    .map(|f| format!("; {f}"))
                    .unwrap_or_default()
            };
            let _ = writeln!(
                w,
                "# chosen: {}.{} ({}, {}{})",
                c.table,
                c.column,
                c.declared,
                Shape::as_str(c.shape),
                figure(c)
            );
            for alt in &p.counter_alternatives {
                let _ = writeln!(
                    w,
                    "# counter candidate: {}.{} ({}, {}{})",
                    alt.table,
                    alt.column,
                    alt.declared,
                    Shape::as_str(alt.shape),
                    figure(alt)
                );
            }
            let _ = writeln!(w, "shape = {}", s(Shape::as_str(c.shape)));
            if let (Shape::PerMember, Some((user, conv))) = (c.shape, &c.key) {
                let table = catalog.tables.iter().find(|t| t.name == c.table);
                if let Some(t) = table.filter(|t| !t.is_view && !t.unique_on(&[user, conv])) {
                    let keys: Vec<String> = t
                        .indexes
                        .iter()
                        .filter(|i| i.unique)
                        .map(|i| {
                            let cols: Vec<&str> = i
                                .columns
                                .iter()
                                .map(|c| c.as_deref().unwrap_or("(expr)"))
                                .collect();
                            format!("{} ({})", i.name, cols.join(", "))
                        })
                        .collect();
                    let _ = writeln!(
                        w,
                        "# no unique index on ({user}, {conv}) alone (unique: {}): if a member can \
                         have several rows (threads, devices), keep one with [counter] rows = \
                         \"…\" (a predicate over the counter row `this`) or add combine = \"sum\"",
                        if keys.is_empty() { "none".to_string() } else { keys.join("; ") }
                    );
                }
                let _ = writeln!(w, "table = {}", s(&c.table));
                let _ = writeln!(w, "user = {}", s(user));
                let _ = writeln!(w, "conversation = {}", s(conv));
            }
            let _ = writeln!(
                w,
                "column = {}   # the column `contract` drops",
                s(&c.column)
            );
        }
        None => {
            let _ = writeln!(
                w,
                "# [counter]: no counter column found (see MISSING above)"
            );
        }
    }
}

/// The `[[evidence]]` entries, best first, after the receipts tables and the notes on what
/// else was seen; a comment on `own_message` when it is not proposed.
fn evidence(w: &mut String, p: &Proposal) {
    let _ = writeln!(
        w,
        "\n# Evidence, best first: the backfill takes the first that has a value."
    );
    for table in &p.receipts_tables {
        let _ = writeln!(w, "# receipts table seen: {table}");
    }
    for note in &p.evidence_notes {
        let _ = writeln!(w, "# also seen: {note}");
    }
    for e in &p.evidence {
        let _ = writeln!(w, "[[evidence]]   # {}", e.why);
        let _ = writeln!(w, "kind = {}", s(e.kind.as_str()));
        if let Some((table, user, conv, column)) = &e.source {
            let _ = writeln!(w, "table = {}", s(table));
            let _ = writeln!(w, "user = {}", s(user));
            let _ = writeln!(w, "conversation = {}", s(conv));
            let _ = writeln!(w, "column = {}", s(column));
        }
        let _ = writeln!(w);
    }
    if p.evidence
        .iter()
        .all(|e| e.kind != EvidenceKind::OwnMessage)
        && p.messages.is_some()
    {
        let _ = writeln!(
            w,
            "# optional last: [[evidence]] kind = \"own_message\" (a member has read up to their \
             own newest message)\n"
        );
    }
}

/// `[watermarks]`: the table `expand` creates.
fn watermarks(w: &mut String) {
    let _ = writeln!(w, "[watermarks]");
    let _ = writeln!(
        w,
        "table = {}   # created by `tidemark expand`",
        s(WATERMARK_TABLE)
    );
}
