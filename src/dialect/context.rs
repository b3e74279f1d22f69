//! A mapping's identifiers quoted for one dialect ([`SqlContext`]): what every statement
//! template sees (`sql/`, rendered by [`super::templates::render`]). Predicates from the mapping
//! are inserted verbatim: they are the DBA's SQL, validated in [`crate::mapping`].

use serde::Serialize;
use std::collections::BTreeMap;

use super::collation::KeyCompare;
use super::handle::Dialect;
use crate::mapping::{Combine, EvidenceKind, EvidencePolicy, Mapping, RowRefs, Shape};

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
    /// Shape: `per_member`, `per_message` or `read_flags`.
    pub shape: Shape,
    /// The shape as flags, for templates (`shape_is.read_flags`): exactly one is true.
    pub shape_is: ShapeFlags,
    /// Which evidence kinds the mapping lists (`kinds.counter`: at least one counter entry).
    pub kinds: KindFlags,
    /// The evidence policy is `highest` (else `first`: semantics.md "Backfill").
    pub highest: bool,
    /// Whether batches are lists of conversation keys rather than ranges, because the key
    /// columns' collations differ (issue 25, [`SqlContext::with_key_compare`]).
    pub keyed: bool,
    /// How the watermark table's `conversation_id` is compared (also the archive's, which
    /// `expand` gives the same key types).
    pub wm_conv_k: KeyCompare,
    /// How the watermark table's `user_id` is compared (also the archive's).
    pub wm_user_k: KeyCompare,
    /// Every key column's comparison by (table, column) as the mapping names them, for the
    /// contract's targets ([`SqlContext::compare_of`]).
    #[serde(skip)]
    compares: BTreeMap<(String, String), KeyCompare>,
}

/// A shape as flags, so that templates test a boolean rather than match a spelling
/// ([`SqlContext::shape_is`]; issue 30, "SQL a DBA can read").
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ShapeFlags {
    /// Shape A, one counter per member.
    pub per_member: bool,
    /// Shape B, one counter per message.
    pub per_message: bool,
    /// Shape C, read flags per (member, message).
    pub read_flags: bool,
}

impl ShapeFlags {
    /// The flags of `shape`.
    pub fn of(shape: Shape) -> ShapeFlags {
        ShapeFlags {
            per_member: shape == Shape::PerMember,
            per_message: shape == Shape::PerMessage,
            read_flags: shape == Shape::ReadFlags,
        }
    }
}

/// Evidence kinds as flags ([`EvidenceKind`]): for one entry ([`EvIdents::is`]) exactly one is
/// true; for a mapping ([`SqlContext::kinds`]) each says whether it lists that kind.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct KindFlags {
    /// `position`.
    pub position: bool,
    /// `timestamp`.
    pub timestamp: bool,
    /// `counter`.
    pub counter: bool,
    /// `own_message`.
    pub own_message: bool,
    /// `read_flags`.
    pub read_flags: bool,
}

impl KindFlags {
    /// The flags of one kind.
    pub fn of(kind: EvidenceKind) -> KindFlags {
        KindFlags {
            position: kind == EvidenceKind::Position,
            timestamp: kind == EvidenceKind::Timestamp,
            counter: kind == EvidenceKind::Counter,
            own_message: kind == EvidenceKind::OwnMessage,
            read_flags: kind == EvidenceKind::ReadFlags,
        }
    }

    /// The union of `self` and `other`.
    fn or(self, other: KindFlags) -> KindFlags {
        KindFlags {
            position: self.position || other.position,
            timestamp: self.timestamp || other.timestamp,
            counter: self.counter || other.counter,
            own_message: self.own_message || other.own_message,
            read_flags: self.read_flags || other.read_flags,
        }
    }
}

/// Quoted `[messages]` identifiers and predicates.
#[derive(Debug, Clone, Serialize)]
pub struct MsgIdents {
    pub table: String,
    pub id: String,
    pub conv: String,
    pub sender: String,
    pub created_at: Option<String>,
    /// How a message time is read where it is compared with another time (issue 29 row 3):
    /// a pattern over `{v}` ([`crate::dialect::Spelling::time_value`]).
    pub time: &'static str,
    pub countable: Option<String>,
    pub legacy: Option<String>,
    /// `restricted` (issue 22): the messages only the readers `mem.readers` admits count.
    pub restricted: Option<String>,
    /// `recipient` (issue 22): the user key of the one reader an addressed message counts for.
    pub recipient: Option<String>,
    /// The rows `countable`, `legacy_countable`, `restricted` and `recipient` read besides
    /// their own (`conv`).
    pub joins: Joins,
    /// How `conv` is compared ([`KeyCompare`]).
    pub conv_k: KeyCompare,
    /// How `sender` is compared.
    pub sender_k: KeyCompare,
}

/// A quoted `[conversations]` / `[users]` table and its key.
#[derive(Debug, Clone, Serialize)]
pub struct RowIdents {
    pub table: String,
    pub key: String,
    /// How `key` is compared.
    pub key_k: KeyCompare,
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
                key_k: KeyCompare::default(),
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
    /// `[messages] restricted_readers` (issue 22), over the members row: the readers a
    /// restricted message counts for.
    pub readers: Option<String>,
    /// The rows `active` and `readers` read besides their own (`conv`, `usr`).
    pub joins: Joins,
    /// How `conv` is compared.
    pub conv_k: KeyCompare,
    /// How `user` is compared.
    pub user_k: KeyCompare,
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
    /// How `conv` is compared.
    pub conv_k: KeyCompare,
    /// How `user` is compared.
    pub user_k: KeyCompare,
    /// A mention counter's mentions table (issue 22), quoted; None for an unread counter.
    pub mentions: Option<MentionIdents>,
    /// Shape `read_flags`: the derived table's message position and unread (1 or 0)
    /// columns, quoted (empty for the other shapes).
    pub pos: String,
    /// See `pos`.
    pub unread: String,
}

/// A quoted `mentions` table of a mention counter: `message` matches the messages column
/// `key` (`messages.id` unless the mapping names another), `user` is the mentioned user.
/// With `[counter] mentioned` (issue 29 row 16) the table's fields are empty and `predicate`
/// is the mention predicate over the message `this` and the reader's user row `usr`, the
/// readers being `readers` (`[members]`, else the counter table) with its `readers_user` and
/// `readers_conv` columns, and `usr` the `[users]` row joined when the predicate reads it.
#[derive(Debug, Clone, Serialize)]
pub struct MentionIdents {
    pub table: String,
    pub message: String,
    pub user: String,
    pub key: String,
    pub predicate: Option<String>,
    pub readers: String,
    pub readers_user: String,
    pub readers_conv: String,
    pub usr: Option<RowIdents>,
}

/// One quoted `[[evidence]]` entry (`conv` empty for a timestamp keyed by the user alone).
#[derive(Debug, Clone, Serialize)]
pub struct EvIdents {
    /// The kind's name ([`EvidenceKind::as_str`]): the provenance a backfill records.
    pub kind: &'static str,
    /// The kind as flags (`e.is.timestamp`).
    pub is: KindFlags,
    /// Whether the policy `highest` compares this entry's values with the others' (a
    /// position, a timestamp or read flags; a counter only wins when none of them has a value,
    /// an own message only raises the choice: semantics.md "Backfill").
    pub ranked: bool,
    /// Whether the settle guard can hold this entry's value back (every kind but `position`,
    /// the application's own record: semantics.md "Backfill", settle time).
    pub holds: bool,
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
    /// How `conv` is compared.
    pub conv_k: KeyCompare,
    /// How `user` is compared.
    pub user_k: KeyCompare,
    /// `read_flags`: the predicate over the flag row `this` that says read (`column` is then
    /// the flag row's message).
    pub read: Option<String>,
    /// `timestamp`: how the evidence time is read (a pattern over `{v}`, NULL for a value
    /// that is no time: issue 29 rows 3 and 5; [`crate::dialect::Spelling::time_value`]).
    pub time: &'static str,
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
    /// How `conv` is compared.
    pub conv_k: KeyCompare,
}

/// The mention counter's [`MentionIdents`] (a mentions table, or the `mentioned` predicate
/// over the readers of `[members]`, else of the counter table), None for another counter.
fn mention_idents(mapping: &Mapping, dialect: Dialect) -> Option<MentionIdents> {
    let q = |s: &str| dialect.quote(s);
    let ctr = &mapping.counter;
    if let Some(mn) = &ctr.mentions {
        return Some(MentionIdents {
            table: q(&mn.table),
            message: q(&mn.message),
            user: q(&mn.user),
            key: q(mn.key.as_deref().unwrap_or(&mapping.messages.id)),
            predicate: None,
            readers: String::new(),
            readers_user: String::new(),
            readers_conv: String::new(),
            usr: None,
        });
    }
    let pred = ctr.mentioned.as_ref()?;
    let (table, user, conv) = match &mapping.members {
        Some(mb) => (
            mb.table.as_str(),
            mb.user.as_str(),
            mb.conversation.as_str(),
        ),
        None => (
            mapping.counter_table(),
            ctr.user.as_deref().unwrap_or_default(),
            ctr.conversation.as_deref().unwrap_or_default(),
        ),
    };
    Some(MentionIdents {
        table: String::new(),
        message: String::new(),
        user: String::new(),
        key: String::new(),
        predicate: Some(pred.clone()),
        readers: q(table),
        readers_user: q(user),
        readers_conv: q(conv),
        usr: Joins::new(mapping, dialect, RowRefs::of(Some(pred))).usr,
    })
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
                time: dialect.time_value(false),
                countable: m.countable.clone(),
                legacy: m.legacy_countable.clone(),
                restricted: m.restricted.clone(),
                recipient: m.recipient.clone(),
                joins: Joins::new(
                    mapping,
                    dialect,
                    RowRefs::of(m.countable.as_deref())
                        .or(RowRefs::of(m.legacy_countable.as_deref()))
                        .or(RowRefs::of(m.restricted.as_deref()))
                        .or(RowRefs::of(m.recipient.as_deref())),
                ),
                conv_k: KeyCompare::default(),
                sender_k: KeyCompare::default(),
            },
            mem: mapping.members.as_ref().map(|mb| MemIdents {
                table: q(&mb.table),
                user: q(&mb.user),
                conv: q(&mb.conversation),
                active: mb.active.clone(),
                join: oq(&mb.join_position),
                join_time: oq(&mb.join_time),
                readers: m.restricted_readers.clone(),
                joins: Joins::new(
                    mapping,
                    dialect,
                    RowRefs::of(mb.active.as_deref())
                        .or(RowRefs::of(m.restricted_readers.as_deref())),
                ),
                conv_k: KeyCompare::default(),
                user_k: KeyCompare::default(),
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
                conv_k: KeyCompare::default(),
                user_k: KeyCompare::default(),
                mentions: mention_idents(mapping, dialect),
                pos: String::new(),
                unread: String::new(),
            },
            evidence: mapping
                .evidence
                .iter()
                .map(|e| {
                    let src = e.source();
                    let kind = e.kind();
                    EvIdents {
                        kind: kind.as_str(),
                        is: KindFlags::of(kind),
                        ranked: matches!(
                            kind,
                            EvidenceKind::Position
                                | EvidenceKind::Timestamp
                                | EvidenceKind::ReadFlags
                        ),
                        holds: kind != EvidenceKind::Position,
                        table: src.map(|s| q(&s.table)).unwrap_or_default(),
                        user: src.map(|s| q(&s.user)).unwrap_or_default(),
                        conv: src
                            .and_then(|s| s.conversation.as_deref())
                            .map(q)
                            .unwrap_or_default(),
                        column: src.map(|s| q(&s.column)).unwrap_or_default(),
                        time: dialect.time_value(true),
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
                            conv_k: KeyCompare::default(),
                        }),
                        conv_k: KeyCompare::default(),
                        user_k: KeyCompare::default(),
                        read: src.and_then(|s| s.read.clone()),
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
            shape_is: ShapeFlags::of(mapping.counter.shape),
            kinds: mapping
                .evidence
                .iter()
                .fold(KindFlags::default(), |k, e| k.or(KindFlags::of(e.kind()))),
            highest: mapping.policy == EvidencePolicy::Highest,
            keyed: false,
            wm_conv_k: KeyCompare::default(),
            wm_user_k: KeyCompare::default(),
            compares: BTreeMap::new(),
        }
        .with_read_flags(mapping, dialect)
    }

    /// Shape `read_flags` (semantics.md "Shape C"): the counter is read as a derived table of
    /// the flag rows (`[counter] rows` kept), each joined to its message for the conversation,
    /// with the columns `tm_conv`, `tm_usr`, `tm_pos` (the message's position) and
    /// `tm_unread` (1 unless `read` is true), summed per member: every template that reads
    /// the counter (`counter_rows`, the batch bounds) reads the number of unread flags. The
    /// flag row is `this` inside it, as `read` and `rows` see it. With `[counter]
    /// conversation` (issue 29 row 11) the flag row joins its message on the conversation
    /// too, so that a position unique only within a conversation names one message (without
    /// it the preflight requires the position unique across the messages table:
    /// `crate::schema::flag_keys`). Other shapes unchanged.
    fn with_read_flags(mut self, mapping: &Mapping, dialect: Dialect) -> SqlContext {
        let c = &mapping.counter;
        let (Shape::ReadFlags, Some(user), Some(message), Some(read)) =
            (c.shape, &c.user, &c.message, &c.read)
        else {
            return self;
        };
        let q = |s: &str| dialect.quote(s);
        let rows = c
            .rows
            .as_deref()
            .map(|r| format!(" AND ({r})"))
            .unwrap_or_default();
        let same_conv = c
            .conversation
            .as_deref()
            .map(|fc| format!(" AND tm_fm.{} = this.{}", self.msg.conv, q(fc)))
            .unwrap_or_default();
        self.ctr = CtrIdents {
            table: format!(
                "(SELECT tm_fm.{conv} AS {tc}, this.{user} AS {tu}, CAST(tm_fm.{id} AS {int}) AS {tp}, CASE WHEN ({read}) THEN 0 ELSE 1 END AS {tr} FROM {flags} this JOIN {msgs} tm_fm ON tm_fm.{id} = this.{message}{same_conv} WHERE 1 = 1{rows})",
                conv = self.msg.conv,
                tc = q("tm_conv"),
                user = q(user),
                tu = q("tm_usr"),
                id = self.msg.id,
                int = self.int,
                tp = q("tm_pos"),
                tr = q("tm_unread"),
                flags = q(mapping.counter_table()),
                msgs = self.msg.table,
                message = q(message),
            ),
            user: q("tm_usr"),
            conv: q("tm_conv"),
            column: String::new(),
            value: format!("this.{}", q("tm_unread")),
            rows: None,
            sum: true,
            joins: Joins::default(),
            conv_k: KeyCompare::default(),
            user_k: KeyCompare::default(),
            mentions: None,
            pos: q("tm_pos"),
            unread: q("tm_unread"),
        };
        self
    }

    /// The statements of a database whose key columns' collations differ (issue 25): with
    /// `keyed` (the conversation keys differ) batches are lists of conversation keys
    /// ([`SqlContext::keyed`]), and each key column is compared as `compare(table, column)`
    /// says (both as the mapping names them; the engine's [`KeyCompare`] of the column's
    /// collation, or the default: as it is).
    pub fn with_key_compare(
        mut self,
        mapping: &Mapping,
        keyed: bool,
        compare: impl Fn(&str, &str) -> KeyCompare,
    ) -> SqlContext {
        let mut seen: BTreeMap<(String, String), KeyCompare> = BTreeMap::new();
        let mut k = |table: &str, column: &str| {
            seen.entry((table.to_string(), column.to_string()))
                .or_insert_with(|| compare(table, column))
                .clone()
        };
        self.keyed = keyed;
        let m = &mapping.messages;
        self.msg.conv_k = k(&m.table, &m.conversation);
        self.msg.sender_k = k(&m.table, &m.sender);
        if let (Some(mem), Some(mb)) = (self.mem.as_mut(), mapping.members.as_ref()) {
            mem.conv_k = k(&mb.table, &mb.conversation);
            mem.user_k = k(&mb.table, &mb.user);
        }
        let ctr = &mapping.counter;
        if let (Some(conv), Some(user)) = (&ctr.conversation, &ctr.user) {
            self.ctr.conv_k = k(mapping.counter_table(), conv);
            self.ctr.user_k = k(mapping.counter_table(), user);
        }
        if let (Shape::ReadFlags, Some(user)) = (ctr.shape, &ctr.user) {
            // The flag rows' conversation is the message's.
            self.ctr.conv_k = self.msg.conv_k.clone();
            self.ctr.user_k = k(mapping.counter_table(), user);
        }
        for (ev, e) in self.evidence.iter_mut().zip(&mapping.evidence) {
            let Some(src) = e.source() else { continue };
            if let Some(conv) = &src.conversation {
                ev.conv_k = k(&src.table, conv);
            }
            ev.user_k = k(&src.table, &src.user);
            if let (Some(lookup), Some(l)) = (ev.lookup.as_mut(), src.lookup.as_ref()) {
                if let Some(conv) = &l.conversation {
                    lookup.conv_k = k(&l.table, conv);
                }
            }
        }
        let wm = &mapping.watermarks.table;
        self.wm_conv_k = k(wm, "conversation_id");
        self.wm_user_k = k(wm, "user_id");
        let conv_key = mapping.conversations.as_ref().map(|t| k(&t.table, &t.key));
        let user_key = mapping.users.as_ref().map(|t| k(&t.table, &t.key));
        for joins in self.all_joins() {
            if let (Some(j), Some(key)) = (joins.conv.as_mut(), &conv_key) {
                j.key_k = key.clone();
            }
            if let (Some(j), Some(key)) = (joins.usr.as_mut(), &user_key) {
                j.key_k = key.clone();
            }
        }
        self.compares = seen;
        self
    }

    /// Every [`Joins`] of the context (the rows its predicates and expressions read).
    fn all_joins(&mut self) -> Vec<&mut Joins> {
        let mut out = vec![&mut self.msg.joins, &mut self.ctr.joins];
        if let Some(mem) = self.mem.as_mut() {
            out.push(&mut mem.joins);
        }
        out.extend(self.evidence.iter_mut().map(|e| &mut e.joins));
        out
    }

    /// How the key column `table.column` (as the mapping names them) is compared: what
    /// [`SqlContext::with_key_compare`] set, the default (as it is) for any other column.
    pub fn compare_of(&self, table: &str, column: &str) -> KeyCompare {
        self.compares
            .get(&(table.to_string(), column.to_string()))
            .cloned()
            .unwrap_or_default()
    }

    /// Whether the mapping lists an evidence kind.
    pub fn has_evidence(&self, kind: EvidenceKind) -> bool {
        self.evidence.iter().any(|e| e.kind == kind.as_str())
    }
}
