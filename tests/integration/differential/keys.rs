//! The `keys` dimension (issue 29 rows 13, 14, 21; interface.md "Keys … may be integers of any
//! width and signedness, text, or UUIDs … tidemark compares them as the key's values"): the
//! world's text keys are renamed to integers, each table's key columns of their own integer
//! type (widths and signedness mixed, MariaDB `INT UNSIGNED` beside `INT`), or to uuids
//! (PostgreSQL `uuid`, MariaDB `UUID`; SQLite has no such type: text).
//!
//! The model keeps keys as the text each database prints for them (integers in decimal,
//! uuids in lower case with hyphens), so the report's cells compare as they are.

use std::collections::BTreeMap;

use crate::common::model::{Key, Legacy, Watermark};
use crate::common::Backend;

/// How the world's keys are typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// Text keys in the collation each table draws (issue 25).
    Text,
    /// Integer keys; per table (messages, members, counters, receipts) an index into the
    /// backend's [`int_types`].
    Ints([usize; 4]),
    /// Uuid keys.
    Uuid,
}

/// The integer types tried per backend (a key value fits each: at most 32,767).
fn int_types(backend: Backend) -> &'static [&'static str] {
    match backend {
        Backend::Postgres => &["SMALLINT", "INTEGER", "BIGINT"],
        Backend::Mysql => &[
            "INT",
            "INT UNSIGNED",
            "BIGINT",
            "BIGINT UNSIGNED",
            "SMALLINT UNSIGNED",
            // MEDIUMINT keys are refused (exit 2: the driver cannot read them back), which
            // `key_types::integer_keys_of_every_width_are_read_or_refused` proves.
        ],
        Backend::Sqlite => &["INTEGER", "BIGINT", "INT UNSIGNED"],
    }
}

/// The key column type of `table` (0 messages, 1 members, 2 counters, 3 receipts), or None
/// for text keys (the caller's collations apply).
pub fn column_type(backend: Backend, kind: KeyKind, table: usize) -> Option<String> {
    match kind {
        KeyKind::Text => None,
        KeyKind::Ints(t) => {
            let types = int_types(backend);
            Some(types[t[table] % types.len()].to_string())
        }
        KeyKind::Uuid => Some(
            match backend {
                Backend::Postgres => "UUID",
                Backend::Mysql => "UUID",
                Backend::Sqlite => "TEXT",
            }
            .to_string(),
        ),
    }
}

/// The text of the `i`-th conversation (`conv`) or user key of this kind.
fn rename(kind: KeyKind, conv: bool, i: usize) -> String {
    match kind {
        KeyKind::Text => unreachable!("text keys keep their names"),
        // Conversations 7, 14, …; users 300, 301, …: never equal, differently ordered as
        // text and as numbers (7 < 14, "14" < "7").
        KeyKind::Ints(_) if conv => ((i + 1) * 7).to_string(),
        KeyKind::Ints(_) => (300 + i * 997 % 1000).to_string(),
        KeyKind::Uuid => format!(
            "{:08x}-0000-4000-8000-{:012x}",
            if conv { 0xc0 } else { 0x0a },
            (i * 0x9e37_79b9) % 0xffff_ffff
        ),
    }
}

/// Renames the keys of `l` and of the application's watermarks (`existing`) and of a
/// duplicated member, `convs` and `users` being the world's text keys in index order.
pub fn rekey(
    kind: KeyKind,
    convs: &[&str],
    users: &[&str],
    l: &mut Legacy,
    existing: &mut BTreeMap<Key, Watermark>,
    keys: &mut [&mut Option<Key>],
) {
    if kind == KeyKind::Text {
        return;
    }
    let c: BTreeMap<&str, String> = convs
        .iter()
        .enumerate()
        .map(|(i, k)| (*k, rename(kind, true, i)))
        .collect();
    let u: BTreeMap<&str, String> = users
        .iter()
        .enumerate()
        .map(|(i, k)| (*k, rename(kind, false, i)))
        .collect();
    let key = |(conv, user): &Key| (c[conv.as_str()].clone(), u[user.as_str()].clone());
    for m in &mut l.msgs {
        m.conv = c[m.conv.as_str()].clone();
        m.sender = m.sender.as_deref().map(|s| u[s].clone());
    }
    l.members = l.members.iter().map(|(k, v)| (key(k), *v)).collect();
    l.counters = l.counters.iter().map(|(k, v)| (key(k), *v)).collect();
    for (k, _) in &mut l.receipts {
        *k = key(k);
    }
    let r = &mut l.readers;
    r.admitted = r.admitted.iter().map(key).collect();
    for v in r.recipient.values_mut() {
        *v = u[v.as_str()].clone();
    }
    l.visits = l.visits.iter().map(|(k, v)| (key(k), *v)).collect();
    l.created = l
        .created
        .iter()
        .map(|((conv, id), v)| ((c[conv.as_str()].clone(), *id), *v))
        .collect();
    *existing = existing.iter().map(|(k, v)| (key(k), v.clone())).collect();
    for k in keys.iter_mut() {
        if let Some(k) = k.as_mut() {
            *k = key(k);
        }
    }
}

/// The key columns as text in a SELECT on `backend`, whatever their type.
pub fn as_text(backend: Backend, column: &str) -> String {
    match backend {
        Backend::Postgres => format!("{column}::text"),
        Backend::Mysql => format!("CAST({column} AS CHAR)"),
        Backend::Sqlite => format!("CAST({column} AS TEXT)"),
    }
}
