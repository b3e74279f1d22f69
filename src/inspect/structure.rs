//! What a schema says by its structure (issue 24, "inspect by structure and data"; names only
//! break ties): the conversation keys (the first column of a unique index on (conversation,
//! integer), or a `<x>_id` column naming a table `<x>s`), the integer columns that can be a
//! messages table's position (unique with the conversation: a per-conversation number; unique
//! alone: a global id), and the kind columns whose values say which messages are system
//! notices (`post_type`, `kind`).

use super::catalog::{Catalog, Column, Table, TypeClass};
use super::columns::lower;
use super::names::{CONVERSATION, POSITION, USER};

/// Nouns whose `<x>_id` names a user or a message, never a conversation.
const NOT_CONVERSATION: &[&str] = &[
    "user", "member", "account", "profile", "author", "sender", "event", "message", "msg", "post",
    "parent", "reply",
];

/// The conversation key names of `catalog`, best first: the known names
/// ([`CONVERSATION`]), then the first column of a two-column unique index whose second column
/// is an integer (a number unique within the conversation), then a column declared as a
/// foreign key (read from the catalogs, issue 32), then a `<x>_id` column where a table named
/// for `<x>`, singular or plural, exists ([`plurals`]: `topic_id` of `topics`, `category_id`
/// of `categories`).
pub fn conversation_names(catalog: &Catalog) -> Vec<String> {
    let mut out: Vec<String> = CONVERSATION.iter().map(|s| s.to_string()).collect();
    let mut add = |name: &str| {
        let n = lower(name);
        let noun = n.strip_suffix("_id").unwrap_or(&n).to_string();
        if !out.contains(&n)
            && !USER.contains(&n.as_str())
            && n != "id"
            && !NOT_CONVERSATION.contains(&noun.as_str())
        {
            out.push(n);
        }
    };
    for t in &catalog.tables {
        for i in t.indexes.iter().filter(|i| i.unique && !i.partial) {
            if let [Some(a), Some(b)] = i.columns.as_slice() {
                if t.column(b).is_some_and(|c| c.class == TypeClass::Integer) {
                    add(a);
                }
            }
        }
    }
    for (_, column, _) in &catalog.foreign_keys {
        add(column);
    }
    for t in &catalog.tables {
        for c in &t.columns {
            let n = lower(&c.name);
            let Some(noun) = n.strip_suffix("_id") else {
                continue;
            };
            let names = plurals(noun);
            let refers = catalog
                .tables
                .iter()
                .any(|x| names.contains(&lower(&x.bare)));
            if refers {
                add(&c.name);
            }
        }
    }
    out
}

/// The first column of `table` named in `names` (compared without case).
pub fn pick_named<'a>(table: &'a Table, names: &[String]) -> Option<&'a Column> {
    names.iter().find_map(|n| table.column(n))
}

/// One column that could be a messages table's position.
#[derive(Debug, Clone)]
pub struct PositionCandidate {
    /// The column.
    pub column: String,
    /// Its declared type.
    pub declared: String,
    /// Whether it is an integer.
    pub integer: bool,
    /// The unique index on (conversation, column), if any: a number unique per conversation.
    pub per_conversation: Option<String>,
    /// The unique index on the column alone, if any: an id unique in the table.
    pub global: Option<String>,
    /// Rank of its name in [`POSITION`] (None: not a known name).
    pub name_rank: Option<usize>,
}

impl PositionCandidate {
    /// Structure's weight: 2 per conversation, 1 unique alone, 0 by name only.
    pub fn strength(&self) -> u8 {
        if self.per_conversation.is_some() {
            2
        } else if self.global.is_some() {
            1
        } else {
            0
        }
    }

    /// The structure in words.
    pub fn structure(&self, conv: &str) -> String {
        match (&self.per_conversation, &self.global) {
            (Some(i), _) => format!("unique within {conv} ({i})"),
            (None, Some(i)) => format!("unique in the whole table ({i}): a global id"),
            (None, None) => "named like a position, no unique index".to_string(),
        }
    }
}

/// The position candidates of `t` for the conversation `conv`, the sender excluded: integer
/// columns unique with the conversation or alone, and columns named like a position.
pub fn positions(t: &Table, conv: &str, sender: &str) -> Vec<PositionCandidate> {
    let unique = |cols: &[&str]| {
        t.indexes
            .iter()
            .find(|i| {
                i.unique
                    && !i.partial
                    && i.columns.len() == cols.len()
                    && i.columns.iter().all(|c| {
                        c.as_deref()
                            .is_some_and(|c| cols.iter().any(|w| w.eq_ignore_ascii_case(c)))
                    })
            })
            .map(|i| i.name.clone())
    };
    t.columns
        .iter()
        .filter(|c| !c.name.eq_ignore_ascii_case(conv) && !c.name.eq_ignore_ascii_case(sender))
        .filter_map(|c| {
            let integer = c.class == TypeClass::Integer;
            let name_rank = POSITION.iter().position(|p| c.name.eq_ignore_ascii_case(p));
            let per_conversation = integer.then(|| unique(&[conv, &c.name])).flatten();
            let global = integer.then(|| unique(&[&c.name])).flatten();
            (per_conversation.is_some() || global.is_some() || name_rank.is_some()).then(|| {
                PositionCandidate {
                    column: c.name.clone(),
                    declared: c.declared.clone(),
                    integer,
                    per_conversation,
                    global,
                    name_rank,
                }
            })
        })
        .collect()
}

/// Whether a column is named like a message's kind (`type`, `post_type`, `kind`, `msgtype`).
pub fn is_kind_column(c: &Column) -> bool {
    let n = lower(&c.name);
    matches!(c.class, TypeClass::Integer | TypeClass::Text)
        && (n == "type"
            || n == "kind"
            || n == "msgtype"
            || n == "subtype"
            || n.ends_with("_type")
            || n.ends_with("_kind"))
}

/// The kind columns of `t`.
pub fn kind_columns(t: &Table) -> Vec<&Column> {
    t.columns.iter().filter(|c| is_kind_column(c)).collect()
}

/// From a kind column's values with their row counts (most frequent first): the predicate that
/// keeps the most frequent value (taken as the regular messages, the others as notices), when
/// there are at least two values and it holds at least half of the rows; with the words that
/// say so.
pub fn kind_predicate(
    column: &Column,
    quoted: &str,
    values: &[(String, u64)],
) -> Option<(String, String)> {
    let total: u64 = values.iter().map(|(_, n)| n).sum();
    let (top, n) = values.first()?;
    if values.len() < 2 || n * 2 < total {
        return None;
    }
    let literal = if column.class == TypeClass::Integer && top.parse::<i64>().is_ok() {
        top.clone()
    } else {
        format!("'{}'", top.replace('\'', "''"))
    };
    let seen: Vec<String> = values
        .iter()
        .map(|(v, n)| format!("{v} ({n} rows)"))
        .collect();
    Some((
        format!("{quoted} = {literal}"),
        format!(
            "{} takes {}: the most frequent, {top}, taken as the regular messages and the others \
             as notices that no counter counts",
            column.name,
            seen.join(", ")
        ),
    ))
}

/// The table names a `<noun>_id` column may refer to: the noun itself and its English plurals
/// (`post` → `posts`; `category` → `categories`; `box` → `boxes`).
pub fn plurals(noun: &str) -> Vec<String> {
    let mut out = vec![noun.to_string(), format!("{noun}s")];
    if let Some(stem) = noun.strip_suffix('y') {
        if !stem.ends_with(['a', 'e', 'i', 'o', 'u']) {
            out.push(format!("{stem}ies"));
        }
    }
    if noun.ends_with(['s', 'x', 'z']) || noun.ends_with("ch") || noun.ends_with("sh") {
        out.push(format!("{noun}es"));
    }
    out
}
