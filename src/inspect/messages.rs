//! The messages table chosen by structure and data (issue 24): its conversation key, sender
//! and position (the evidence's fit first, then the structure, then the name), with the
//! figures seen and the positions that lost; its `countable` predicate from flag, time and
//! kind columns. Pure: the measures come in [`Facts`].

use super::catalog::{Catalog, Column, Table, TypeClass};
use super::columns::{col, is_receipts, lower, pick};
use super::names::{CREATED, NOT_COUNTABLE, SENDER, USER};
use super::proposal::{figure, judged, Facts, MessagesCandidate};
use super::structure::{self, conversation_names, pick_named, PositionCandidate};
use crate::dialect::Dialect;

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
/// A predicate that is true for a row to count, from a flag or time column (a `*_at` time of
/// any declared type: SQLite keeps times as TEXT).
fn not_countable_predicate(dialect: Dialect, column: &Column) -> Option<String> {
    let name = col(dialect, &column.name);
    if lower(&column.name).ends_with("_at") {
        return Some(format!("{name} IS NULL"));
    }
    match column.class {
        TypeClass::Boolean => Some(format!("NOT {name}")),
        TypeClass::Integer => Some(format!("{name} = 0")),
        TypeClass::Timestamp => Some(format!("{name} IS NULL")),
        _ => None,
    }
}

/// The best fit of any position evidence measured against `table.position`: (share, what, the
/// measure), when one has enough values to judge.
fn best_fit(facts: &Facts, table: &str, position: &str) -> Option<(f64, String, (u64, u64))> {
    facts
        .fits
        .iter()
        .filter(|((_, _, t, p), _)| t == table && p == position)
        .filter_map(|((et, ec, _, _), m)| judged(*m).map(|s| (s, format!("{et}.{ec}"), *m)))
        .max_by(|a, b| a.0.total_cmp(&b.0))
}

/// Every table that holds messages: a conversation key (by name or by structure), a sender and
/// a position (an integer unique within the conversation, unique alone, or named like one).
/// Among a table's positions, the one its read evidence fits best wins (issue 24: a global id
/// beside a per-conversation number), then one unique per conversation, then the name, then a
/// unique id.
pub(super) fn messages_candidates(
    catalog: &Catalog,
    facts: &Facts,
    dialect: Dialect,
    explain: &mut Vec<String>,
) -> Vec<MessagesCandidate> {
    let convs = conversation_names(catalog);
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
        let Some(conv) = pick_named(t, &convs) else {
            continue;
        };
        let sender = pick(t, SENDER).map(|(_, c)| c).or_else(|| {
            (name_rank < 4)
                .then(|| pick(t, USER).map(|(_, c)| c))
                .flatten()
        });
        let Some(sender) = sender else {
            explain.push(format!(
                "{}: conversation key {} but no sender column (sender_id, author_id…; user_id \
                 on a table named like messages or posts): not a messages table",
                t.name, conv.name
            ));
            continue;
        };
        let mut positions = structure::positions(t, &conv.name, &sender.name);
        if positions.is_empty() {
            explain.push(format!(
                "{}: conversation key {}, sender {}, but no integer unique within {} or alone, \
                 and none named like a position: not a messages table",
                t.name, conv.name, sender.name, conv.name
            ));
            continue;
        }
        let score = |pc: &PositionCandidate| {
            best_fit(facts, &t.name, &pc.column).map_or(-1, |(s, _, _)| (s * 1000.0) as i64)
        };
        // The evidence's fit, then a number unique per conversation, then the name (`seq`
        // over `id`), then a unique id.
        positions.sort_by_key(|pc| {
            (
                !pc.integer,
                std::cmp::Reverse(score(pc)),
                pc.per_conversation.is_none(),
                pc.name_rank.unwrap_or(usize::MAX),
                std::cmp::Reverse(pc.strength()),
            )
        });
        let position = positions.remove(0);
        let mut reasons = vec![format!(
            "position {}: {}",
            position.column,
            position.structure(&conv.name)
        )];
        if let Some((_, what, m)) = best_fit(facts, &t.name, &position.column) {
            reasons.push(format!(
                "{what} holds positions of their {} in {} sampled values",
                conv.name,
                figure(m)
            ));
        }
        if let Some(m) = facts.order.get(&(t.name.clone(), position.column.clone())) {
            reasons.push(format!(
                "{} increases with the creation time in {} rows",
                position.column,
                figure(*m)
            ));
        }
        let near_misses = positions
            .iter()
            .map(|pc| {
                let why = match best_fit(facts, &t.name, &pc.column) {
                    Some((_, what, m)) => {
                        format!("{what} fits it in only {} sampled values", figure(m))
                    }
                    None => "the structure and the name rank it lower".to_string(),
                };
                format!(
                    "{}.{} as the position ({}): {why}",
                    t.name,
                    pc.column,
                    pc.structure(&conv.name)
                )
            })
            .collect();
        let countable = countable(t, facts, dialect, &mut reasons, explain);
        out.push(MessagesCandidate {
            table: t.name.clone(),
            conversation: conv.name.clone(),
            sender: sender.name.clone(),
            position: position.column.clone(),
            position_declared: position.declared.clone(),
            position_integer: position.integer,
            created_at: pick(t, CREATED).map(|(_, c)| c.name.clone()),
            countable,
            is_view: t.is_view,
            reasons,
            near_misses,
            rank: (!position.integer, 2 - position.strength(), name_rank),
        });
    }
    out.sort_by_key(|m| m.rank);
    out
}

/// The `countable` parts of a messages table: its flag and time columns (`deleted_at IS NULL`),
/// and its kind columns' most frequent value (`post_type = 1`, the reason into `reasons`).
fn countable(
    t: &Table,
    facts: &Facts,
    dialect: Dialect,
    reasons: &mut Vec<String>,
    explain: &mut Vec<String>,
) -> Vec<String> {
    let mut countable: Vec<String> = NOT_COUNTABLE
        .iter()
        .filter_map(|n| t.column(n))
        .filter_map(|c| not_countable_predicate(dialect, c))
        .collect();
    for k in structure::kind_columns(t) {
        let values = facts
            .kinds
            .get(&(t.name.clone(), k.name.clone()))
            .cloned()
            .unwrap_or_default();
        match structure::kind_predicate(k, &col(dialect, &k.name), &values) {
            Some((predicate, why)) => {
                countable.push(predicate);
                reasons.push(why);
            }
            None if !values.is_empty() => explain.push(format!(
                "{}.{} takes {} values: no most frequent value to take as the regular \
                 messages",
                t.name,
                k.name,
                values.len()
            )),
            None => {}
        }
    }
    countable
}
