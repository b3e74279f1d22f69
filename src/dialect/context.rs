//! A mapping's identifiers quoted for one dialect ([`SqlContext`]): what every statement
//! template sees (`sql/`, rendered by [`super::templates::render`]). Predicates from the mapping
//! are inserted verbatim: they are the DBA's SQL, validated in [`crate::mapping`].

use serde::Serialize;

use super::handle::Dialect;
use crate::mapping::{Combine, EvidenceKind, Mapping, RowRefs, Shape};

/// A mapping's identifiers, quoted for one dialect, as the templates see them.
#[derive(Debug, Clone, Serialize)]
pub struct SqlContext {
    /// `postgres`, `mysql` or `sqlite`.
    pub dialect: Dialect,
    /// `CAST(x AS {{ int }})` target.
    pub int: &'static str,
    /// `GREATEST` or `MAX`.
    pub greatest: &'static str,
    /// `MATERIALIZED` where the dialect accepts it on a CTE (an optimisation fence).
    pub materialized: &'static str,
    /// Messages table columns.
    pub msg: MsgIdents,
    /// Members table columns, if mapped.
    pub mem: Option<MemIdents>,
    /// Counter location.
    pub ctr: CtrIdents,
    /// Evidence sources, best first.
    pub evidence: Vec<EvIdents>,
    /// Watermark table.
    pub wm: String,
    /// Watermark table name unquoted (for index names).
    pub wm_name: String,
    /// Shape: `per_member` or `per_message`.
    pub shape: Shape,
}

/// Quoted `[messages]` identifiers and predicates.
#[derive(Debug, Clone, Serialize)]
pub struct MsgIdents {
    pub table: String,
    pub id: String,
    pub conv: String,
    pub sender: String,
    pub created_at: Option<String>,
    pub countable: Option<String>,
    pub legacy: Option<String>,
    /// The rows `countable` and `legacy_countable` read besides their own (`conv`).
    pub joins: Joins,
}

/// A quoted `[conversations]` / `[users]` table and its key.
#[derive(Debug, Clone, Serialize)]
pub struct RowIdents {
    pub table: String,
    pub key: String,
}

/// The rows a predicate or expression reads besides its own row `this`: each set only when
/// the text uses its name (`conv.`, `usr.`), so a template joins it only then (the macro
/// `own` of `sql/common/macros.sql`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Joins {
    /// `[conversations]`, joined as `conv` on the conversation key.
    pub conv: Option<RowIdents>,
    /// `[users]`, joined as `usr` on the user key.
    pub usr: Option<RowIdents>,
}

impl Joins {
    /// The rows `refs` names, quoted for `dialect`, from the mapping's `[conversations]` and
    /// `[users]` sections.
    pub fn new(mapping: &Mapping, dialect: Dialect, refs: RowRefs) -> Joins {
        let row = |k: &Option<crate::mapping::KeyedTable>| {
            k.as_ref().map(|k| RowIdents {
                table: dialect.quote(&k.table),
                key: dialect.quote(&k.key),
            })
        };
        Joins {
            conv: if refs.conv {
                row(&mapping.conversations)
            } else {
                None
            },
            usr: if refs.usr { row(&mapping.users) } else { None },
        }
    }
}

/// Quoted `[members]` identifiers and predicate.
#[derive(Debug, Clone, Serialize)]
pub struct MemIdents {
    pub table: String,
    pub user: String,
    pub conv: String,
    pub active: Option<String>,
    pub join: Option<String>,
    /// `join_time`, quoted: the join position is derived from it (macros.sql `join_pos`).
    pub join_time: Option<String>,
    /// The rows `active` reads besides its own (`conv`, `usr`).
    pub joins: Joins,
}

/// Quoted `[counter]` identifiers (user/conv empty for per_message).
#[derive(Debug, Clone, Serialize)]
pub struct CtrIdents {
    pub table: String,
    pub user: String,
    pub conv: String,
    /// The stored column, quoted; empty when the mapping gives `value` instead.
    pub column: String,
    /// The counter's value over its row `this`: `[counter] value`, or `this.<column>`.
    pub value: String,
    /// `[counter] rows`: which counter rows count (None: all).
    pub rows: Option<String>,
    /// `[counter] combine = "sum"`: a member's rows are summed.
    pub sum: bool,
    /// The rows `value` and `rows` read besides their own (`conv`, `usr`).
    pub joins: Joins,
}

/// One quoted `[[evidence]]` entry (`conv` empty for a timestamp keyed by the user alone).
#[derive(Debug, Clone, Serialize)]
pub struct EvIdents {
    pub kind: &'static str,
    pub table: String,
    pub user: String,
    pub conv: String,
    pub column: String,
    /// The row filter as written (over the evidence row `this`).
    pub filter: Option<String>,
    /// The position lookup, quoted.
    pub lookup: Option<LookupIdents>,
    /// The rows `filter` reads besides its own (`conv`, `usr`).
    pub joins: Joins,
}

/// A quoted evidence `lookup`: the key column's value is matched against `table.key`, whose
/// `position` is the read position.
#[derive(Debug, Clone, Serialize)]
pub struct LookupIdents {
    pub table: String,
    pub key: String,
    pub position: String,
    /// The lookup table's conversation column, when given.
    pub conv: Option<String>,
}

impl SqlContext {
    /// Quotes every identifier of `mapping` for `dialect`.
    pub fn new(mapping: &Mapping, dialect: Dialect) -> SqlContext {
        let q = |s: &str| dialect.quote(s);
        let oq = |s: &Option<String>| s.as_deref().map(q);
        let m = &mapping.messages;
        let ctr = &mapping.counter;
        SqlContext {
            dialect,
            int: dialect.int_cast(),
            greatest: dialect.greatest(),
            materialized: dialect.cte_materialized(),
            msg: MsgIdents {
                table: q(&m.table),
                id: q(&m.id),
                conv: q(&m.conversation),
                sender: q(&m.sender),
                created_at: oq(&m.created_at),
                countable: m.countable.clone(),
                legacy: m.legacy_countable.clone(),
                joins: Joins::new(
                    mapping,
                    dialect,
                    RowRefs::of(m.countable.as_deref())
                        .or(RowRefs::of(m.legacy_countable.as_deref())),
                ),
            },
            mem: mapping.members.as_ref().map(|mb| MemIdents {
                table: q(&mb.table),
                user: q(&mb.user),
                conv: q(&mb.conversation),
                active: mb.active.clone(),
                join: oq(&mb.join_position),
                join_time: oq(&mb.join_time),
                joins: Joins::new(mapping, dialect, RowRefs::of(mb.active.as_deref())),
            }),
            ctr: CtrIdents {
                table: q(mapping.counter_table()),
                user: ctr.user.as_deref().map(q).unwrap_or_default(),
                conv: ctr.conversation.as_deref().map(q).unwrap_or_default(),
                column: ctr.stored_column().map(q).unwrap_or_default(),
                value: ctr.value_sql(q),
                rows: ctr.rows.clone(),
                sum: ctr.combine == Some(Combine::Sum),
                joins: Joins::new(
                    mapping,
                    dialect,
                    RowRefs::of(ctr.value.as_deref()).or(RowRefs::of(ctr.rows.as_deref())),
                ),
            },
            evidence: mapping
                .evidence
                .iter()
                .map(|e| {
                    let src = e.source();
                    EvIdents {
                        kind: e.kind().as_str(),
                        table: src.map(|s| q(&s.table)).unwrap_or_default(),
                        user: src.map(|s| q(&s.user)).unwrap_or_default(),
                        conv: src
                            .and_then(|s| s.conversation.as_deref())
                            .map(q)
                            .unwrap_or_default(),
                        column: src.map(|s| q(&s.column)).unwrap_or_default(),
                        filter: src.and_then(|s| s.filter.clone()),
                        joins: Joins::new(
                            mapping,
                            dialect,
                            RowRefs::of(src.and_then(|s| s.filter.as_deref())),
                        ),
                        lookup: src.and_then(|s| s.lookup.as_ref()).map(|l| LookupIdents {
                            table: q(&l.table),
                            key: q(&l.key),
                            position: q(&l.position),
                            conv: l.conversation.as_deref().map(q),
                        }),
                    }
                })
                .collect(),
            wm: q(&mapping.watermarks.table),
            wm_name: mapping
                .watermarks
                .table
                .rsplit('.')
                .next()
                .unwrap_or_default()
                .to_string(),
            shape: mapping.counter.shape,
        }
    }

    /// Whether the mapping lists an evidence kind.
    pub fn has_evidence(&self, kind: EvidenceKind) -> bool {
        self.evidence.iter().any(|e| e.kind == kind.as_str())
    }
}
