//! Bind numbering for the backfill's statements: the batch's conversation range appears once
//! per derived table (each evidence source, the messages, the members), so a template renders
//! it with markers and [`number`] turns each occurrence, in text order, into the dialect's next
//! placeholder (`$n` on PostgreSQL, `?` elsewhere) and records which bound it takes.

use sqlx::any::AnyArguments;
use sqlx::query::Query;
use sqlx::Any;

use crate::dialect::{Dialect, RangeParams};
use crate::stages::batch::Batch;

/// The marker character around a bound's letter in a rendered template (never in SQL text).
const MARK: char = '\u{1}';

/// Which bound of a batch a placeholder takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Slot {
    /// The exclusive lower bound (`batch.lo`).
    Lo,
    /// The inclusive upper bound (`batch.hi`).
    Hi,
    /// The scope's lowest conversation.
    From,
    /// The scope's highest conversation.
    To,
    /// The batch's `n`-th conversation key (a batch of keys: [`Batch::keys`]).
    Key(usize),
}

/// A rendered statement with numbered placeholders and the bounds they take, in order.
#[derive(Debug, Clone)]
pub(super) struct Numbered {
    /// The SQL text, placeholders numbered from 1.
    pub(super) sql: String,
    /// The bound each placeholder takes, in placeholder order.
    pub(super) slots: Vec<Slot>,
}

/// How many keys the statements of a batch of keys show where no batch is given (`plan`).
const SHOWN_KEYS: usize = 2;

/// The range markers for a batch (`lo` only when the batch has a lower bound), to pass to a
/// template as `range`; [`number`] replaces them after rendering. With `keyed` (the key
/// columns' collations differ, issue 25) a marker per key of the batch instead.
pub(super) fn markers(batch: Option<&Batch>, keyed: bool) -> RangeParams {
    if keyed {
        let n = batch
            .and_then(|b| b.keys.as_ref())
            .map_or(SHOWN_KEYS, Vec::len);
        return RangeParams {
            keys: Some((0..n).map(|i| format!("{MARK}K{i}{MARK}")).collect()),
            ..Default::default()
        };
    }
    let mark = |c: char| Some(format!("{MARK}{c}{MARK}"));
    let scope = batch.map(|b| b.scope.clone()).unwrap_or_default();
    RangeParams {
        lo: match batch {
            Some(b) if b.lo.is_none() => None,
            _ => mark('L'),
        },
        hi: mark('H'),
        from: scope.from.is_some().then(|| mark('F')).flatten(),
        to: scope.to.is_some().then(|| mark('T')).flatten(),
        sample: scope.sample_sql,
        quiet: None,
        keys: None,
    }
}

/// Numbers the markers of `rendered` in text order as `dialect`'s placeholders.
pub(super) fn number(rendered: &str, dialect: Dialect) -> Numbered {
    let mut sql = String::with_capacity(rendered.len());
    let mut slots = Vec::new();
    let mut parts = rendered.split(MARK);
    if let Some(first) = parts.next() {
        sql.push_str(first);
    }
    // After the first part, parts alternate: a bound's letter, then the text after it.
    while let (Some(letter), text) = (parts.next(), parts.next()) {
        let slot = match letter {
            "L" => Slot::Lo,
            "H" => Slot::Hi,
            "F" => Slot::From,
            key if key.starts_with('K') => Slot::Key(key[1..].parse().unwrap_or_default()),
            _ => Slot::To,
        };
        slots.push(slot);
        sql.push_str(&dialect.placeholder(slots.len()));
        sql.push_str(text.unwrap_or_default());
    }
    Numbered { sql, slots }
}

impl Numbered {
    /// Binds the batch's bounds in placeholder order.
    pub(super) fn bind<'q>(
        &self,
        batch: &Batch,
        mut q: Query<'q, Any, AnyArguments<'q>>,
    ) -> Query<'q, Any, AnyArguments<'q>> {
        for slot in &self.slots {
            let key = match slot {
                Slot::Lo => batch.lo.as_ref(),
                Slot::Hi => Some(&batch.hi),
                Slot::From => batch.scope.from.as_ref(),
                Slot::To => batch.scope.to.as_ref(),
                Slot::Key(i) => batch.keys.as_ref().and_then(|k| k.get(*i)),
            };
            if let Some(key) = key {
                q = key.bind(q);
            }
        }
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_become_numbered_placeholders_in_text_order() {
        let text = format!("a > {MARK}L{MARK} AND a <= {MARK}H{MARK} OR b <= {MARK}H{MARK}");
        let n = number(&text, Dialect::Postgres);
        assert_eq!(n.sql, "a > $1 AND a <= $2 OR b <= $3");
        assert_eq!(n.slots, vec![Slot::Lo, Slot::Hi, Slot::Hi]);
        let n = number(&text, Dialect::Mysql);
        assert_eq!(n.sql, "a > ? AND a <= ? OR b <= ?");
        assert_eq!(number("no binds", Dialect::Sqlite).slots, vec![]);
    }

    #[test]
    fn key_markers_take_the_batch_keys_in_order() {
        let keys = markers(None, true).keys.unwrap();
        assert_eq!(keys.len(), SHOWN_KEYS);
        let text = format!("a IN ({}, {}) AND b IN ({})", keys[0], keys[1], keys[0]);
        let n = number(&text, Dialect::Postgres);
        assert_eq!(n.sql, "a IN ($1, $2) AND b IN ($3)");
        assert_eq!(n.slots, vec![Slot::Key(0), Slot::Key(1), Slot::Key(0)]);
    }
}
