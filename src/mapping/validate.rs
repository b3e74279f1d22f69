//! The rules a mapping must follow beyond its TOML types: identifiers tidemark can quote,
//! predicates that are one SQL expression, and what each counter shape and evidence kind needs
//! (`shared/spec/interface.md`, "The mapping file"). Each error points at the key's value.

use std::ops::Range;
use toml::Spanned;

use super::locator::Locator;
use super::raw::{RawEvidence, RawMapping};
use super::types::{Counter, EvidenceKind, Members, Messages, Shape, Watermarks};

/// Checks a parsed mapping, section by section, in the order the errors are reported:
/// messages, members, counter, each evidence, the evidence list, watermarks.
pub(super) fn mapping(
    loc: &Locator<'_>,
    raw: &RawMapping,
    messages: &Messages,
    members: Option<&Members>,
    counter: &Counter,
    evidence: &[RawEvidence],
    watermarks: &Watermarks,
) -> anyhow::Result<()> {
    let ck = Checker { loc };
    ck.messages(&raw.messages, messages)?;
    if let (Some(t), Some(mb)) = (&raw.members, members) {
        ck.members(t, mb, messages)?;
    }
    ck.counter(&raw.counter, counter, messages, members.is_some())?;
    for (e, raw_e) in evidence.iter().zip(&raw.evidence) {
        ck.evidence(raw_e, e, messages, counter)?;
    }
    ck.evidence_list(raw, evidence, counter)?;
    ck.ident(
        &raw.watermarks,
        "watermarks",
        "table",
        &watermarks.table,
        true,
    )
}

/// The checks of one counter table (a second `[[counter]]` entry's; the first is checked by
/// [`mapping`]): identifiers and what its shape needs.
///
/// Errors (exit 2, `file:line:col:` at the key).
pub(super) fn counter(
    loc: &Locator<'_>,
    c: &Spanned<toml::Table>,
    counter: &Counter,
    messages: &Messages,
    has_members: bool,
) -> anyhow::Result<()> {
    Checker { loc }.counter(c, counter, messages, has_members)
}

/// The checks, with where to point their errors.
struct Checker<'a> {
    loc: &'a Locator<'a>,
}

impl Checker<'_> {
    fn at(&self, span: Option<Range<usize>>, msg: &str) -> anyhow::Error {
        self.loc.at(span, msg)
    }

    fn key_span(&self, table: &Spanned<toml::Table>, key: &str) -> Option<Range<usize>> {
        self.loc.value_span(table, key)
    }

    /// [`check_identifier`], the error pointing at the key's value.
    fn ident(
        &self,
        table: &Spanned<toml::Table>,
        section_name: &str,
        key: &str,
        value: &str,
        qualified: bool,
    ) -> anyhow::Result<()> {
        check_identifier(value, qualified).map_err(|why| {
            self.at(
                self.key_span(table, key).or(Some(table.span())),
                &format!("{section_name}.{key} = {value:?}: {why}"),
            )
        })
    }

    /// [`check_predicate`], the error pointing at the key's value.
    fn pred(
        &self,
        table: &Spanned<toml::Table>,
        section_name: &str,
        key: &str,
        value: &str,
    ) -> anyhow::Result<()> {
        check_predicate(value).map_err(|why| {
            self.at(
                self.key_span(table, key).or(Some(table.span())),
                &format!("{section_name}.{key}: {why}"),
            )
        })
    }

    fn messages(&self, m: &Spanned<toml::Table>, messages: &Messages) -> anyhow::Result<()> {
        self.ident(m, "messages", "table", &messages.table, true)?;
        self.ident(m, "messages", "id", &messages.id, false)?;
        self.ident(m, "messages", "conversation", &messages.conversation, false)?;
        self.ident(m, "messages", "sender", &messages.sender, false)?;
        if let Some(c) = &messages.created_at {
            self.ident(m, "messages", "created_at", c, false)?;
        }
        if let Some(p) = &messages.countable {
            self.pred(m, "messages", "countable", p)?;
        }
        if let Some(p) = &messages.legacy_countable {
            self.pred(m, "messages", "legacy_countable", p)?;
        }
        Ok(())
    }

    /// `members.join_time`: an identifier, not with `join_position`, and only with
    /// `messages.created_at` (the join position is the highest position created at or before
    /// it).
    fn join_time(
        &self,
        t: &Spanned<toml::Table>,
        mb: &Members,
        messages: &Messages,
    ) -> anyhow::Result<()> {
        let Some(j) = &mb.join_time else {
            return Ok(());
        };
        self.ident(t, "members", "join_time", j, false)?;
        if mb.join_position.is_some() {
            return Err(self.at(
                self.key_span(t, "join_time"),
                "members.join_time: give either join_position (a message position) or join_time (a time), not both",
            ));
        }
        if messages.created_at.is_none() {
            return Err(self.at(
                self.key_span(t, "join_time"),
                "members.join_time needs messages.created_at: the join position is the highest message position created at or before it",
            ));
        }
        Ok(())
    }

    fn members(
        &self,
        t: &Spanned<toml::Table>,
        mb: &Members,
        messages: &Messages,
    ) -> anyhow::Result<()> {
        self.ident(t, "members", "table", &mb.table, true)?;
        self.ident(t, "members", "user", &mb.user, false)?;
        self.ident(t, "members", "conversation", &mb.conversation, false)?;
        if let Some(j) = &mb.join_position {
            self.ident(t, "members", "join_position", j, false)?;
        }
        self.join_time(t, mb, messages)?;
        if let Some(p) = &mb.active {
            self.pred(t, "members", "active", p)?;
        }
        Ok(())
    }

    fn counter(
        &self,
        c: &Spanned<toml::Table>,
        counter: &Counter,
        messages: &Messages,
        has_members: bool,
    ) -> anyhow::Result<()> {
        if !counter.column.is_empty() && counter.shape != Shape::ReadFlags {
            self.ident(c, "counter", "column", &counter.column, false)?;
        }
        match counter.shape {
            Shape::PerMember => {
                for (key, value) in [
                    ("table", &counter.table),
                    ("user", &counter.user),
                    ("conversation", &counter.conversation),
                ] {
                    let Some(value) = value else {
                        return Err(self.at(
                            Some(c.span()),
                            &format!("counter.{key} is required for shape \"per_member\""),
                        ));
                    };
                    self.ident(c, "counter", key, value, key == "table")?;
                }
            }
            Shape::PerMessage => {
                if let Some(t) = &counter.table {
                    self.ident(c, "counter", "table", t, true)?;
                    if t != &messages.table {
                        return Err(self.at(self.key_span(c, "table"), &format!(
                            "counter.table = {t:?}: a per_message counter lives on the messages table {:?}",
                            messages.table
                        )));
                    }
                }
                for key in ["user", "conversation"] {
                    if self.key_span(c, key).is_some() {
                        return Err(self.at(self.key_span(c, key), &format!(
                            "counter.{key}: a per_message counter is keyed by the message; remove this key"
                        )));
                    }
                }
                if !has_members {
                    return Err(self.at(Some(c.span()), "shape \"per_message\" needs a [members] section: the recomputed value counts the members who have not read each message"));
                }
            }
            Shape::ReadFlags => return self.flags_counter(c, counter, has_members),
        }
        for key in ["message", "read"] {
            if self.key_span(c, key).is_some() {
                return Err(self.at(
                    self.key_span(c, key),
                    &format!("counter.{key}: only shape \"read_flags\" takes {key}"),
                ));
            }
        }
        Ok(())
    }

    /// Shape `read_flags` (semantics.md "Shape C"): `table`, `user`, `message` and `read` are
    /// required, `rows` may say which flag rows count, `conversation` (issue 29 row 11) may
    /// name the flag row's conversation column (where positions are per conversation); no
    /// `column`, `value` or `combine` (the value is the number of unread flags); needs
    /// `[members]` (who is owed, and the watermarks' keys).
    fn flags_counter(
        &self,
        c: &Spanned<toml::Table>,
        counter: &Counter,
        has_members: bool,
    ) -> anyhow::Result<()> {
        for key in ["column", "value", "combine"] {
            if self.key_span(c, key).is_some() {
                return Err(self.at(
                    self.key_span(c, key),
                    &format!("counter.{key}: shape \"read_flags\" takes table, user, message, read, an optional conversation and an optional rows (the stored value is the number of unread flags; the conversation is the message's)"),
                ));
            }
        }
        if let Some(conv) = &counter.conversation {
            self.ident(c, "counter", "conversation", conv, false)?;
        }
        for (key, value) in [
            ("table", &counter.table),
            ("user", &counter.user),
            ("message", &counter.message),
        ] {
            let Some(value) = value else {
                return Err(self.at(
                    Some(c.span()),
                    &format!("counter.{key} is required for shape \"read_flags\""),
                ));
            };
            self.ident(c, "counter", key, value, key == "table")?;
        }
        let Some(read) = &counter.read else {
            return Err(self.at(
                Some(c.span()),
                "counter.read is required for shape \"read_flags\": a predicate over the flag row `this` that is true when the message is read (Zulip: \"(this.flags & 1) <> 0\")",
            ));
        };
        self.pred(c, "counter", "read", read)?;
        if !has_members {
            return Err(self.at(Some(c.span()), "shape \"read_flags\" needs a [members] section: who is owed an unread number, and the keys of the watermarks"));
        }
        Ok(())
    }

    fn evidence(
        &self,
        raw_e: &Spanned<toml::Table>,
        e: &RawEvidence,
        messages: &Messages,
        counter: &Counter,
    ) -> anyhow::Result<()> {
        match e.kind {
            EvidenceKind::Position | EvidenceKind::Timestamp => {
                // A timestamp may be keyed by the user alone (a per-user "mark all as read"
                // time, resolved in each of the user's conversations).
                let user_only = e.kind == EvidenceKind::Timestamp && e.conversation.is_none();
                for (key, value) in [
                    ("table", &e.table),
                    ("user", &e.user),
                    ("conversation", &e.conversation),
                    ("column", &e.column),
                ] {
                    let Some(value) = value else {
                        if key == "conversation" && user_only {
                            continue;
                        }
                        return Err(self.at(
                            Some(raw_e.span()),
                            &format!(
                                "evidence.{key} is required for kind \"{}\"{}",
                                e.kind.as_str(),
                                if key == "conversation" {
                                    " (only a timestamp may be keyed by the user alone)"
                                } else {
                                    ""
                                }
                            ),
                        ));
                    };
                    self.ident(raw_e, "evidence", key, value, key == "table")?;
                }
                if e.kind == EvidenceKind::Timestamp && messages.created_at.is_none() {
                    return Err(self.at(
                        Some(raw_e.span()),
                        "evidence kind \"timestamp\" needs messages.created_at",
                    ));
                }
                self.evidence_extras(raw_e, e)?;
            }
            EvidenceKind::ReadFlags => self.read_flags_evidence(raw_e, e)?,
            EvidenceKind::Counter | EvidenceKind::OwnMessage => {
                for key in [
                    "table",
                    "user",
                    "conversation",
                    "column",
                    "filter",
                    "lookup",
                    "message",
                    "read",
                ] {
                    if self.key_span(raw_e, key).is_some() {
                        return Err(self.at(
                            self.key_span(raw_e, key),
                            &format!(
                                "evidence.{key}: kind \"{}\" reads the {} and takes no {key}",
                                e.kind.as_str(),
                                if e.kind == EvidenceKind::Counter {
                                    "[counter]"
                                } else {
                                    "[messages] table"
                                }
                            ),
                        ));
                    }
                }
                if e.kind == EvidenceKind::Counter && counter.shape != Shape::PerMember {
                    return Err(self.at(Some(raw_e.span()), &format!("evidence kind \"counter\" needs shape \"per_member\": a {} counter has no watermark to derive (semantics.md, Backfill){}", counter.shape, if counter.shape == Shape::ReadFlags { "; list evidence of kind \"read_flags\" instead" } else { "" })));
                }
            }
        }
        Ok(())
    }

    /// `read_flags` evidence (issue 22): `table`, `user`, `message` (identifiers) and `read`
    /// (a predicate) are required; an optional `filter` and an optional `conversation` (issue
    /// 29 row 11: the flag row's conversation column); no `column` or `lookup`.
    fn read_flags_evidence(
        &self,
        raw_e: &Spanned<toml::Table>,
        e: &RawEvidence,
    ) -> anyhow::Result<()> {
        for key in ["column", "lookup"] {
            if self.key_span(raw_e, key).is_some() {
                return Err(self.at(
                    self.key_span(raw_e, key),
                    &format!("evidence.{key}: kind \"read_flags\" takes table, user, message, read, an optional conversation and an optional filter (its conversation is the message's)"),
                ));
            }
        }
        for (key, value) in [
            ("table", &e.table),
            ("user", &e.user),
            ("message", &e.message),
        ] {
            let Some(value) = value else {
                return Err(self.at(
                    Some(raw_e.span()),
                    &format!("evidence.{key} is required for kind \"read_flags\""),
                ));
            };
            self.ident(raw_e, "evidence", key, value, key == "table")?;
        }
        if let Some(conv) = &e.conversation {
            self.ident(raw_e, "evidence", "conversation", conv, false)?;
        }
        let Some(read) = &e.read else {
            return Err(self.at(
                Some(raw_e.span()),
                "evidence.read is required for kind \"read_flags\": a predicate over the flag row `this` that is true when the message is read (Zulip: \"(this.flags & 1) <> 0\")",
            ));
        };
        self.pred(raw_e, "evidence", "read", read)?;
        if let Some(f) = &e.filter {
            self.pred(raw_e, "evidence", "filter", f)?;
        }
        Ok(())
    }

    /// An evidence entry's `filter` (one expression) and `lookup` (`position` only: three
    /// identifiers).
    fn evidence_extras(&self, raw_e: &Spanned<toml::Table>, e: &RawEvidence) -> anyhow::Result<()> {
        if let Some(f) = &e.filter {
            self.pred(raw_e, "evidence", "filter", f)?;
            // The looked-up row is named `lookup` (issue 22): only an entry with a lookup has it.
            if e.lookup.is_none() && crate::sql_text::qualifiers(f).iter().any(|q| q == "lookup") {
                return Err(self.at(
                    self.key_span(raw_e, "filter"),
                    "evidence.filter reads `lookup.`, the looked-up row, but this evidence has no lookup",
                ));
            }
        }
        for key in ["message", "read"] {
            if self.key_span(raw_e, key).is_some() {
                return Err(self.at(
                    self.key_span(raw_e, key),
                    &format!("evidence.{key}: only kind \"read_flags\" takes {key}"),
                ));
            }
        }
        if let Some(l) = &e.lookup {
            if e.kind != EvidenceKind::Position {
                return Err(self.at(
                    self.key_span(raw_e, "lookup"),
                    &format!(
                        "evidence.lookup: kind \"{}\" reads a time; a lookup resolves a key to a position (kind \"position\")",
                        e.kind.as_str()
                    ),
                ));
            }
            for (key, value) in [
                ("table", &l.table),
                ("key", &l.key),
                ("position", &l.position),
            ]
            .into_iter()
            .chain(l.conversation.as_ref().map(|c| ("conversation", c)))
            {
                check_identifier(value, key == "table").map_err(|why| {
                    self.at(
                        self.key_span(raw_e, "lookup").or(Some(raw_e.span())),
                        &format!("evidence.lookup.{key} = {value:?}: {why}"),
                    )
                })?;
            }
        }
        Ok(())
    }

    fn evidence_list(
        &self,
        raw: &RawMapping,
        evidence: &[RawEvidence],
        counter: &Counter,
    ) -> anyhow::Result<()> {
        let kinds: Vec<_> = evidence.iter().map(|e| e.kind).collect();
        for (i, k) in kinds.iter().enumerate() {
            if matches!(
                k,
                EvidenceKind::Counter | EvidenceKind::OwnMessage | EvidenceKind::ReadFlags
            ) && kinds[..i].contains(k)
            {
                return Err(self.at(
                    Some(raw.evidence[i].span()),
                    &format!("evidence kind \"{}\" is listed twice", k.as_str()),
                ));
            }
        }
        if counter.shape == Shape::PerMessage
            && !kinds.iter().any(|k| {
                matches!(
                    k,
                    EvidenceKind::Position | EvidenceKind::Timestamp | EvidenceKind::ReadFlags
                )
            })
        {
            return Err(self.at(Some(raw.counter.span()), "shape \"per_message\" has no counter to derive watermarks from: add [[evidence]] of kind \"position\" (a last-read column or read receipts) or \"timestamp\""));
        }
        Ok(())
    }
}

/// An identifier tidemark will quote: ASCII letters, digits, `_` and `$`, not starting with a
/// digit, at most 63 bytes (PostgreSQL's NAMEDATALEN - 1); with `qualified`, one optional
/// `schema.` prefix.
pub fn check_identifier(value: &str, qualified: bool) -> Result<(), String> {
    let parts: Vec<&str> = value.split('.').collect();
    if parts.len() > 2 || (parts.len() == 2 && !qualified) {
        return Err(if qualified {
            "at most one dot (schema.table)".into()
        } else {
            "a column name has no dot".into()
        });
    }
    for part in parts {
        if part.is_empty() {
            return Err("empty name".into());
        }
        if part.len() > 63 {
            return Err("longer than 63 bytes".into());
        }
        if part.starts_with(|c: char| c.is_ascii_digit()) {
            return Err("starts with a digit".into());
        }
        if let Some(bad) = part
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '$'))
        {
            return Err(format!(
                "{bad:?} is not allowed in an identifier (letters, digits, _ and $)"
            ));
        }
    }
    Ok(())
}

/// A predicate is one SQL expression: no `;`, no `--` or `/*` comments, balanced parentheses
/// and quotes, not empty.
pub fn check_predicate(value: &str) -> Result<(), String> {
    if value.trim().is_empty() {
        return Err("empty predicate".into());
    }
    let mut depth = 0i32;
    let mut quote: Option<char> = None;
    let chars: Vec<char> = value.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '\'' | '"' | '`' => quote = Some(c),
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth < 0 {
                        return Err("unbalanced ')'".into());
                    }
                }
                ';' => return Err("';' is not allowed: a predicate is one expression".into()),
                '-' if chars.get(i + 1) == Some(&'-') => {
                    return Err("comments are not allowed".into())
                }
                '/' if chars.get(i + 1) == Some(&'*') => {
                    return Err("comments are not allowed".into())
                }
                _ => {}
            },
        }
    }
    if quote.is_some() {
        return Err("unterminated quote".into());
    }
    if depth != 0 {
        return Err("unbalanced '('".into());
    }
    Ok(())
}
