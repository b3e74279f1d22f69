//! `[backfill] policy`: how the backfill chooses among a member's evidence values (semantics.md
//! "Backfill: where each last_read_id comes from", issue 12 "Evidence policy").

use toml::Spanned;

use super::parse::Locator;

/// How the backfill picks a member's watermark when several evidence sources have a value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EvidencePolicy {
    /// The first source in the mapping's order that has a value wins (own messages stay a
    /// lower bound). Right when the sources are ranked by trust: an application's read
    /// position that is always current, listed first.
    #[default]
    First,
    /// The highest value among the position-space sources (position, timestamp,
    /// own_message) wins; a counter only fills a missing watermark when none of them has a
    /// value. Right when sources can lag one another: a stale read receipt must not beat a
    /// newer "last viewed" time.
    Highest,
}

impl EvidencePolicy {
    /// The name as written in the mapping file.
    pub fn as_str(self) -> &'static str {
        match self {
            EvidencePolicy::First => "first",
            EvidencePolicy::Highest => "highest",
        }
    }
}

/// Reads the optional `[backfill]` section: its only key is `policy` (`"first"`, the default,
/// or `"highest"`).
///
/// Errors (exit 2, `file:line:col:`): an unknown key, a value that is not one of the two
/// names (pointing at the value).
pub(super) fn parse(
    loc: &Locator<'_>,
    section: Option<&Spanned<toml::Table>>,
) -> anyhow::Result<EvidencePolicy> {
    let Some(table) = section else {
        return Ok(EvidencePolicy::default());
    };
    for key in table.get_ref().keys() {
        if key != "policy" {
            let span = loc.value_span(table, key).unwrap_or(table.span());
            return Err(loc.at(
                Some(span),
                &format!("[backfill]: unknown key `{key}`, expected `policy`"),
            ));
        }
    }
    let Some(value) = table.get_ref().get("policy") else {
        return Ok(EvidencePolicy::default());
    };
    match value.as_str() {
        Some("first") => Ok(EvidencePolicy::First),
        Some("highest") => Ok(EvidencePolicy::Highest),
        _ => Err(loc.at(
            loc.value_span(table, "policy").or(Some(table.span())),
            &format!(
                "[backfill] policy = {value}: expected \"first\" (the first evidence with a value wins) or \"highest\" (the highest position-space evidence wins)"
            ),
        )),
    }
}
