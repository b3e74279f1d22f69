//! The mapping file as TOML gives it, before any check: its sections with their spans
//! ([`RawMapping`]) and each `[[evidence]]` entry with every column optional ([`RawEvidence`]).
//! Read by [`super::parse`] and checked by [`super::validate`] and [`super::rows`].

use serde::Deserialize;
use toml::Spanned;

use super::types::{Evidence, EvidenceKind, EvidenceSource, Lookup};

/// The file's sections, each with its span, as TOML gives them: `counter` is one `[counter]`
/// table or several `[[counter]]` entries ([`RawMapping::from_file`] tells them apart).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFile {
    pub(super) messages: Spanned<toml::Table>,
    pub(super) members: Option<Spanned<toml::Table>>,
    pub(super) counter: Spanned<toml::Value>,
    #[serde(default)]
    pub(super) evidence: Vec<Spanned<toml::Table>>,
    pub(super) watermarks: Spanned<toml::Table>,
    pub(super) backfill: Option<Spanned<toml::Table>>,
    pub(super) conversations: Option<Spanned<toml::Table>>,
    pub(super) users: Option<Spanned<toml::Table>>,
    pub(super) contract: Option<Spanned<toml::Table>>,
}

/// The file's sections, each with its span; `counter` is the first (or only) counter table,
/// `counters` every one in the file's order (issue 22: `[[counter]]` may appear several
/// times).
pub(super) struct RawMapping {
    pub(super) messages: Spanned<toml::Table>,
    pub(super) members: Option<Spanned<toml::Table>>,
    pub(super) counter: Spanned<toml::Table>,
    pub(super) counters: Vec<Spanned<toml::Table>>,
    pub(super) evidence: Vec<Spanned<toml::Table>>,
    pub(super) watermarks: Spanned<toml::Table>,
    pub(super) backfill: Option<Spanned<toml::Table>>,
    pub(super) conversations: Option<Spanned<toml::Table>>,
    pub(super) users: Option<Spanned<toml::Table>>,
    pub(super) contract: Option<Spanned<toml::Table>>,
}

impl RawMapping {
    /// The sections of `file` (read from `text`), the counter tables split out: one
    /// `[counter]`, or each `[[counter]]` entry with its own span (toml's spanned document).
    ///
    /// Errors: `counter` is neither a table nor an array of tables (the span and the message
    /// for an `origin:line:col:` error).
    pub(super) fn from_file(
        text: &str,
        file: RawFile,
    ) -> Result<RawMapping, (std::ops::Range<usize>, String)> {
        let span = file.counter.span();
        let counters = match file.counter.into_inner() {
            toml::Value::Table(t) => vec![Spanned::new(span.clone(), t)],
            toml::Value::Array(items) => {
                let spans = array_spans(text, "counter");
                let mut out = Vec::new();
                for (i, item) in items.into_iter().enumerate() {
                    let toml::Value::Table(t) = item else {
                        return Err((span, "[[counter]]: each entry is a table".into()));
                    };
                    out.push(Spanned::new(
                        spans.get(i).cloned().unwrap_or(span.clone()),
                        t,
                    ));
                }
                out
            }
            _ => {
                return Err((
                    span,
                    "counter: write a [counter] table or [[counter]] tables".into(),
                ))
            }
        };
        let Some(first) = counters.first().cloned() else {
            return Err((span, "[[counter]]: at least one counter is needed".into()));
        };
        Ok(RawMapping {
            messages: file.messages,
            members: file.members,
            counter: first,
            counters,
            evidence: file.evidence,
            watermarks: file.watermarks,
            backfill: file.backfill,
            conversations: file.conversations,
            users: file.users,
            contract: file.contract,
        })
    }
}

/// The span of each entry of the array of tables `key` (`[[key]]`) in `text`.
fn array_spans(text: &str, key: &str) -> Vec<std::ops::Range<usize>> {
    let Ok(doc) = toml::de::DeTable::parse(text) else {
        return Vec::new();
    };
    doc.get_ref()
        .iter()
        .find(|(k, _)| k.get_ref() == key)
        .and_then(|(_, v)| match v.get_ref() {
            toml::de::DeValue::Array(items) => Some(items.iter().map(|i| i.span()).collect()),
            _ => None,
        })
        .unwrap_or_default()
}

/// One `[[evidence]]` entry as written: every column optional until [`super::validate`] has
/// checked which ones its kind needs. Its JSON (the first five keys always, `null` when absent;
/// `filter`, `lookup`, `message` and `read` only when given) is part of the mapping's fingerprint, so its fields
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
    /// `read_flags`: the flag row's message column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) message: Option<String>,
    /// `read_flags`: the predicate over the flag row that says read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) read: Option<String>,
}

impl RawEvidence {
    /// The typed evidence; `None` when a column its kind needs is missing (rejected by
    /// [`super::validate`] before this is called).
    pub(super) fn typed(&self) -> Option<Evidence> {
        let source = || {
            Some(EvidenceSource {
                table: self.table.clone()?,
                user: self.user.clone()?,
                conversation: self.conversation.clone(),
                column: self.column.clone()?,
                filter: self.filter.clone(),
                lookup: self.lookup.clone(),
                read: None,
            })
        };
        Some(match self.kind {
            EvidenceKind::Position => Evidence::Position(source()?),
            EvidenceKind::Timestamp => Evidence::Timestamp(source()?),
            EvidenceKind::Counter => Evidence::Counter,
            EvidenceKind::OwnMessage => Evidence::OwnMessage,
            EvidenceKind::ReadFlags => Evidence::ReadFlags(EvidenceSource {
                table: self.table.clone()?,
                user: self.user.clone()?,
                // Issue 29 row 11: the flag row's conversation, where it names one.
                conversation: self.conversation.clone(),
                column: self.message.clone()?,
                filter: self.filter.clone(),
                lookup: None,
                read: Some(self.read.clone()?),
            }),
        })
    }
}
