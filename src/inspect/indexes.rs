//! The indexes a mapping's stages read by (issue 11: "the indexes the mapping needs named in
//! the docs and by `plan`"), and whether the database has them.
//!
//! Every stage works in batches of whole conversations, so each table it reads must be
//! reachable by an index range that starts with the conversation column; without one each
//! batch scans the whole table and a run grows with the square of the table. [`needed`] lists
//! them for a mapping (pure); [`check`] finds each in the catalog ([`super::catalog`]) and,
//! where none serves, the `CREATE INDEX` that would. Reads only.

use anyhow::Result;
use sqlx::AnyConnection;

use super::catalog::{self, Catalog, Index};
use crate::dialect::Dialect;
use crate::mapping::{Evidence, Mapping, Shape};

/// An index a stage reads by: a table, the leading key columns it needs in that order, and
/// why (the stage and the read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexNeed {
    /// The table as the mapping names it (`schema.table` allowed).
    pub table: String,
    /// The leading key columns, in order.
    pub columns: Vec<String>,
    /// What reads by it, in words.
    pub why: &'static str,
}

/// What the catalog holds for one [`IndexNeed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexStatus {
    /// An index (named) whose key starts with the columns and that covers every row.
    Present(String),
    /// An index (named) whose key starts with the first `leading` columns only (the
    /// conversation at least): the batches' conversation range is served, but within a batch
    /// each conversation's rows are all read to find the rest; the statement that creates the
    /// whole index.
    Partial {
        /// The index found.
        index: String,
        /// How many of the needed columns its key starts with.
        leading: usize,
        /// The statement that creates an index serving them all.
        create: String,
    },
    /// None serves: the statement that creates one.
    Missing(String),
    /// The table is a view: the index belongs on the table under it, which `plan` cannot see.
    View,
    /// The table is not in the catalog (expand or the mapping check say more).
    NoTable,
}

/// One need with what the catalog holds for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexCheck {
    /// The need.
    pub need: IndexNeed,
    /// What the catalog holds.
    pub status: IndexStatus,
}

/// The indexes the stages of `mapping` read by, in stage order, each (table, columns) once.
pub fn needed(mapping: &Mapping) -> Vec<IndexNeed> {
    let msg = &mapping.messages;
    let mut out: Vec<IndexNeed> = Vec::new();
    let mut add = |table: &str, columns: &[&str], why: &'static str| {
        let need = IndexNeed {
            table: table.to_string(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            why,
        };
        if !out
            .iter()
            .any(|n| n.table == need.table && n.columns == need.columns)
        {
            out.push(need);
        }
    };
    add(
        &msg.table,
        &[&msg.conversation, &msg.id],
        "the audit's one pass (and the backfill's counter rank) reads each conversation's messages by position",
    );
    if mapping.counter.shape == Shape::PerMember {
        if let (Some(table), Some(conv), Some(user)) = (
            mapping.counter.table.as_deref(),
            mapping.counter.conversation.as_deref(),
            mapping.counter.user.as_deref(),
        ) {
            add(
                table,
                &[conv, user],
                "the audit reads each batch's counter rows by conversation range",
            );
        }
    }
    if let Some(mem) = &mapping.members {
        add(
            &mem.table,
            &[&mem.conversation, &mem.user],
            "the backfill and the audit read each batch's members by conversation range",
        );
    }
    for e in &mapping.evidence {
        match e {
            Evidence::Position(s) | Evidence::Timestamp(s) => {
                match s.conversation.as_deref() {
                    Some(conv) => add(
                        &s.table,
                        &[conv, &s.user],
                        "the backfill reads this evidence by conversation range",
                    ),
                    None => add(
                        &s.table,
                        &[&s.user],
                        "the backfill reads this per-user evidence by user",
                    ),
                }
                if let Some(l) = &s.lookup {
                    add(
                        &l.table,
                        &[&l.key],
                        "the evidence lookup resolves each value by its key",
                    );
                }
                if matches!(e, Evidence::Timestamp(_)) {
                    if let Some(created) = msg.created_at.as_deref() {
                        add(
                            &msg.table,
                            &[&msg.conversation, created],
                            "timestamp evidence finds the newest message created at or before a time",
                        );
                    }
                }
            }
            Evidence::ReadFlags(s) => add(
                &s.table,
                &[&s.column],
                "the backfill joins each message of a batch to its read flags by message",
            ),
            Evidence::OwnMessage => add(
                &msg.table,
                &[&msg.conversation, &msg.sender, &msg.id],
                "own-message evidence finds each member's newest message",
            ),
            Evidence::Counter => {}
        }
    }
    for keyed in [&mapping.conversations, &mapping.users]
        .into_iter()
        .flatten()
    {
        add(
            &keyed.table,
            &[&keyed.key],
            "predicates that read `conv.` / `usr.` join this table by its key",
        );
    }
    out
}

/// Whether `index` serves `columns`: every row (not partial), its key starting with them in
/// order (compared case-insensitively, as MySQL and SQLite compare column names).
fn serves(index: &Index, columns: &[String]) -> bool {
    !index.partial
        && columns.len() <= index.columns.len()
        && columns.iter().zip(&index.columns).all(|(want, have)| {
            have.as_deref()
                .is_some_and(|h| h.eq_ignore_ascii_case(want))
        })
}

/// What `catalog` holds for each of `needs`: an index that serves every needed column, else
/// the one that serves the longest leading part (at least the first column, the
/// conversation), else none.
pub fn check_in(catalog: &Catalog, dialect: Dialect, needs: Vec<IndexNeed>) -> Vec<IndexCheck> {
    needs
        .into_iter()
        .map(|need| {
            let status = match catalog.tables.iter().find(|t| t.name == need.table) {
                None => IndexStatus::NoTable,
                Some(t) if t.is_view => IndexStatus::View,
                Some(t) => {
                    let create = format!(
                        "CREATE INDEX {} ON {} ({});",
                        dialect.index_name(
                            t.schema.as_deref(),
                            &format!("{}_{}", t.bare, need.columns.join("_"))
                        ),
                        dialect.quote(&need.table),
                        need.columns
                            .iter()
                            .map(|c| dialect.quote(c))
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                    let best = (1..need.columns.len()).rev().find_map(|k| {
                        t.indexes
                            .iter()
                            .find(|i| serves(i, &need.columns[..k]))
                            .map(|i| (i, k))
                    });
                    match (t.indexes.iter().find(|i| serves(i, &need.columns)), best) {
                        (Some(i), _) => IndexStatus::Present(i.name.clone()),
                        (None, Some((i, leading))) => IndexStatus::Partial {
                            index: i.name.clone(),
                            leading,
                            create,
                        },
                        (None, None) => IndexStatus::Missing(create),
                    }
                }
            };
            IndexCheck { need, status }
        })
        .collect()
}

/// Reads the catalog and checks every index the stages of `mapping` read by.
///
/// Errors (exit 3): a catalog query fails.
pub async fn check(
    conn: &mut AnyConnection,
    dialect: Dialect,
    mapping: &Mapping,
) -> Result<Vec<IndexCheck>> {
    let catalog = catalog::read(conn, dialect).await?;
    Ok(check_in(&catalog, dialect, needed(mapping)))
}
