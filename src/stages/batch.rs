//! Conversation-range batching, shared by backfill, audit and contract: the key values of the
//! legacy schema ([`Key`]), what a run covers ([`Scope`]), one batch of whole conversations
//! ([`Batch`]) and how the next one is found ([`next_batch`], `sql/common/batch_bounds.sql`).

use anyhow::Result;
use sqlx::any::{AnyArguments, AnyRow};
use sqlx::query::Query;
use sqlx::{Any, AnyConnection, Row};

use crate::dialect::{render, Dialect, KeyCompare, RangeParams, SqlContext};
use crate::schema::KeyKind;
use crate::values::text;

/// A key value of the legacy schema (a user, a conversation, a message position). In JSON
/// (checkpoints) an integer key is a number and a text key a string.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(untagged)]
pub enum Key {
    /// An integer key.
    Int(i64),
    /// A text key.
    Text(String),
}

impl Key {
    /// Reads column `idx` (a position, or a name: the column's alias) of a row as a key of
    /// `kind`; a value of the other kind is read as what it is (issue 29 row 22: SQLite
    /// decides a value's storage class row by row, so a view's expression column declared
    /// with no type, `0 AS reader`, holds integers where `kind` says text; its type affinity
    /// never decides whether a row can be read). A key read as an integer is bound back as
    /// one, which is how such a column compares.
    ///
    /// Errors: the value is neither an integer nor text (a decimal, a blob that is no text).
    pub fn read<I>(row: &AnyRow, idx: I, kind: KeyKind) -> Result<Key>
    where
        I: sqlx::ColumnIndex<AnyRow> + Copy,
    {
        Ok(match kind {
            KeyKind::Integer => match row.try_get::<i64, _>(idx) {
                Ok(v) => Key::Int(v),
                Err(e) => match row.try_get::<Option<String>, _>(idx) {
                    Ok(v) => Key::Text(v.unwrap_or_default()),
                    Err(_) => return Err(e.into()),
                },
            },
            KeyKind::Text => match text(row, idx) {
                Ok(v) => Key::Text(v.unwrap_or_default()),
                Err(e) => match row.try_get::<i64, _>(idx) {
                    Ok(v) => Key::Int(v),
                    Err(_) => return Err(e),
                },
            },
        })
    }

    /// Binds the key as the next parameter of `q`.
    pub fn bind<'q>(
        &self,
        q: Query<'q, Any, AnyArguments<'q>>,
    ) -> Query<'q, Any, AnyArguments<'q>> {
        match self {
            Key::Int(v) => q.bind(*v),
            Key::Text(v) => q.bind(v.clone()),
        }
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Key::Int(v) => write!(f, "{v}"),
            Key::Text(v) => f.write_str(v),
        }
    }
}

/// The conversations of a batch that stopped, for its error (issue 25, row 14): ` (conversations
/// after 150 up to 175)`, ` (conversations up to 25)` for a first batch, ` (conversations after
/// 150)` when the batch was not found yet, ` (conversations from the start)` when neither is
/// known. `lo` is exclusive (the last conversation of the batch before), `hi` inclusive.
pub fn range_words(lo: Option<&Key>, hi: Option<&Key>) -> String {
    match (lo, hi) {
        (Some(lo), Some(hi)) => format!(" (conversations after {lo} up to {hi})"),
        (None, Some(hi)) => format!(" (conversations up to {hi})"),
        (Some(lo), None) => format!(" (conversations after {lo})"),
        (None, None) => " (conversations from the start)".to_string(),
    }
}

/// Which conversations a run covers beyond its batches: `--conversations FROM..TO` (both
/// inclusive) and a deterministic `--sample` by conversation key.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scope {
    /// Lowest conversation covered (inclusive).
    pub from: Option<Key>,
    /// Highest conversation covered (inclusive).
    pub to: Option<Key>,
    /// An SQL predicate over `{col}` (the conversation column) that keeps the sample.
    pub sample_sql: Option<String>,
    /// `--min-age`: how the conversations with recent writes are found, batch by batch.
    pub min_age: Option<MinAge>,
}

/// The `--min-age` filter of a run, built once at its start (`stages::audit::quiescence`).
///
/// A conversation with a message newer than the cutoff is left out. The filter is never a
/// predicate evaluated per row: a correlated `NOT EXISTS` over the conversation's messages,
/// placed on every row a batch reads, cost rows × messages per conversation (SQLite, 20 large
/// channels of 1 000 members and 5 000 messages: 99.5 s against 0.92 s without the option).
/// Each batch instead lists its recent conversations once, in its snapshot ([`MinAge::recent_sql`]
/// with the batch's range: one index range over the batch's messages), and its statements
/// leave out those keys, bound as parameters ([`Batch::recent`]).
#[derive(Debug, Clone, PartialEq)]
pub struct MinAge {
    /// `SELECT DISTINCT … AS conv FROM <messages> tm_recent WHERE <created_at> > <cutoff>`, to
    /// which a batch appends its range over `tm_recent.<conversation>`.
    pub recent_sql: String,
    /// The quoted conversation column of the messages, qualified by `tm_recent`.
    pub recent_col: String,
    /// The cutoff itself: an SQL expression comparable with `messages.created_at` (the
    /// dialect's `seconds_ago`, or a Unix-time literal for an integer column). The backfill's
    /// settle guard joins the batch's messages newer than it (`sql/common/backfill_plan.sql`).
    pub cutoff: String,
    /// The same filter as a correlated predicate over `{col}`: the fallback for a batch with
    /// more recent conversations than [`MAX_RECENT_KEYS`] (parameters are limited per statement).
    pub quiet_sql: String,
    /// How the messages' conversation column is compared (issue 25): a batch of keys lists
    /// its recent conversations by equality with its keys.
    pub recent_k: KeyCompare,
}

/// The most recent conversations a batch binds as parameters per range copy; beyond that its
/// statements fall back to the correlated predicate (SQLite allows 32 766 parameters per
/// statement, and an audit statement places up to five range copies).
pub const MAX_RECENT_KEYS: usize = 1_000;

impl Scope {
    /// The deterministic sample predicate for `percent` of the conversations: a hash of the
    /// key modulo 10 000 below percent × 100. The same key is
    /// always in or out, so scheduled samples are comparable run to run.
    ///
    /// Errors (exit 2): a percentage outside (0, 100], or text keys on SQLite (no built-in hash).
    pub fn sample(dialect: Dialect, kind: KeyKind, percent: f64) -> Result<String> {
        if !(percent > 0.0 && percent <= 100.0) {
            return Err(crate::error::input_error(format!(
                "--sample {percent}: a percentage in (0, 100]"
            )));
        }
        let basis = (percent * 100.0).round() as i64;
        // Integers are scrambled (sequential ids would otherwise make a prefix, not a sample);
        // every intermediate value stays below 2^63.
        let hash = match kind {
            KeyKind::Integer => "((ABS({col}) % 1000003) * 7919)",
            KeyKind::Text => dialect.text_key_hash()?,
        };
        Ok(format!("({hash} % 10000) < {basis}"))
    }
}

/// The most conversations a batch holds when it is a list of keys (the key columns' collations
/// differ, issue 25): each key is a parameter of every table's equality list, and an audit
/// statement places up to five lists (SQLite allows 32 766 parameters per statement).
pub const MAX_BATCH_KEYS: u64 = 1_000;

/// One batch: the conversations in (`lo`, `hi`], whole conversations only, within a scope.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// Exclusive lower bound; None for the first batch.
    pub lo: Option<Key>,
    /// Inclusive upper bound.
    pub hi: Key,
    /// Rows (members or messages) the batch holds, conversations with recent writes included.
    pub rows: u64,
    /// The run's scope.
    pub scope: Scope,
    /// `--min-age`: the conversations of this batch with recent writes, left out by its
    /// statements (set by [`Batch::find_recent`], inside the batch's snapshot).
    pub recent: Vec<Key>,
    /// `--min-age` with more than [`MAX_RECENT_KEYS`] recent conversations: the statements
    /// use the correlated predicate instead of the keys.
    pub recent_overflow: bool,
    /// When the key columns' collations differ (issue 25, [`SqlContext::keyed`]): the batch's
    /// conversations, in the order they were found, without the recent ones (`--min-age`).
    /// Every statement reads each table by equality with these keys, not by (`lo`, `hi`],
    /// which tables in other collations would read as other rows. None otherwise.
    pub keys: Option<Vec<Key>>,
}

impl Batch {
    /// The range placeholders for this batch, starting at parameter `first` (1-based), in the
    /// order `sql/common/macros.sql` uses them: lo, hi, from, to, then the recent
    /// conversations left out (`--min-age`).
    pub fn params(&self, dialect: Dialect, first: usize) -> RangeParams {
        if let Some(keys) = &self.keys {
            return RangeParams {
                keys: Some(
                    (0..keys.len())
                        .map(|i| dialect.placeholder(first + i))
                        .collect(),
                ),
                ..Default::default()
            };
        }
        let mut params = range_params(dialect, first, self.lo.is_some(), true, &self.scope);
        if self.recent_overflow {
            params.quiet = self.scope.min_age.as_ref().map(|m| m.quiet_sql.clone());
        } else if !self.recent.is_empty() {
            let before = first + self.param_count() - self.recent.len();
            // Each bound key as the conversation column takes a value (issue 29: a uuid key on
            // PostgreSQL, bound as text, cast back to uuid).
            let val = self
                .scope
                .min_age
                .as_ref()
                .map_or("{v}", |m| m.recent_k.val.as_str());
            let list: Vec<String> = (0..self.recent.len())
                .map(|i| val.replace("{v}", &dialect.placeholder(before + i)))
                .collect();
            params.quiet = Some(format!("{{col}} NOT IN ({})", list.join(", ")));
        }
        params
    }

    /// How many parameters [`Batch::params`] places.
    pub fn param_count(&self) -> usize {
        self.bound_keys().count()
    }

    fn bound_keys(&self) -> Box<dyn Iterator<Item = &Key> + '_> {
        if let Some(keys) = &self.keys {
            return Box::new(keys.iter());
        }
        let recent = if self.recent_overflow {
            &[][..]
        } else {
            &self.recent[..]
        };
        Box::new(
            self.lo
                .iter()
                .chain(std::iter::once(&self.hi))
                .chain(self.scope.from.iter())
                .chain(self.scope.to.iter())
                .chain(recent.iter()),
        )
    }

    /// `--min-age`: lists the batch's conversations with recent writes (one index range over
    /// its messages, or lookups of its keys) into [`Batch::recent`]; nothing without the
    /// option. A batch of keys leaves them out of its keys. Run it inside the batch's
    /// snapshot, before rendering its statements.
    ///
    /// Errors: the database fails.
    pub async fn find_recent(
        &mut self,
        conn: &mut AnyConnection,
        dialect: Dialect,
        kind: KeyKind,
    ) -> Result<()> {
        self.recent.clear();
        self.recent_overflow = false;
        let Some(min_age) = &self.scope.min_age else {
            return Ok(());
        };
        let col = &min_age.recent_col;
        let mut sql = min_age.recent_sql.clone();
        if let Some(keys) = &self.keys {
            let k = &min_age.recent_k;
            let list: Vec<String> = (0..keys.len())
                .map(|i| k.val.replace("{v}", &dialect.placeholder(1 + i)))
                .collect();
            if list.is_empty() {
                return Ok(());
            }
            sql.push_str(&format!(
                " AND {} IN ({})",
                k.col.replace("{v}", col),
                list.join(", ")
            ));
        } else {
            let r = range_params(dialect, 1, self.lo.is_some(), true, &self.scope);
            // In the column's order (issue 29: a uuid key on PostgreSQL, compared as text).
            let ordered = min_age.recent_k.order_of(col);
            for (op, p) in [(">", &r.lo), ("<=", &r.hi), (">=", &r.from), ("<=", &r.to)] {
                if let Some(p) = p {
                    sql.push_str(&format!(" AND {ordered} {op} {p}"));
                }
            }
        }
        let rows = self.bind(sqlx::query(&sql)).fetch_all(&mut *conn).await?;
        let mut recent = Vec::with_capacity(rows.len());
        for row in &rows {
            recent.push(Key::read(row, "conv", kind)?);
        }
        if let Some(keys) = self.keys.as_mut() {
            keys.retain(|k| !recent.contains(k));
            self.recent = recent;
            return Ok(());
        }
        self.recent_overflow = recent.len() > MAX_RECENT_KEYS;
        if !self.recent_overflow {
            self.recent = recent;
        }
        Ok(())
    }

    /// Binds lo, hi, from, to (those present), in the order [`Batch::params`] placed them.
    pub fn bind<'q>(
        &self,
        mut q: Query<'q, Any, AnyArguments<'q>>,
    ) -> Query<'q, Any, AnyArguments<'q>> {
        for key in self.bound_keys() {
            q = key.bind(q);
        }
        q
    }
}

/// Placeholders for a range filter: lo, hi, from, to (each only when present).
fn range_params(dialect: Dialect, first: usize, lo: bool, hi: bool, scope: &Scope) -> RangeParams {
    let mut n = first;
    let mut next = |present: bool| {
        present.then(|| {
            let p = dialect.placeholder(n);
            n += 1;
            p
        })
    };
    RangeParams {
        lo: next(lo),
        hi: next(hi),
        from: next(scope.from.is_some()),
        to: next(scope.to.is_some()),
        sample: scope.sample_sql.clone(),
        // `--min-age` is a batch's own (its recent conversations): see `Batch::params`.
        quiet: None,
        keys: None,
    }
}

/// The range filter for a whole run within `scope` (no batch bounds), from parameter 1.
pub fn scope_params(dialect: Dialect, scope: &Scope) -> RangeParams {
    range_params(dialect, 1, false, false, scope)
}

/// Binds a scope's from and to.
pub fn bind_scope<'q>(
    scope: &Scope,
    mut q: Query<'q, Any, AnyArguments<'q>>,
) -> Query<'q, Any, AnyArguments<'q>> {
    for key in scope.from.iter().chain(scope.to.iter()) {
        q = key.bind(q);
    }
    q
}

/// What a batch counts: decides which rows `sql/common/batch_bounds.sql` groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchUnit {
    /// Members the backfill writes for (subjects.sql).
    Subjects,
    /// The members (subjects.sql), and the conversations of messages without a member row,
    /// counted as no rows: the read_flags audit, whose flag rows of a conversation nobody is a
    /// member of are orphans to report (semantics.md "Shape C"), batched like the members'.
    SubjectsAndMessages,
    /// Rows of the per-member counter table (audit, shape A).
    Counters,
    /// Messages (audit, shape B).
    Messages,
}

/// The rows a batch holds by default (`--batch-size`): members, counter rows or messages of
/// whole conversations, for the backfill, the audit and the contract's archive alike.
pub const DEFAULT_BATCH_SIZE: u64 = 5000;

/// How many conversations the first bounds query of a batch reads; each further one reads
/// [`BOUNDS_GROWTH`] times more. A batch of 5 000 members of direct messages and small groups
/// (about four members each) needs some 1 250 conversations: two queries reading ~1 300
/// conversations, where one query of `batch_size` conversations read 5 000 of them (PostgreSQL
/// 15, 100 000 members, `EXPLAIN ANALYZE` of one bounds query: 7.0 ms with a limit of 5 000
/// conversations, 3.8 ms with 1 500).
pub const BOUNDS_FIRST_LIMIT: u64 = 256;

/// The growth of the bounds query's limit from one query of a batch to the next.
pub const BOUNDS_GROWTH: u64 = 4;

/// Finds the next batch after `lo` within `scope`: whole conversations in key order until
/// `batch_size` rows are reached (a conversation larger than that is a batch of its own). None
/// when no conversation is left.
///
/// The conversations and their row counts are read in key order by
/// `sql/common/batch_bounds.sql`, [`BOUNDS_FIRST_LIMIT`] conversations first, then
/// [`BOUNDS_GROWTH`] times more per query, each query going on after the last conversation
/// read, until the batch is full or no conversation is left: never more than `batch_size`
/// conversations, and about as many as the batch holds.
pub async fn next_batch(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    unit: BatchUnit,
    conv_kind: KeyKind,
    lo: Option<Key>,
    batch_size: u64,
    scope: &Scope,
) -> Result<Option<Batch>> {
    let unit_name = match unit {
        BatchUnit::Subjects => "subjects",
        BatchUnit::SubjectsAndMessages => "subjects_and_messages",
        BatchUnit::Counters => "counters",
        BatchUnit::Messages => "messages",
    };
    let batch_size = batch_size.max(1);
    let max_keys = if ctx.keyed { MAX_BATCH_KEYS } else { u64::MAX };
    let mut keys = Vec::new();
    let mut hi: Option<Key> = None;
    let mut total = 0u64;
    let mut after = lo.clone();
    let mut limit = batch_size.min(BOUNDS_FIRST_LIMIT).min(max_keys);
    'reading: loop {
        let range = range_params(ctx.dialect, 1, after.is_some(), false, scope);
        // The union of two readings (SubjectsAndMessages) binds the range twice: its second
        // reading's placeholders follow the first's.
        let used = usize::from(after.is_some())
            + usize::from(scope.from.is_some())
            + usize::from(scope.to.is_some());
        let range2 = range_params(ctx.dialect, 1 + used, after.is_some(), false, scope);
        let sql = render(
            "batch_bounds.sql",
            ctx,
            minijinja::context! {
                range => range, range2 => range2, unit => unit_name, limit => limit
            },
        )?;
        let readings = if unit == BatchUnit::SubjectsAndMessages {
            2
        } else {
            1
        };
        let mut q = sqlx::query(&sql);
        for _ in 0..readings {
            if let Some(after) = &after {
                q = after.bind(q);
            }
            q = bind_scope(scope, q);
        }
        let rows = q.fetch_all(&mut *conn).await?;
        for row in &rows {
            let n: i64 = row.try_get("n")?;
            let n = n.max(0) as u64;
            if hi.is_some() && (total + n > batch_size || keys.len() as u64 >= max_keys) {
                break 'reading;
            }
            total += n;
            let key = Key::read(row, "conv", conv_kind)?;
            if ctx.keyed {
                keys.push(key.clone());
            }
            hi = Some(key);
        }
        if (rows.len() as u64) < limit || total >= batch_size || keys.len() as u64 >= max_keys {
            break;
        }
        after = hi.clone();
        limit = (limit * BOUNDS_GROWTH).min(batch_size).min(max_keys);
    }
    Ok(hi.map(|hi| Batch {
        lo,
        hi,
        rows: total,
        scope: scope.clone(),
        recent: Vec::new(),
        recent_overflow: false,
        keys: ctx.keyed.then_some(keys),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(recent: Vec<Key>, overflow: bool) -> Batch {
        Batch {
            lo: Some(Key::Int(10)),
            hi: Key::Int(20),
            rows: 7,
            scope: Scope {
                min_age: Some(MinAge {
                    recent_sql: "SELECT DISTINCT tm_recent.c AS conv FROM m tm_recent WHERE 1 = 1"
                        .into(),
                    recent_col: "tm_recent.c".into(),
                    cutoff: "1".into(),
                    quiet_sql: "NOT EXISTS (x = {col})".into(),
                    recent_k: KeyCompare::default(),
                }),
                ..Scope::default()
            },
            recent,
            recent_overflow: overflow,
            keys: None,
        }
    }

    #[test]
    fn recent_conversations_follow_the_range_placeholders() {
        let b = batch(vec![Key::Int(12), Key::Int(15)], false);
        assert_eq!(b.param_count(), 4);
        let p = b.params(Dialect::Postgres, 5);
        assert_eq!((p.lo.as_deref(), p.hi.as_deref()), (Some("$5"), Some("$6")));
        assert_eq!(p.quiet.as_deref(), Some("{col} NOT IN ($7, $8)"));
        let p = b.params(Dialect::Mysql, 1);
        assert_eq!(p.quiet.as_deref(), Some("{col} NOT IN (?, ?)"));
        // No recent conversation: no filter at all.
        assert_eq!(
            batch(vec![], false).params(Dialect::Postgres, 1).quiet,
            None
        );
    }

    #[test]
    fn too_many_recent_conversations_fall_back_to_the_correlated_predicate() {
        let b = batch(vec![], true);
        assert_eq!(b.param_count(), 2);
        assert_eq!(
            b.params(Dialect::Sqlite, 1).quiet.as_deref(),
            Some("NOT EXISTS (x = {col})")
        );
    }
}
