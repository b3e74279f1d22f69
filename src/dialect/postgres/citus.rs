//! Citus, PostgreSQL's extension that spreads tables over worker nodes ([`Distribution`],
//! issue 21). A chat database on Citus distributes its tables by conversation and colocates
//! them (the rows of one conversation, in every table, on one node). tidemark's statements
//! join its own tables with the chat tables by conversation, so `expand` places them alike:
//! the watermark table distributed by `conversation_id` and colocated with the chat table
//! (`create_distributed_table(…, colocate_with => …)`), and the counter archive a reference
//! table (a copy on every node: the contract's row-by-row check, a LEFT JOIN of the counter
//! table with the archive, then runs on each node; a distributed archive would need a primary
//! key holding the conversation, which migration V3's `id` key is not).
//!
//! What Citus knows is read from its catalog: `pg_extension` (is Citus installed),
//! `pg_dist_partition` (how a table is spread: `partmethod` `h` for hash-distributed, `n` for a
//! reference or local table; the distribution column by `column_to_column_name`).

use anyhow::Result;
use sqlx::{AnyConnection, Row};

use super::Postgres;
use crate::dialect::traits::{Distribution, Spelling};
use crate::dialect::types::{BoxFuture, Colocation};
use crate::error::input_error;
use crate::values::text;

/// How Citus holds a table.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Placement {
    /// Not in Citus's metadata: a table of the coordinator alone.
    Local,
    /// Hash-distributed by this column, in this colocation group.
    Distributed { column: String, group: i64 },
    /// A reference table (a copy on every node) or a Citus local table.
    Replicated,
}

/// Whether the Citus extension is installed in this database.
async fn has_citus(conn: &mut AnyConnection) -> Result<bool> {
    let n: i64 = sqlx::query_scalar(
        "SELECT CAST(COUNT(*) AS BIGINT) FROM pg_extension WHERE extname = 'citus'",
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(n > 0)
}

/// How Citus holds `table` (unquoted, maybe `schema.name`); a table that does not exist yet
/// is [`Placement::Local`].
async fn placement(conn: &mut AnyConnection, table: &str) -> Result<Placement> {
    let row = sqlx::query(
        "SELECT CAST(p.partmethod AS TEXT) AS method, \
                CAST(column_to_column_name(p.logicalrelid, p.partkey) AS TEXT) AS col, \
                CAST(p.colocationid AS BIGINT) AS grp \
         FROM pg_dist_partition p WHERE p.logicalrelid = to_regclass($1)",
    )
    .bind(Postgres.quote(table))
    .fetch_optional(&mut *conn)
    .await?;
    let Some(row) = row else {
        return Ok(Placement::Local);
    };
    Ok(match text(&row, "method")?.as_deref() {
        Some("h") => Placement::Distributed {
            column: text(&row, "col")?.unwrap_or_default(),
            group: row.try_get("grp")?,
        },
        _ => Placement::Replicated,
    })
}

/// The first chat table of `plan` that is hash-distributed by its conversation column, with
/// its colocation group; or, when none is but one is distributed by another column, that
/// table and its column (tidemark's tables cannot follow it: `Err`).
async fn anchor(
    conn: &mut AnyConnection,
    plan: &Colocation,
) -> Result<Option<std::result::Result<(String, i64), (String, String)>>> {
    let mut other = None;
    for (table, conv) in &plan.chat {
        match placement(conn, table).await? {
            Placement::Distributed { column, group } if &column == conv => {
                return Ok(Some(Ok((table.clone(), group))));
            }
            Placement::Distributed { column, .. } if other.is_none() => {
                other = Some((table.clone(), column));
            }
            _ => {}
        }
    }
    Ok(other.map(Err))
}

impl Distribution for Postgres {
    fn colocate<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        plan: &'a Colocation,
        dry_run: bool,
    ) -> BoxFuture<'a, Result<Vec<String>>> {
        Box::pin(async move {
            if !has_citus(conn).await? {
                return Ok(Vec::new());
            }
            let (chat, group) = match anchor(conn, plan).await? {
                None => return Ok(Vec::new()),
                Some(Err((table, column))) => {
                    return Ok(vec![format!(
                        "Citus: {table} is distributed by {column}, not by its conversation column: {} and {} stay on the coordinator, and each batch pulls the rows it joins there",
                        plan.watermarks, plan.archive
                    )])
                }
                Some(Ok(found)) => found,
            };
            let mut said = Vec::new();
            let wm = &plan.watermarks;
            match placement(conn, wm).await? {
                Placement::Distributed { column, group: g } if column == "conversation_id" && g == group => {
                    said.push(format!("Citus: {wm} is distributed by conversation_id, colocated with {chat}"));
                }
                Placement::Local => {
                    if !dry_run {
                        sqlx::query("SELECT create_distributed_table($1, 'conversation_id', colocate_with => $2)")
                            .bind(self.quote(wm))
                            .bind(self.quote(&chat))
                            .execute(&mut *conn)
                            .await
                            .map_err(|e| colocate_error(e, wm, &chat))?;
                    }
                    let verb = if dry_run { "would distribute" } else { "distributed" };
                    said.push(format!("Citus: {verb} {wm} by conversation_id, colocated with {chat} (each conversation's watermarks on the node of its messages)"));
                }
                other => said.push(format!(
                    "Citus: {wm} is {}, not colocated with {chat}: each batch pulls the rows it joins to the coordinator (undistribute it with undistribute_table and run expand again)",
                    match other {
                        Placement::Replicated => "a reference or local table".to_string(),
                        Placement::Distributed { column, .. } => format!("distributed by {column} in another colocation group"),
                        Placement::Local => unreachable!(),
                    }
                )),
            }
            let archive = &plan.archive;
            match placement(conn, archive).await? {
                Placement::Local => {
                    if !dry_run {
                        sqlx::query("SELECT create_reference_table($1)")
                            .bind(self.quote(archive))
                            .execute(&mut *conn)
                            .await?;
                    }
                    let verb = if dry_run { "would make" } else { "made" };
                    said.push(format!("Citus: {verb} {archive} a reference table (a copy on every node, so the contract's checks run where the counters are)"));
                }
                _ => said.push(format!(
                    "Citus: {archive} is distributed or a reference table already"
                )),
            }
            Ok(said)
        })
    }
}

/// `create_distributed_table`'s refusal in words: the usual cause is a conversation column
/// whose type differs from the chat table's (exit 2); any other failure is the database's.
fn colocate_error(e: sqlx::Error, wm: &str, chat: &str) -> anyhow::Error {
    let message = e.to_string();
    if message.contains("colocate") || message.contains("type") {
        input_error(format!(
            "Citus refused to colocate {wm} with {chat} by conversation_id: {message}"
        ))
    } else {
        e.into()
    }
}
