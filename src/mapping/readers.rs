//! Issue 22, "Messages only some readers count" (semantics.md): the reader-dependent keys of
//! `[messages]`, restricted to the forms the audit's one pass can carry:
//!
//! - a restricted message: `restricted` (a predicate over the messages row) with
//!   `restricted_readers` (a predicate over the reader's members row, `usr` and `conv`): such
//!   a message counts only for the readers it admits (a second running count, subtracted for
//!   the others);
//! - an addressed message: `recipient` (an expression over the messages row: a user key, NULL
//!   for everyone): the message counts only for that reader (a running count per recipient).
//!
//! This file checks the keys (exit 2, `file:line:col:` at the key) and says what a mapping
//! uses; the statements read them through the SQL context (`sql/common/audit_per_member.sql`,
//! `sql/common/backfill_counter_rank.sql`).

use super::locator::{line_col, Locator};
use super::raw::RawMapping;
use super::rows::{RowChecks, RowRefs};
use super::types::{Counter, Mapping, Members, Messages, PredicateSite, Shape};
use super::validate::check_predicate;

impl Mapping {
    /// Whether any message counts for some readers only (`restricted` or `recipient`).
    pub fn has_reader_rules(&self) -> bool {
        self.messages.restricted.is_some() || self.messages.recipient.is_some()
    }
}

/// Checks `[messages] restricted`, `restricted_readers` and `recipient`: each one SQL
/// expression; `restricted` and `restricted_readers` together, with `[members]` (the reader's
/// row); row names as every predicate's (`usr.` only in `restricted_readers`); a per_message
/// counter takes none of them.
///
/// Errors (exit 2, at the key).
pub(super) fn check(
    loc: &Locator<'_>,
    raw: &RawMapping,
    messages: &Messages,
    members: Option<&Members>,
    counter: &Counter,
) -> anyhow::Result<()> {
    let has = RowRefs {
        conv: raw.conversations.is_some(),
        usr: raw.users.is_some(),
    };
    let t = &raw.messages;
    let at = |key: &str, msg: &str| loc.at(loc.value_span(t, key).or(Some(t.span())), msg);
    for (key, text) in [
        ("restricted", &messages.restricted),
        ("restricted_readers", &messages.restricted_readers),
        ("recipient", &messages.recipient),
    ] {
        let Some(text) = text else { continue };
        check_predicate(text).map_err(|why| at(key, &format!("messages.{key}: {why}")))?;
        if counter.shape == Shape::PerMessage {
            return Err(at(key, &format!("messages.{key}: a per_message counter cannot say which readers a message counts for (issue 22: only a per_member counter takes restricted, restricted_readers or recipient)")));
        }
    }
    match (&messages.restricted, &messages.restricted_readers) {
        (Some(_), None) => return Err(at("restricted", "messages.restricted needs messages.restricted_readers: the predicate over the reader's members row (`this`, `usr`, `conv`) that admits the readers a restricted message counts for")),
        (None, Some(_)) => return Err(at("restricted_readers", "messages.restricted_readers needs messages.restricted: the predicate over the messages row saying which messages are restricted")),
        (Some(_), Some(_)) if members.is_none() => return Err(at("restricted_readers", "messages.restricted_readers reads the reader's members row: add a [members] section")),
        _ => {}
    }
    let ck = RowChecks { loc };
    ck.row_names(
        t,
        "messages.restricted",
        messages.restricted.as_deref(),
        has,
        false,
    )?;
    ck.row_names(
        t,
        "messages.recipient",
        messages.recipient.as_deref(),
        has,
        false,
    )?;
    ck.row_names(
        t,
        "messages.restricted_readers",
        messages.restricted_readers.as_deref(),
        has,
        true,
    )
}

/// Where each of the keys was written, for [`Mapping::check_predicates`] (each parsed as one
/// expression of the database's dialect).
pub(super) fn sites(
    loc: &Locator<'_>,
    raw: &RawMapping,
    messages: &Messages,
) -> Vec<PredicateSite> {
    let t = &raw.messages;
    [
        ("restricted", &messages.restricted),
        ("restricted_readers", &messages.restricted_readers),
        ("recipient", &messages.recipient),
    ]
    .into_iter()
    .filter_map(|(key, text)| {
        let text = text.as_ref()?;
        let span = loc.value_span(t, key).unwrap_or(t.span());
        let (line, col) = line_col(loc.text, span.start);
        Some(PredicateSite {
            key: format!("messages.{key}"),
            text: text.clone(),
            at: format!("{}:{line}:{col}", loc.origin),
        })
    })
    .collect()
}
