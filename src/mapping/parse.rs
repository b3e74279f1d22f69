//! Reading the mapping file: TOML into its sections, each parsed on its own so that an error
//! points into it (`file:line:col:`), then [`super::validate`], then the [`Mapping`] with its
//! fingerprint.

use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::ops::Range;
use toml::Spanned;

use super::{
    hex, Counter, Evidence, EvidenceKind, EvidenceSource, Lookup, Mapping, Members, Messages,
    PredicateSite, Watermarks,
};
use crate::error::input_error;

/// The file's sections, each with its span.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMapping {
    pub(super) messages: Spanned<toml::Table>,
    pub(super) members: Option<Spanned<toml::Table>>,
    pub(super) counter: Spanned<toml::Table>,
    #[serde(default)]
    pub(super) evidence: Vec<Spanned<toml::Table>>,
    pub(super) watermarks: Spanned<toml::Table>,
    pub(super) backfill: Option<Spanned<toml::Table>>,
    pub(super) conversations: Option<Spanned<toml::Table>>,
    pub(super) users: Option<Spanned<toml::Table>>,
    pub(super) contract: Option<Spanned<toml::Table>>,
}

/// One `[[evidence]]` entry as written: every column optional until [`super::validate`] has
/// checked which ones its kind needs. Its JSON (the first five keys always, `null` when absent;
/// `filter` and `lookup` only when given) is part of the mapping's fingerprint, so its fields
/// and their names must not change.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename = "Evidence")] // the name serde's messages give
pub(super) struct RawEvidence {
    pub(super) kind: EvidenceKind,
    pub(super) table: Option<String>,
    pub(super) user: Option<String>,
    pub(super) conversation: Option<String>,
    pub(super) column: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) filter: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) lookup: Option<Lookup>,
}

impl RawEvidence {
    /// The typed evidence; `None` when a column its kind needs is missing (rejected by
    /// [`super::validate`] before this is called).
    fn typed(&self) -> Option<Evidence> {
        let source = || {
            Some(EvidenceSource {
                table: self.table.clone()?,
                user: self.user.clone()?,
                conversation: self.conversation.clone(),
                column: self.column.clone()?,
                filter: self.filter.clone(),
                lookup: self.lookup.clone(),
            })
        };
        Some(match self.kind {
            EvidenceKind::Position => Evidence::Position(source()?),
            EvidenceKind::Timestamp => Evidence::Timestamp(source()?),
            EvidenceKind::Counter => Evidence::Counter,
            EvidenceKind::OwnMessage => Evidence::OwnMessage,
        })
    }
}

/// The row names of each evidence `filter` (issue 12): `conv.` needs `[conversations]` and a
/// conversation key on the evidence row (a timestamp keyed by the user alone has none), `usr.`
/// needs `[users]`.
///
/// Errors (exit 2, `file:line:col:` at the filter).
fn evidence_row_names(
    loc: &Locator<'_>,
    raw: &RawMapping,
    evidence: &[RawEvidence],
    has_conv: bool,
    has_usr: bool,
) -> anyhow::Result<()> {
    let ck = super::rows::RowChecks { loc };
    let has = super::RowRefs {
        conv: has_conv,
        usr: has_usr,
    };
    for (e, t) in evidence.iter().zip(&raw.evidence) {
        let Some(filter) = e.filter.as_deref() else {
            continue;
        };
        if e.conversation.is_none() && super::RowRefs::of(Some(filter)).conv {
            return Err(loc.at(
                loc.value_span(t, "filter").or(Some(t.span())),
                "evidence.filter reads `conv.`, but this evidence has no conversation key (a timestamp keyed by the user alone applies in each of the user's conversations)",
            ));
        }
        ck.row_names(t, "evidence.filter", Some(filter), has, true)?;
    }
    Ok(())
}

/// Turns a span of the mapping text into `origin:line:col: message` errors (exit 2).
pub(super) struct Locator<'a> {
    /// The mapping text.
    pub(super) text: &'a str,
    /// Its name in messages (a path, or `<demo>`).
    pub(super) origin: &'a str,
}

impl Locator<'_> {
    /// An input error at the start of `span` (line 1, column 1 when there is none).
    pub(super) fn at(&self, span: Option<Range<usize>>, msg: &str) -> anyhow::Error {
        let (line, col) = span.map(|s| line_col(self.text, s.start)).unwrap_or((1, 1));
        input_error(format!("{}:{line}:{col}: {msg}", self.origin))
    }

    /// The span of `key`'s value in `table`.
    pub(super) fn value_span(
        &self,
        table: &Spanned<toml::Table>,
        key: &str,
    ) -> Option<Range<usize>> {
        find_value_span(self.text, table.span(), key)
    }
}

impl Mapping {
    /// Parses mapping text; `origin` names it in messages (a path, or `<demo>`).
    ///
    /// Errors (exit 2): as [`Mapping::load`], the message starting with `origin:line:col:`.
    pub fn parse(text: &str, origin: &str) -> anyhow::Result<Mapping> {
        let loc = Locator { text, origin };
        let raw: RawMapping = toml::from_str(text).map_err(|e| loc.at(e.span(), e.message()))?;
        let messages: Messages = section(&loc, &raw.messages, "messages")?;
        let members: Option<Members> = match &raw.members {
            Some(t) => Some(section(&loc, t, "members")?),
            None => None,
        };
        let counter: Counter = section(&loc, &raw.counter, "counter")?;
        let mut evidence = Vec::new();
        for e in &raw.evidence {
            evidence.push(section::<RawEvidence>(&loc, e, "[evidence]")?);
        }
        let watermarks: Watermarks = section(&loc, &raw.watermarks, "watermarks")?;

        super::validate::mapping(
            &loc,
            &raw,
            &messages,
            members.as_ref(),
            &counter,
            &evidence,
            &watermarks,
        )?;

        let policy = super::policy::parse(&loc, raw.backfill.as_ref())?;
        let (conversations, users, contract) =
            super::rows::parse(&loc, &raw, &messages, members.as_ref(), &counter)?;
        evidence_row_names(
            &loc,
            &raw,
            &evidence,
            conversations.is_some(),
            users.is_some(),
        )?;
        let mut normalised = serde_json::json!({
            "messages": messages, "members": members, "counter": counter,
            "evidence": evidence, "watermarks": watermarks,
        });
        // Only a policy other than the default changes the fingerprint (mappings written
        // before the key existed keep theirs).
        if policy != super::EvidencePolicy::First {
            normalised["backfill"] = serde_json::json!({ "policy": policy });
        }
        // The issue-12 sections likewise, only when present.
        for (key, value) in [
            ("conversations", serde_json::to_value(&conversations)?),
            ("users", serde_json::to_value(&users)?),
            ("contract", serde_json::to_value(&contract)?),
        ] {
            if !value.is_null() {
                normalised[key] = value;
            }
        }
        let fingerprint = hex(&Sha256::digest(normalised.to_string().as_bytes()));
        let evidence = evidence
            .iter()
            .zip(&raw.evidence)
            .map(|(e, span)| {
                e.typed().ok_or_else(|| {
                    loc.at(
                        Some(span.span()),
                        &format!("evidence kind \"{}\" lacks a column", e.kind.as_str()),
                    )
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let mut predicates = Vec::new();
        for (table, key, value) in [
            (&raw.messages, "messages.countable", &messages.countable),
            (
                &raw.messages,
                "messages.legacy_countable",
                &messages.legacy_countable,
            ),
            (
                raw.members.as_ref().unwrap_or(&raw.messages),
                "members.active",
                &members.as_ref().and_then(|m| m.active.clone()),
            ),
            (&raw.counter, "counter.value", &counter.value),
            (&raw.counter, "counter.rows", &counter.rows),
        ] {
            if let Some(pred) = value {
                let span = loc.value_span(table, key.split('.').nth(1).unwrap_or(key));
                let (line, col) = line_col(text, span.unwrap_or(table.span()).start);
                predicates.push(PredicateSite {
                    key: key.to_string(),
                    text: pred.clone(),
                    at: format!("{origin}:{line}:{col}"),
                });
            }
        }
        for (i, (e, table)) in evidence.iter().zip(&raw.evidence).enumerate() {
            if let Some(filter) = e.source().and_then(|s| s.filter.as_ref()) {
                let span = loc.value_span(table, "filter");
                let (line, col) = line_col(text, span.unwrap_or(table.span()).start);
                predicates.push(PredicateSite {
                    key: format!("evidence[{}].filter", i + 1),
                    text: filter.clone(),
                    at: format!("{origin}:{line}:{col}"),
                });
            }
        }
        // Where each key's value was written, for the database checks' messages.
        let mut sections: Vec<(String, &Spanned<toml::Table>)> = vec![
            ("messages".into(), &raw.messages),
            ("counter".into(), &raw.counter),
            ("watermarks".into(), &raw.watermarks),
        ];
        for (name, t) in [
            ("members", &raw.members),
            ("conversations", &raw.conversations),
            ("users", &raw.users),
            ("contract", &raw.contract),
            ("backfill", &raw.backfill),
        ] {
            if let Some(t) = t {
                sections.push((name.into(), t));
            }
        }
        for (i, t) in raw.evidence.iter().enumerate() {
            sections.push((format!("evidence[{}]", i + 1), t));
        }
        let mut locations = std::collections::BTreeMap::new();
        for (name, table) in sections {
            for key in table.get_ref().keys() {
                let span = loc.value_span(table, key).unwrap_or(table.span());
                let (line, col) = line_col(text, span.start);
                locations.insert(format!("{name}.{key}"), format!("{origin}:{line}:{col}"));
            }
        }
        Ok(Mapping {
            predicates,
            locations,
            messages,
            members,
            counter,
            evidence,
            watermarks,
            policy,
            fingerprint,
            conversations,
            users,
            contract,
        })
    }
}

/// Parses one section again on its own so that an error points into it: at the offending
/// key's own line (toml's spans, [`toml::de::DeTable`]), or at the key the message names.
pub(super) fn section<T: for<'de> Deserialize<'de>>(
    loc: &Locator<'_>,
    table: &Spanned<toml::Table>,
    name: &str,
) -> anyhow::Result<T> {
    T::deserialize(toml::Value::Table(table.get_ref().clone())).map_err(|e| {
        let key = e
            .message()
            .split('`')
            .nth(1)
            .unwrap_or_default()
            .to_string();
        let span = spanned_error::<T>(loc.text, table.span())
            .or_else(|| {
                (!key.is_empty())
                    .then(|| find_key_span(loc.text, table.span(), &key))
                    .flatten()
            })
            .unwrap_or(table.span());
        loc.at(Some(span), &format!("[{name}]: {}", e.message()))
    })
}

/// The span toml gives the error of deserializing `T` from the section at `within` when it
/// reads the section with spans (the key or value at fault), if it points past the
/// section's start (its header).
fn spanned_error<T: for<'de> Deserialize<'de>>(
    text: &str,
    within: Range<usize>,
) -> Option<Range<usize>> {
    let doc = toml::de::DeTable::parse(text).ok()?;
    let found = doc.get_ref().values().find_map(|v| match v.get_ref() {
        toml::de::DeValue::Table(_) if v.span() == within => Some(v.clone()),
        toml::de::DeValue::Array(items) => items.iter().find(|i| i.span() == within).cloned(),
        _ => None,
    })?;
    T::deserialize(toml::de::ValueDeserializer::from(found))
        .err()?
        .span()
        .filter(|s| s.start > within.start)
}

/// 1-based line and column of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rfind('\n')
        .map(|nl| before.len() - nl)
        .unwrap_or(before.len() + 1);
    (line, col)
}

/// The span of a key (the start of its line's key) in the table that starts at `within.start`.
fn find_key_span(text: &str, within: Range<usize>, key: &str) -> Option<Range<usize>> {
    let value = find_value_span(text, within.clone(), key)?;
    let line_start = text[..value.start].rfind('\n').map(|i| i + 1).unwrap_or(0);
    let indent = text[line_start..].len() - text[line_start..].trim_start().len();
    Some(line_start + indent..value.end)
}

/// The span of `key = value`'s value in the table that starts at `within.start` (a line-based
/// search up to the next `[header]`: mapping files are flat key/value tables).
fn find_value_span(text: &str, within: Range<usize>, key: &str) -> Option<Range<usize>> {
    let region = text.get(within.start..)?;
    let mut offset = within.start;
    for (n, line) in region.split_inclusive('\n').enumerate() {
        let trimmed = line.trim_start();
        if n > 0 && trimmed.starts_with('[') {
            break;
        }
        if let Some(rest) = trimmed.strip_prefix(key) {
            let rest_trim = rest.trim_start();
            if rest_trim.starts_with('=') {
                let value_start = line.len() - rest_trim.len() + 1;
                let value = &line[value_start..];
                let lead = value.len() - value.trim_start().len();
                let start = offset + value_start + lead;
                return Some(start..offset + line.trim_end().len());
            }
        }
        offset += line.len();
    }
    None
}
