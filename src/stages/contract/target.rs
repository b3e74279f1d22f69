//! What the contract drops: its targets, read from the mapping. A mapping with a `[contract]`
//! section names them (columns on any mapped table, the counter table, or nothing); one
//! without names the counter column, which is then the contract's one target (with
//! `--drop-table`, its whole table). Each target is archived with the keys of its own table
//! ([`Keys`]).

use anyhow::Result;
use serde::Serialize;
use sqlx::AnyConnection;

use crate::dialect::{DropTarget, SqlContext};
use crate::error::input_error;
use crate::mapping::{ContractTargets, DropColumn, Mapping, Shape};
use crate::schema::{watermark_key_types, KeyKind};
use crate::stages::batch::BatchUnit;

/// Where the mapping names a target: what its messages name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The counter column (`[counter] column`), without a `[contract]` section.
    Counter,
    /// A `[contract]` section.
    Declared,
}

/// One thing the contract drops.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    /// The counter's shape.
    pub shape: Shape,
    /// The table holding the column (as the mapping names it).
    pub table: String,
    /// The column (with `drop_table`, the counter column the table holds; empty for the
    /// "nothing to drop" target of `drop = "nothing"`).
    pub column: String,
    /// The conversation key column of that table.
    pub conversation: String,
    /// The other key column: the user (per-member rows) or the message id (the messages
    /// table); empty for a table keyed by the conversation alone (`[conversations]`).
    pub subject: String,
    /// Whether the table holds nothing but the keys and the counter.
    pub table_of_its_own: bool,
    /// Whether the whole table is dropped (`--drop-table`, `drop = "table"`).
    pub drop_table: bool,
    /// Where the mapping names it.
    #[serde(skip)]
    pub origin: Origin,
}

impl Target {
    /// `column table.column`, or `table name` when the table is dropped.
    pub fn describe(&self) -> String {
        if self.drop_table {
            format!("table {}", self.table)
        } else {
            format!("column {}.{}", self.table, self.column)
        }
    }

    /// What the engine needs to know of the target to drop it.
    pub fn drop_target(&self) -> DropTarget {
        DropTarget {
            table: self.table.clone(),
            column: self.column.clone(),
            drop_table: self.drop_table,
        }
    }
}

/// The key columns of a target's rows, quoted, as the archive keys them: the conversation,
/// and the subject under the archive column `subject_col` (`user_id` or `message_id`; empty
/// for a table keyed by the conversation alone).
#[derive(Debug, Clone)]
pub struct Keys {
    /// The conversation key column, quoted.
    pub conv: String,
    /// The subject key column, quoted (empty: none).
    pub subject: String,
    /// The archive's column for the subject.
    pub subject_col: &'static str,
    /// What a batch of the archive counts.
    pub unit: BatchUnit,
    /// The conversation key's kind.
    pub conv_kind: KeyKind,
    /// The subject key's kind.
    pub subject_kind: KeyKind,
}

/// The targets of `mapping`: its `[contract]` section's, or the counter column (with
/// `drop_table`, its table).
///
/// Errors (exit 2): `drop = "table"` with a counter given as `value` (nothing stored to
/// archive).
pub fn targets_of(mapping: &Mapping, drop_table: bool) -> Result<Vec<Target>> {
    if mapping.contract.is_none() {
        // Each counter's column (issue 22: several counters, one table).
        return Ok(mapping
            .per_counter()
            .iter()
            .map(|view| counter_target(view, drop_table))
            .collect());
    }
    let shape = mapping.counter.shape;
    Ok(match mapping.contract_targets() {
        ContractTargets::Nothing => Vec::new(),
        ContractTargets::Table(table) => {
            let Some(column) = mapping.counter.stored_column() else {
                return Err(input_error(format!(
                    "[contract] drop = \"table\" with [counter] value: tidemark archives a stored column before it drops a table; list the columns the value reads (drop = \"columns\") or map the counter as column = \"…\" (table {table:?})"
                )));
            };
            vec![Target {
                shape,
                table,
                column: column.to_string(),
                conversation: mapping.counter.conversation.clone().unwrap_or_default(),
                subject: mapping.counter.user.clone().unwrap_or_default(),
                table_of_its_own: true,
                drop_table: true,
                origin: Origin::Declared,
            }]
        }
        ContractTargets::Columns(cols) => cols
            .iter()
            .map(|DropColumn { table, column }| {
                let (conversation, subject) = row_keys(mapping, table);
                Target {
                    shape,
                    table: table.clone(),
                    column: column.clone(),
                    conversation,
                    subject,
                    table_of_its_own: false,
                    drop_table: false,
                    origin: Origin::Declared,
                }
            })
            .collect(),
    })
}

/// The target a finished run records as its `target` and `status` reads: the first target,
/// or for `drop = "nothing"` the counter table without a column.
pub fn first_target(mapping: &Mapping) -> Target {
    targets_of(mapping, false)
        .ok()
        .and_then(|t| t.into_iter().next())
        .unwrap_or_else(|| {
            let mut t = counter_target(mapping, false);
            t.column = String::new();
            t.origin = Origin::Declared;
            t
        })
}

/// The counter column of a mapping without a `[contract]` section.
fn counter_target(mapping: &Mapping, drop_table: bool) -> Target {
    let (conversation, subject) = match mapping.counter.shape {
        Shape::PerMember => (
            mapping.counter.conversation.clone().unwrap_or_default(),
            mapping.counter.user.clone().unwrap_or_default(),
        ),
        Shape::PerMessage => (
            mapping.messages.conversation.clone(),
            mapping.messages.id.clone(),
        ),
        // The flag rows' conversation is the message's (only named: drop = "nothing").
        Shape::ReadFlags => (
            mapping.messages.conversation.clone(),
            mapping.counter.user.clone().unwrap_or_default(),
        ),
    };
    Target {
        shape: mapping.counter.shape,
        table: mapping.counter_table().to_string(),
        column: mapping.counter.column.clone(),
        conversation,
        subject,
        table_of_its_own: false,
        drop_table,
        origin: Origin::Counter,
    }
}

/// The key columns of a mapped table's rows (unquoted): (conversation, subject), the subject
/// empty for the `[conversations]` table.
fn row_keys(mapping: &Mapping, table: &str) -> (String, String) {
    let c = &mapping.counter;
    if mapping.counter_table() == table && c.shape == Shape::PerMember {
        return (
            c.conversation.clone().unwrap_or_default(),
            c.user.clone().unwrap_or_default(),
        );
    }
    if let Some(m) = mapping.members.as_ref().filter(|m| m.table == table) {
        return (m.conversation.clone(), m.user.clone());
    }
    if let Some(k) = mapping.conversations.as_ref().filter(|k| k.table == table) {
        return (k.key.clone(), String::new());
    }
    (
        mapping.messages.conversation.clone(),
        mapping.messages.id.clone(),
    )
}

/// The archive keys of a target and the SQL context whose counter is the target (the archive
/// templates read `ctr.table`, `ctr.column`, `ctr.conv`, `ctr.user`).
///
/// Errors (exit 2): a key column that does not exist or has an unusable type.
pub async fn keys_of(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    ctx: &SqlContext,
    t: &Target,
) -> Result<(Keys, SqlContext)> {
    let (user, conv) = watermark_key_types(conn, mapping, ctx).await?;
    let d = ctx.dialect;
    let on_messages =
        t.table == mapping.messages.table && t.subject == mapping.messages.id && !t.drop_table;
    let keys = Keys {
        conv: d.quote(&t.conversation),
        subject: if t.subject.is_empty() {
            String::new()
        } else {
            d.quote(&t.subject)
        },
        subject_col: if on_messages { "message_id" } else { "user_id" },
        unit: BatchUnit::Counters,
        conv_kind: conv.kind,
        subject_kind: if on_messages {
            KeyKind::Integer
        } else {
            user.kind
        },
    };
    let mut tctx = ctx.clone();
    tctx.ctr.table = d.quote(&t.table);
    tctx.ctr.column = d.quote(&t.column);
    tctx.ctr.conv = keys.conv.clone();
    tctx.ctr.user = keys.subject.clone();
    // How the target table's keys are compared (issue 25: as they are unless the key columns'
    // collations differ).
    tctx.ctr.conv_k = ctx.compare_of(&t.table, &t.conversation);
    tctx.ctr.user_k = ctx.compare_of(&t.table, &t.subject);
    Ok((keys, tctx))
}
