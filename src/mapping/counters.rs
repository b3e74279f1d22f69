//! Several counters per member (issue 22, semantics.md "Several counters per member"):
//! `[[counter]]` may appear several times, each with a `name`, its own `countable` predicate
//! (what it counts besides `messages.countable`: root posts only, say) and, for a mention
//! counter, a `mentions` table. This file reads and checks the entries after the first (which
//! [`super::validate`] and [`super::rows`] check as the one `[counter]`), the keys every
//! counter may carry, and gives each counter its own view of the mapping
//! ([`Mapping::per_counter`]): the mapping whose `counter` is that one, the stages' unit.
//!
//! Rules (exit 2, at the key): with several counters each has a unique `name` (an
//! identifier), all are `per_member` on the first counter's table and key columns (one
//! counter table: the audit's batches and the contract's archive are that table's); a
//! `countable` is one SQL expression over the messages row (`this`, `conv`); a mention counter
//! is `per_member` and is no backfill evidence (the first counter is the evidence of
//! `[[evidence]] kind = "counter"`, so it may not be a mention counter then). Beside
//! `[messages] restricted` or `recipient` a mention counts for a reader only where the message
//! counts for that reader (issue 29 row 16, semantics.md "Several counters per member").

use toml::Spanned;

use super::locator::{line_col, section, Locator};
use super::raw::{RawEvidence, RawMapping};
use super::rows::{RowChecks, RowRefs};
use super::types::{Counter, EvidenceKind, Mapping, Members, Messages, PredicateSite, Shape};
use super::validate::{check_identifier, check_predicate};

/// Every counter of the file, the first (`first`, already read and checked) included, with
/// the checks of the keys of issue 22.
///
/// Errors (exit 2, `file:line:col:` at the key at fault): as the module says.
#[allow(clippy::too_many_arguments)] // the sections a counter is checked against
pub(super) fn parse(
    loc: &Locator<'_>,
    raw: &RawMapping,
    first: &Counter,
    messages: &Messages,
    members: Option<&Members>,
    evidence: &[RawEvidence],
    has_contract: bool,
    has: RowRefs,
) -> anyhow::Result<Vec<Counter>> {
    let ck = RowChecks { loc };
    let mut counters = vec![first.clone()];
    for t in raw.counters.iter().skip(1) {
        let c: Counter = section(loc, t, "[counter]")?;
        super::validate::counter(loc, t, &c, messages, members.is_some())?;
        ck.counter(t, &c, has_contract)?;
        let per_member = c.shape == Shape::PerMember;
        ck.row_names(t, "counter.value", c.value.as_deref(), has, per_member)?;
        ck.row_names(t, "counter.rows", c.rows.as_deref(), has, per_member)?;
        counters.push(c);
    }
    let at = |t: &Spanned<toml::Table>, key: &str, msg: String| {
        loc.at(loc.value_span(t, key).or(Some(t.span())), &msg)
    };
    let several = counters.len() > 1;
    for (i, (c, t)) in counters.iter().zip(&raw.counters).enumerate() {
        match &c.name {
            None if several => {
                return Err(loc.at(
                    Some(t.span()),
                    "[[counter]]: missing field `name`: with several counters each is named (the report's `counter` column)",
                ))
            }
            Some(name) => {
                check_identifier(name, false)
                    .map_err(|why| at(t, "name", format!("counter.name = {name:?}: {why}")))?;
                if counters[..i].iter().any(|o| o.name.as_ref() == Some(name)) {
                    return Err(at(
                        t,
                        "name",
                        format!("counter.name = {name:?} is given to two counters"),
                    ));
                }
            }
            None => {}
        }
        if several && i > 0 {
            if c.shape != Shape::PerMember || first.shape != Shape::PerMember {
                return Err(at(t, "shape", "[[counter]]: several counters are each shape \"per_member\" (a per-message counter stands alone)".into()));
            }
            for (key, a, b) in [
                ("table", &c.table, &first.table),
                ("user", &c.user, &first.user),
                ("conversation", &c.conversation, &first.conversation),
            ] {
                if a != b {
                    return Err(at(t, key, format!("counter.{key} = {:?}: every counter lives on the first counter's table and key columns ({:?}): the audit's batches and the contract's archive read that table", a.as_deref().unwrap_or_default(), b.as_deref().unwrap_or_default())));
                }
            }
        }
        if let Some(p) = &c.countable {
            check_predicate(p)
                .map_err(|why| at(t, "countable", format!("counter.countable: {why}")))?;
            ck.row_names(t, "counter.countable", Some(p), has, false)?;
        }
        if let Some(p) = &c.mentioned {
            if c.mentions.is_some() {
                return Err(at(t, "mentioned", "counter.mentioned: a mention counter reads a mentions table (mentions) or a predicate (mentioned), not both".into()));
            }
            if c.shape != Shape::PerMember {
                return Err(at(
                    t,
                    "mentioned",
                    "counter.mentioned: a mention counter is shape \"per_member\"".into(),
                ));
            }
            check_predicate(p)
                .map_err(|why| at(t, "mentioned", format!("counter.mentioned: {why}")))?;
            ck.row_names(t, "counter.mentioned", Some(p), has, true)?;
        }
        if let Some(m) = &c.mentions {
            if c.shape != Shape::PerMember {
                return Err(at(
                    t,
                    "mentions",
                    "counter.mentions: a mention counter is shape \"per_member\"".into(),
                ));
            }
            for (key, value, qualified) in [
                ("table", Some(&m.table), true),
                ("message", Some(&m.message), false),
                ("user", Some(&m.user), false),
                ("key", m.key.as_ref(), false),
            ] {
                if let Some(v) = value {
                    check_identifier(v, qualified).map_err(|why| {
                        at(
                            t,
                            "mentions",
                            format!("counter.mentions.{key} = {v:?}: {why}"),
                        )
                    })?;
                }
            }
        }
    }
    if first.mentions.is_some() || first.mentioned.is_some() {
        if let Some((_, span)) = evidence
            .iter()
            .zip(&raw.evidence)
            .find(|(e, _)| e.kind == EvidenceKind::Counter)
        {
            return Err(loc.at(Some(span.span()), "evidence kind \"counter\" reads the first counter, a mention counter here: a mention count says nothing of the read position; list the unread counter first"));
        }
    }
    Ok(counters)
}

/// The predicates of the counters after the first (`counter[2].countable`, …) with where each
/// is written, for [`Mapping::check_predicates`].
pub(super) fn predicate_sites(
    loc: &Locator<'_>,
    raw: &RawMapping,
    counters: &[Counter],
) -> Vec<PredicateSite> {
    let mut out = Vec::new();
    for (i, (c, table)) in counters.iter().zip(&raw.counters).enumerate().skip(1) {
        for (key, value) in [
            ("value", &c.value),
            ("rows", &c.rows),
            ("countable", &c.countable),
        ] {
            if let Some(pred) = value {
                let span = loc.value_span(table, key);
                let (line, col) = line_col(loc.text, span.unwrap_or(table.span()).start);
                out.push(PredicateSite {
                    key: format!("counter[{}].{key}", i + 1),
                    text: pred.clone(),
                    at: format!("{}:{line}:{col}", loc.origin),
                });
            }
        }
    }
    // Issue 29 row 16: each counter's mention predicate, the first's included.
    for (i, (c, table)) in counters.iter().zip(&raw.counters).enumerate() {
        if let Some(pred) = &c.mentioned {
            let span = loc.value_span(table, "mentioned");
            let (line, col) = line_col(loc.text, span.unwrap_or(table.span()).start);
            out.push(PredicateSite {
                key: if i == 0 {
                    "counter.mentioned".to_string()
                } else {
                    format!("counter[{}].mentioned", i + 1)
                },
                text: pred.clone(),
                at: format!("{}:{line}:{col}", loc.origin),
            });
        }
    }
    out
}

/// `a AND b` of two optional predicates, each parenthesised.
fn both(a: Option<&String>, b: Option<&String>) -> Option<String> {
    match (a, b) {
        (Some(a), Some(b)) => Some(format!("({a}) AND ({b})")),
        (a, b) => a.or(b).cloned(),
    }
}

impl Mapping {
    /// Whether the file maps several counters (then the report has a `counter` column and
    /// the summary, the JSON and the metrics give each counter its own numbers).
    pub fn several_counters(&self) -> bool {
        self.counters.len() > 1
    }

    /// The name of the mapping's counter (`[counter] name`), empty when it has none.
    pub fn counter_name(&self) -> &str {
        self.counter.name.as_deref().unwrap_or_default()
    }

    /// One mapping per counter, in the file's order: the same mapping (fingerprint,
    /// sections) whose `counter` (and sole `counters` entry) is that counter, with its
    /// `countable` ANDed into `messages.countable` and `messages.legacy_countable` (what the
    /// counter counts now and counted then: a root-only counter never counted replies, so a
    /// reply is no `excluded_counted`), and the locations of its keys under `counter.`. Every
    /// stage that reads one counter (preflight, audit, the backfill's counter evidence)
    /// reads it through its view; a mapping of one counter without `countable` is its own view.
    pub fn per_counter(&self) -> Vec<Mapping> {
        self.counters
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut view = self.clone();
                view.messages.countable =
                    both(self.messages.countable.as_ref(), c.countable.as_ref());
                view.messages.legacy_countable = both(
                    self.messages.legacy_countable.as_ref(),
                    c.countable.as_ref(),
                );
                view.counter = Counter {
                    countable: None,
                    ..c.clone()
                };
                view.counters = vec![view.counter.clone()];
                if i > 0 {
                    let own = format!("counter[{}].", i + 1);
                    view.locations.retain(|k, _| !k.starts_with("counter."));
                    let moved: Vec<(String, String)> = self
                        .locations
                        .iter()
                        .filter_map(|(k, v)| {
                            k.strip_prefix(&own)
                                .map(|rest| (format!("counter.{rest}"), v.clone()))
                        })
                        .collect();
                    view.locations.extend(moved);
                }
                view
            })
            .collect()
    }

    /// The view of the counter the backfill reads as evidence: the first
    /// ([`Mapping::per_counter`]).
    pub fn evidence_view(&self) -> Mapping {
        self.per_counter().swap_remove(0)
    }
}
