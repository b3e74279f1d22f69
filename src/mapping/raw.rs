//! The mapping file as TOML gives it, before any check: its sections with their spans
//! ([`RawMapping`]) and each `[[evidence]]` entry with every column optional ([`RawEvidence`]).
//! Read by [`super::parse`] and checked by [`super::validate`] and [`super::rows`].

use serde::Deserialize;
use toml::Spanned;

use super::types::{Evidence, EvidenceKind, EvidenceSource, Lookup};

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
                conversation: None,
                column: self.message.clone()?,
                filter: self.filter.clone(),
                lookup: None,
                read: Some(self.read.clone()?),
            }),
        })
    }
}
