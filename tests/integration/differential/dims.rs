//! Which of issue 29's dimensions the differential test varies: `TIDEMARK_DIFF_DIMENSIONS` =
//! `all` (the default) | `none` | a comma list of [`NAMES`]. With `none` the generator draws
//! the worlds of issue 25 and issue 22 only (text keys in odd collations, receipts, counters,
//! readers), so that what a new dimension finds can be told apart from what the old ones do.
//!
//! An unknown name panics (a mistyped name must not quietly test less). This file also applies
//! the draws of the dimensions that need no file of their own (`positions`, `forms`,
//! `duplicates`, `restricted_counted`) and writes the mapping of a world.

use proptest::prelude::*;

use super::keys::{self, KeyKind};
use super::{time, World, CONVS, USERS};
use crate::common::model::{Hidden, Key, Legacy};
use crate::common::Backend;
use crate::scenario;

/// Every dimension, as spelled in `TIDEMARK_DIFF_DIMENSIONS`.
pub const NAMES: [&str; 8] = [
    "time",
    "zero_dates",
    "positions",
    "flags",
    "forms",
    "duplicates",
    "keys",
    "restricted_counted",
];

/// The dimensions a run varies (each `true`: drawn; `false`: the issue 25 generator's fixed
/// choice).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dims {
    /// `time`: `created_at` and a `last_read_at` timestamp evidence, each column with or
    /// without a time zone, in a database whose time zone is not UTC (PostgreSQL: `ALTER
    /// DATABASE … SET timezone`; MariaDB: `--time-zone`); SQLite: text times in mixed ISO
    /// 8601 forms and integers (Unix seconds).
    pub time: bool,
    /// `zero_dates`: visit times that are no time (MariaDB `0000-00-00` and `2024-06-00`;
    /// SQLite text that does not parse): no evidence, the next source applies. Needs `time`.
    pub zero_dates: bool,
    /// `positions`: message positions shifted near and below zero (a position <= 0 is refused
    /// with exit 2 before anything is written) and receipts of 0, -1, -2 (no position).
    pub positions: bool,
    /// `flags`: read flags (shape C) over positions unique only per conversation, the flags
    /// table naming the conversation (`conversation = "conv_id"`).
    pub flags: bool,
    /// `forms`: the counter read through `[counter] column`, `value`, `rows` or
    /// `combine = "single"`.
    pub forms: bool,
    /// `duplicates`: a member with two counter rows, in whichever form: refused (exit 2).
    pub duplicates: bool,
    /// `keys`: integer keys of mixed widths and signedness per table, or uuid keys.
    pub keys: bool,
    /// `restricted_counted`: the legacy counter counted the messages a reader may not see
    /// (no `legacy_countable`): they are that reader's excluded messages (`excluded_counted`).
    /// Off: the mapping says the legacy counter never counted restricted or addressed messages.
    pub restricted_counted: bool,
}

impl Dims {
    /// Every dimension on.
    pub const ALL: Dims = Dims {
        time: true,
        zero_dates: true,
        positions: true,
        flags: true,
        forms: true,
        duplicates: true,
        keys: true,
        restricted_counted: true,
    };

    /// Parses the variable's value (`all`, `none`, or a comma list of [`NAMES`]).
    pub fn parse(text: &str) -> Result<Dims, String> {
        let text = text.trim();
        if text.is_empty() || text.eq_ignore_ascii_case("all") {
            return Ok(Dims::ALL);
        }
        let mut d = Dims::default();
        if text.eq_ignore_ascii_case("none") {
            return Ok(d);
        }
        for name in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let slot = match name {
                "time" => &mut d.time,
                "zero_dates" => &mut d.zero_dates,
                "positions" => &mut d.positions,
                "flags" => &mut d.flags,
                "forms" => &mut d.forms,
                "duplicates" => &mut d.duplicates,
                "keys" => &mut d.keys,
                "restricted_counted" => &mut d.restricted_counted,
                other => {
                    return Err(format!(
                    "TIDEMARK_DIFF_DIMENSIONS: unknown dimension {other:?} (known: all, none, {})",
                    NAMES.join(", ")
                ))
                }
            };
            *slot = true;
        }
        Ok(d)
    }

    /// The dimensions of this run: `TIDEMARK_DIFF_DIMENSIONS`, default `all`. Panics on a
    /// name it does not know.
    pub fn from_env() -> Dims {
        let text = std::env::var("TIDEMARK_DIFF_DIMENSIONS").unwrap_or_default();
        Dims::parse(&text).unwrap_or_else(|e| panic!("{e}"))
    }
}

/// How the mapping reads the per-member counter (issue 12's forms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Form {
    /// `column = "unread_count"`.
    Column,
    /// `value = "this.unread_count"` (and `[contract] drop = "nothing"`).
    Value,
    /// `rows = "this.kind = 0"`: each counter has a second row of kind 1, left out.
    Rows,
    /// `combine = "single"`, said out loud.
    Single,
}

/// What issue 29's dimensions draw besides the old world: times, key kind and integer types,
/// counter form, a duplicated counter row, a shift of every position, receipts <= 0, and
/// whether the legacy counter counted restricted messages.
pub(super) type Issue29Draw = (
    time::Times,
    (usize, [usize; 4]),
    usize,
    bool,
    i64,
    Vec<Option<i64>>,
    (bool, bool),
);

pub(super) fn issue29_draw(dims: Dims) -> impl Strategy<Value = Issue29Draw> {
    (
        time::times(dims.zero_dates),
        (0usize..3, any::<[usize; 4]>()),
        0usize..4,
        prop::bool::weighted(0.15),
        prop_oneof![3 => Just(0i64), 1 => 1i64..4],
        prop::collection::vec(prop::option::weighted(0.15, -2i64..=0), 64),
        (prop::bool::weighted(0.75), prop::bool::weighted(0.75)),
    )
}

/// Applies issue 29's draw to `w`, dimension by dimension (a dimension that is off keeps the
/// old world's choice).
pub(super) fn with_issue29(mut w: World, backend: Backend, dims: Dims, d: Issue29Draw) -> World {
    let (mut times, (kind, int_types), form, dup_counter, shift, low, (counted, legacy)) = d;
    if w.readers {
        w.legacy.hidden = if dims.restricted_counted && counted {
            Hidden::Counted
        } else {
            Hidden::NotCounted
        };
        if w.legacy.hidden == Hidden::Counted && legacy {
            legacy_counts(&mut w.legacy);
        }
    }
    if dims.positions {
        shift_positions(&mut w.legacy, shift);
        let keys: Vec<Key> = w.legacy.members.keys().cloned().collect();
        for (key, v) in keys.into_iter().zip(low) {
            if let Some(v) = v {
                w.legacy.receipts.push((key, v));
            }
        }
    }
    if !w.legacy.per_message {
        if dims.forms {
            w.form = [Form::Column, Form::Value, Form::Rows, Form::Single][form];
        }
        if dims.duplicates && dup_counter {
            w.duplicate_counter = w.legacy.counters.keys().next().cloned();
        }
    }
    if dims.keys {
        w.keys = match kind {
            0 => KeyKind::Text,
            1 => KeyKind::Ints(int_types),
            _ => KeyKind::Uuid,
        };
        keys::rekey(
            w.keys,
            CONVS,
            USERS,
            &mut w.legacy,
            &mut w.existing,
            &mut [&mut w.duplicate_member, &mut w.duplicate_counter],
        );
    }
    if dims.time {
        time::apply(backend, &mut w.legacy, &mut times);
        w.times = Some(times);
    }
    w
}

/// Gives each member with a receipt the counter the legacy code kept if it counted every
/// message of others after the member's receipt and join position (restricted, addressed,
/// deleted and system ones included): the counter of issue 29 row 15, which the audit must
/// class `excluded_counted` where hidden messages are all that it counted too many.
fn legacy_counts(l: &mut Legacy) {
    for (key, stored) in l.counters.iter_mut() {
        let Some(read) = l
            .receipts
            .iter()
            .filter(|(k, p)| k == key && *p > 0)
            .map(|(_, p)| *p)
            .max()
        else {
            continue;
        };
        let from = l
            .members
            .get(key)
            .and_then(|m| m.join)
            .map_or(read, |j| read.max(j));
        let n = l
            .msgs
            .iter()
            .filter(|m| m.conv == key.0 && m.id > from && m.sender.as_deref() != Some(&key.1))
            .count();
        *stored = Some(n as i64);
    }
}

/// Moves every message position down by `by` (the reader rules follow their messages): with
/// `by` at least the smallest position, some position is <= 0.
fn shift_positions(l: &mut Legacy, by: i64) {
    for m in &mut l.msgs {
        m.id -= by;
    }
    let r = &mut l.readers;
    r.restricted = r.restricted.iter().map(|id| id - by).collect();
    r.recipient = r
        .recipient
        .iter()
        .map(|(id, u)| (id - by, u.clone()))
        .collect();
}

/// The smallest message position, when it is <= 0 (semantics.md: refused with exit 2).
fn bad_position(l: &Legacy) -> Option<i64> {
    l.msgs.iter().map(|m| m.id).min().filter(|&p| p <= 0)
}

/// The mapping of `w`: the scenarios' (`legacy_schema::mapping_toml`), with the reader rules
/// (and, unless the legacy counter counted what they hide, a `legacy_countable` that says it
/// did not), the counter's form, and the time columns.
pub(super) fn mapping(w: &World) -> String {
    let shape = if w.legacy.per_message {
        scenario::SHAPE_PER_MESSAGE
    } else {
        scenario::SHAPE_PER_MEMBER
    };
    let mut toml = scenario::mapping_toml(shape, false);
    if w.readers {
        let legacy = if w.legacy.hidden == Hidden::NotCounted {
            "legacy_countable = \"restricted = 0 AND recipient_id IS NULL\"\n"
        } else {
            ""
        };
        toml = toml.replacen(
            "[messages]\n",
            &format!("[messages]\nrestricted = \"this.restricted = 1\"\nrestricted_readers = \"this.staff = 1\"\nrecipient = \"this.recipient_id\"\n{legacy}"),
            1,
        );
    }
    let column = "column = \"unread_count\"";
    match w.form {
        Form::Column => {}
        Form::Value => {
            toml = toml.replacen(column, "value = \"this.unread_count\"", 1)
                + "\n[contract]\ndrop = \"nothing\"\n"
        }
        Form::Rows => {
            toml = toml.replacen(column, &format!("{column}\nrows = \"this.kind = 0\""), 1)
        }
        Form::Single => toml = toml.replacen(column, &format!("{column}\ncombine = \"single\""), 1),
    }
    if w.times.is_some() {
        toml = time::mapping(&toml);
    }
    toml
}

/// What `w` holds that every stage must refuse (exit 2, nothing written): (what, a text the
/// message must contain).
pub(super) fn refusals(w: &World) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(p) = bad_position(&w.legacy) {
        out.push((format!("message position {p} <= 0"), p.to_string()));
    }
    if let Some((c, u)) = &w.duplicate_counter {
        out.push((
            format!("two counter rows of ({c}, {u}) ({:?})", w.form),
            "counter".into(),
        ));
    }
    out
}

#[test]
fn dimensions_parse() {
    assert_eq!(Dims::parse("").unwrap(), Dims::ALL);
    assert_eq!(Dims::parse("all").unwrap(), Dims::ALL);
    assert_eq!(Dims::parse("none").unwrap(), Dims::default());
    let d = Dims::parse("time, keys").unwrap();
    assert!(d.time && d.keys && !d.flags && !d.zero_dates);
    assert!(Dims::parse("tiem")
        .unwrap_err()
        .contains("unknown dimension \"tiem\""));
}
