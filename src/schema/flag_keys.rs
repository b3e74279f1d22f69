//! Which message a read flag names (issue 29 row 11, semantics.md "Shape C"): a flag row
//! belongs to the message it names and to that message's conversation only. A `read_flags`
//! counter or evidence entry that names the flag row's `conversation` column is joined to its
//! message on (conversation, position); one that does not is joined on the position alone,
//! which is right only where the position is unique across the messages table. Where
//! positions are per conversation (a `seq` numbering each conversation from 1), a flag on
//! message 1 of one conversation would otherwise count in every conversation that has a
//! message 1: phantom flags, phantom `orphan` rows, and a gate that never opens.

use anyhow::Result;
use sqlx::{AnyConnection, Row};

use crate::dialect::{render, Dialect, SqlContext};
use crate::error::input_error;
use crate::mapping::{Evidence, Mapping, Shape};

/// The mapping keys of the read flags that name their message by position alone: `counter`
/// for a `read_flags` counter without `conversation`, `evidence[N]` for such an evidence entry
/// (1-based, as the mapping's locations name them). Empty when every flag source names its
/// conversation or the mapping reads no flags.
pub fn unkeyed_flag_sources(mapping: &Mapping) -> Vec<String> {
    let mut out = Vec::new();
    if mapping.counter.shape == Shape::ReadFlags && mapping.counter.conversation.is_none() {
        out.push("counter".to_string());
    }
    for (i, e) in mapping.evidence.iter().enumerate() {
        if let Evidence::ReadFlags(src) = e {
            if src.conversation.is_none() {
                out.push(format!("evidence[{}]", i + 1));
            }
        }
    }
    out
}

/// Checks, before any stage reads flags, that read flags naming their message by position
/// alone ([`unkeyed_flag_sources`]) can: the messages' position (`[messages] id`) must be
/// unique across the messages table (one set-based query, `preflight_flag_messages.sql`).
/// Nothing to check (and no query) when every flag source names its `conversation`.
///
/// Errors: exit 2 (bad input, nothing written) when a position is found in more than one
/// conversation, naming the flag sources at fault, the messages column, how many positions
/// are shared and the smallest of them, and the fix (`conversation = "<the flag table's
/// conversation column>"`); exit 3 when the database fails.
pub async fn check(conn: &mut AnyConnection, mapping: &Mapping, dialect: Dialect) -> Result<()> {
    let unkeyed = unkeyed_flag_sources(mapping);
    if unkeyed.is_empty() {
        return Ok(());
    }
    let ctx = SqlContext::new(mapping, dialect);
    let sql = render("preflight_flag_messages.sql", &ctx, minijinja::context! {})?;
    let row = sqlx::query(&sql).fetch_one(&mut *conn).await?;
    let shared: i64 = row.try_get("shared")?;
    if shared == 0 {
        return Ok(());
    }
    let pos: i64 = row.try_get("pos")?;
    let convs: i64 = row.try_get("convs")?;
    let m = &mapping.messages;
    let sources: Vec<String> = unkeyed
        .iter()
        .map(|k| mapping.located(&format!("{k}.message")))
        .collect();
    Err(input_error(format!(
        "{}: the read flags name their message by {}.{} alone, but that position is unique only within a conversation: {shared} position(s) are found in several conversations (the smallest: {pos}, in up to {convs} conversations), so a flag row would count in every conversation with that position (semantics.md, \"Shape C\"); add conversation = \"<the flag table's conversation column>\" to each read_flags counter and evidence entry, or name a message column unique across {}",
        sources.join(", "),
        m.table,
        m.id,
        m.table,
    )))
}
