//! `tidemark inspect`: reads the catalog of a database tidemark has never seen and proposes a
//! mapping file (issue 10), with a comment on each choice and on each alternative it saw, and
//! warnings, with counts and the statement that fixes them, about what would make the audit
//! slow or wrong: a missing `(conversation, position)` index, a position or counter that is not
//! an integer, message ids whose order disagrees with their creation times (seed 000 §4: id
//! order is not commit order), a counter table with several rows per member.
//!
//! Reads only. The stages: [`catalog`] (the dialect's catalog queries), [`propose`] (the choice,
//! pure, by the names in [`names`]), [`checks`] (the queries over the data behind the
//! warnings), [`render`] (the TOML text); [`indexes`] the indexes a mapping's stages read by
//! (what `plan` lists); [`known`] the known systems (Mattermost, Synapse, Dendrite, Discourse,
//! Zulip), recognised by their tables and columns, whose mapping in `contrib/mappings/` is
//! proposed as it is.
//! Nothing here prints: [`run`] returns an [`InspectOutcome`].

use anyhow::Result;
use sqlx::AnyConnection;

use crate::dialect::Dialect;

pub mod catalog;
pub mod checks;
mod columns;
pub mod indexes;
pub mod known;
mod lookup;
mod messages;
pub mod names;
mod proposal;
pub mod propose;
pub mod render;
mod structure;
mod warning;

pub use catalog::{Catalog, TypeClass};
pub use propose::{Facts, Proposal};
pub use warning::Warning;

/// What `inspect` found.
#[derive(Debug, Clone)]
pub struct InspectOutcome {
    /// The proposed mapping file, comments included. When [`InspectOutcome::missing`] is not
    /// empty, it lacks the sections named there and does not parse as it is.
    pub text: String,
    /// The choices and the alternatives seen.
    pub proposal: Proposal,
    /// The warnings, also written at the top of [`InspectOutcome::text`].
    pub warnings: Vec<Warning>,
    /// What a complete mapping lacks (empty: the mapping is complete).
    pub missing: Vec<String>,
    /// Tables and views read.
    pub tables: usize,
    /// The known system recognised ([`known`]), whose mapping is the proposal; None when the
    /// proposal is inspect's own.
    pub known: Option<&'static str>,
}

impl InspectOutcome {
    /// Whether the proposal is a complete mapping (exit 0) or not (exit 1).
    pub fn complete(&self) -> bool {
        self.missing.is_empty()
    }
}

/// Reads the catalog of the connection's database, chooses a mapping, and checks the data
/// behind the warnings. Reads only.
///
/// Errors (exit 3): a catalog or data query fails.
///
/// With `explain`, the proposal's header holds the full reasoning: every candidate seen, why
/// it won or lost, and the figures measured.
pub async fn run(
    conn: &mut AnyConnection,
    dialect: Dialect,
    explain: bool,
) -> Result<InspectOutcome> {
    let catalog = catalog::read(conn, dialect).await?;
    // A known system's schema: its mapping from contrib/mappings/, as it is (issue 32).
    let matches = known::compare(&catalog);
    if let Some(m) = known::recognise(&matches) {
        let warnings = known::warnings(m, &catalog, dialect);
        return Ok(InspectOutcome {
            text: known::render(m, &matches, &warnings, &catalog, dialect, explain),
            proposal: Proposal::default(),
            warnings,
            missing: Vec::new(),
            tables: catalog.tables.len(),
            known: Some(m.system.name),
        });
    }
    // A first choice, by structure and names, names the messages table and the evidence; the
    // data measured against them (issue 24) decides the final one.
    let first = propose::propose(&catalog, &Facts::default(), dialect);
    let facts = checks::facts(conn, dialect, &catalog, &first).await?;
    let mut proposal = propose::propose(&catalog, &facts, dialect);
    proposal.explain.extend(facts.failed.iter().cloned());
    // The known systems it resembles, and what they lack (never a partial recognition).
    proposal.explain.extend(
        matches
            .iter()
            .filter(|m| !m.found.is_empty())
            .map(known::Match::explain),
    );
    let warnings = checks::warnings(conn, dialect, &catalog, &proposal).await?;
    let text = render::render(&proposal, &warnings, &catalog, dialect, explain);
    Ok(InspectOutcome {
        text,
        missing: proposal.missing.clone(),
        proposal,
        warnings,
        tables: catalog.tables.len(),
        known: None,
    })
}

#[cfg(test)]
mod tests;
