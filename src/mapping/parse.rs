//! Reading the mapping file: TOML into its sections, each parsed on its own so that an error
//! points into it (`file:line:col:`), then [`super::validate`], then the [`Mapping`] with its
//! fingerprint.

use sha2::{Digest, Sha256};
use toml::Spanned;

use super::locator::{line_col, section, Locator};
use super::raw::{RawEvidence, RawFile, RawMapping};
use super::rows::{RowChecks, RowRefs};
use super::types::{
    Counter, EvidencePolicy, Mapping, Members, Messages, PredicateSite, Watermarks,
};

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
    let ck = RowChecks { loc };
    let has = RowRefs {
        conv: has_conv,
        usr: has_usr,
    };
    for (e, t) in evidence.iter().zip(&raw.evidence) {
        let Some(filter) = e.filter.as_deref() else {
            continue;
        };
        if e.conversation.is_none() && RowRefs::of(Some(filter)).conv {
            return Err(loc.at(
                loc.value_span(t, "filter").or(Some(t.span())),
                "evidence.filter reads `conv.`, but this evidence has no conversation key (a timestamp keyed by the user alone applies in each of the user's conversations)",
            ));
        }
        ck.row_names(t, "evidence.filter", Some(filter), has, true)?;
    }
    for (e, t) in evidence.iter().zip(&raw.evidence) {
        let refs = RowRefs::of(e.read.as_deref());
        if refs.conv || refs.usr {
            return Err(loc.at(
                loc.value_span(t, "read").or(Some(t.span())),
                "evidence.read: a predicate over the flag row `this` alone (no `conv.` or `usr.`)",
            ));
        }
    }
    Ok(())
}

impl Mapping {
    /// Parses mapping text; `origin` names it in messages (a path, or `<demo>`).
    ///
    /// Errors (exit 2): as [`Mapping::load`], the message starting with `origin:line:col:`.
    pub fn parse(text: &str, origin: &str) -> anyhow::Result<Mapping> {
        let loc = Locator { text, origin };
        let file: RawFile = toml::from_str(text).map_err(|e| loc.at(e.span(), e.message()))?;
        let raw =
            RawMapping::from_file(text, file).map_err(|(span, msg)| loc.at(Some(span), &msg))?;
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
        super::readers::check(&loc, &raw, &messages, members.as_ref(), &counter)?;
        evidence_row_names(
            &loc,
            &raw,
            &evidence,
            conversations.is_some(),
            users.is_some(),
        )?;
        let counters = super::counters::parse(
            &loc,
            &raw,
            &counter,
            &messages,
            members.as_ref(),
            &evidence,
            contract.is_some(),
            RowRefs {
                conv: conversations.is_some(),
                usr: users.is_some(),
            },
        )?;
        // One counter keeps its fingerprint; several are the list (issue 22).
        let counter_json = if counters.len() > 1 {
            serde_json::to_value(&counters)?
        } else {
            serde_json::to_value(&counter)?
        };
        let mut normalised = serde_json::json!({
            "messages": messages, "members": members, "counter": counter_json,
            "evidence": evidence, "watermarks": watermarks,
        });
        // Only a policy other than the default changes the fingerprint (mappings written
        // before the key existed keep theirs).
        if policy != EvidencePolicy::First {
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
        let predicates = predicate_sites(
            &loc,
            &raw,
            &messages,
            members.as_ref(),
            &counter,
            &counters,
            &evidence,
        );
        let locations = key_locations(&loc, &raw);
        Ok(Mapping {
            predicates,
            locations,
            messages,
            members,
            counter,
            counters,
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

/// Every SQL text of the mapping with the key and `origin:line:col` it was written at, for
/// [`Mapping::check_predicates`]: the sections' predicates, the counters' after the first,
/// the evidence filters.
fn predicate_sites(
    loc: &Locator<'_>,
    raw: &RawMapping,
    messages: &Messages,
    members: Option<&Members>,
    counter: &Counter,
    counters: &[Counter],
    evidence: &[super::types::Evidence],
) -> Vec<PredicateSite> {
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
            &members.and_then(|m| m.active.clone()),
        ),
        (&raw.counter, "counter.value", &counter.value),
        (&raw.counter, "counter.rows", &counter.rows),
        (&raw.counter, "counter.countable", &counter.countable),
        (&raw.counter, "counter.read", &counter.read),
    ] {
        if let Some(pred) = value {
            let span = loc.value_span(table, key.split('.').nth(1).unwrap_or(key));
            let (line, col) = line_col(loc.text, span.unwrap_or(table.span()).start);
            predicates.push(PredicateSite {
                key: key.to_string(),
                text: pred.clone(),
                at: format!("{}:{line}:{col}", loc.origin),
            });
        }
    }
    predicates.extend(super::readers::sites(loc, raw, messages));
    predicates.extend(super::counters::predicate_sites(loc, raw, counters));
    predicates.extend(evidence_predicates(loc, raw.evidence.as_slice(), evidence));
    predicates
}

/// Where each key's value was written (`origin:line:col` by dotted key: `messages.id`,
/// `evidence[2].column`, `counter[2].column`), for the database checks' messages.
fn key_locations(
    loc: &Locator<'_>,
    raw: &RawMapping,
) -> std::collections::BTreeMap<String, String> {
    let (text, origin) = (loc.text, loc.origin);
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
    for (i, t) in raw.counters.iter().enumerate().skip(1) {
        sections.push((format!("counter[{}]", i + 1), t));
    }
    let mut locations = std::collections::BTreeMap::new();
    for (name, table) in sections {
        for key in table.get_ref().keys() {
            let span = loc.value_span(table, key).unwrap_or(table.span());
            let (line, col) = line_col(text, span.start);
            locations.insert(format!("{name}.{key}"), format!("{origin}:{line}:{col}"));
        }
    }
    locations
}

/// Each evidence entry's predicates (`filter`, `read`) with where they were written, as
/// `evidence[N].<key>`.
fn evidence_predicates(
    loc: &Locator<'_>,
    tables: &[Spanned<toml::Table>],
    evidence: &[super::types::Evidence],
) -> Vec<PredicateSite> {
    let mut out = Vec::new();
    for (i, (e, table)) in evidence.iter().zip(tables).enumerate() {
        let src = e.source();
        for (key, text_of) in [
            ("filter", src.and_then(|s| s.filter.as_ref())),
            ("read", src.and_then(|s| s.read.as_ref())),
        ] {
            let Some(pred) = text_of else { continue };
            let span = loc.value_span(table, key);
            let (line, col) = line_col(loc.text, span.unwrap_or(table.span()).start);
            out.push(PredicateSite {
                key: format!("evidence[{}].{key}", i + 1),
                text: pred.clone(),
                at: format!("{}:{line}:{col}", loc.origin),
            });
        }
    }
    out
}

/// Lower-case hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
