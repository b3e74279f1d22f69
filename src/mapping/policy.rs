//! `[backfill] policy`: how the backfill chooses among a member's evidence values (semantics.md
//! "Backfill: where each last_read_id comes from", issue 12 "Evidence policy"). The choice
//! itself ([`EvidencePolicy`]) is a type of the mapping ([`super::types`]); this file reads it.

use toml::Spanned;

use super::locator::Locator;
use super::types::EvidencePolicy;

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
