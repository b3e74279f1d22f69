//! Messages named by a key other than their position (a text `event_id`…): the view that looks
//! the position up, proposed in a note beside the evidence.

use super::catalog::{Catalog, Column, Table};
use super::columns::{col, lower, table_ref};
use super::proposal::MessagesCandidate;
use crate::dialect::Dialect;

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
pub(super) fn lookup_note(
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
