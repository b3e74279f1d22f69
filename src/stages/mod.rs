//! The stages of the migration (expand, backfill, audit, status) and what they share: keys,
//! conversation-range batches and snapshot transactions.

pub mod audit;
pub mod backfill;
pub mod expand;
pub mod status;

use anyhow::Result;
use sqlx::any::{AnyArguments, AnyRow};
use sqlx::query::Query;
use sqlx::{Any, AnyConnection, Row};

use crate::dialect::{render, Dialect, RangeParams, SqlContext};
use crate::schema::KeyKind;

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
    /// Reads column `idx` of a row as a key of `kind`.
    pub fn read(row: &AnyRow, idx: usize, kind: KeyKind) -> Result<Key> {
        Ok(match kind {
            KeyKind::Integer => Key::Int(row.try_get::<i64, _>(idx)?),
            KeyKind::Text => Key::Text(text(row, idx)?.unwrap_or_default()),
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

/// Reads a text column that may be NULL. MySQL/MariaDB send TEXT columns with the BLOB wire
/// type, which sqlx's Any driver decodes only as bytes: those are taken as UTF-8.
pub fn text(row: &AnyRow, idx: usize) -> Result<Option<String>> {
    match row.try_get::<Option<String>, _>(idx) {
        Ok(v) => Ok(v),
        Err(_) => Ok(row
            .try_get::<Option<Vec<u8>>, _>(idx)?
            .map(|b| String::from_utf8_lossy(&b).into_owned())),
    }
}

/// One batch: the conversations in (`lo`, `hi`], whole conversations only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// Exclusive lower bound; None for the first batch.
    pub lo: Option<Key>,
    /// Inclusive upper bound.
    pub hi: Key,
    /// Rows (members or messages) the batch holds.
    pub rows: u64,
}

impl Batch {
    /// The range placeholders for this batch, starting at parameter `first` (1-based).
    pub fn params(&self, dialect: Dialect, first: usize) -> RangeParams {
        let lo = self.lo.as_ref().map(|_| dialect.placeholder(first));
        let hi_n = first + usize::from(self.lo.is_some());
        RangeParams {
            lo,
            hi: Some(dialect.placeholder(hi_n)),
        }
    }

    /// Binds lo (if any) and hi, in the order [`Batch::params`] placed them.
    pub fn bind<'q>(
        &self,
        mut q: Query<'q, Any, AnyArguments<'q>>,
    ) -> Query<'q, Any, AnyArguments<'q>> {
        if let Some(lo) = &self.lo {
            q = lo.bind(q);
        }
        self.hi.bind(q)
    }
}

/// What a batch counts: decides which rows `sql/common/batch_bounds.sql` groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchUnit {
    /// Members the backfill writes for (subjects.sql).
    Subjects,
    /// Rows of the per-member counter table (audit, shape A).
    Counters,
    /// Messages (audit, shape B).
    Messages,
}

/// Finds the next batch after `lo`: whole conversations in key order until `batch_size` rows
/// are reached (a conversation larger than that is a batch of its own). None when no
/// conversation is left.
pub async fn next_batch(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    unit: BatchUnit,
    conv_kind: KeyKind,
    lo: Option<Key>,
    batch_size: u64,
) -> Result<Option<Batch>> {
    let range = RangeParams {
        lo: lo.as_ref().map(|_| ctx.dialect.placeholder(1)),
        hi: None,
    };
    let unit_name = match unit {
        BatchUnit::Subjects => "subjects",
        BatchUnit::Counters => "counters",
        BatchUnit::Messages => "messages",
    };
    let sql = render(
        "batch_bounds.sql",
        ctx,
        minijinja::context! { range => range, unit => unit_name, limit => batch_size.max(1) },
    )?;
    let mut q = sqlx::query(&sql);
    if let Some(lo) = &lo {
        q = lo.bind(q);
    }
    let rows = q.fetch_all(&mut *conn).await?;
    let mut hi = None;
    let mut total = 0u64;
    for row in &rows {
        let n: i64 = row.try_get(1)?;
        let n = n.max(0) as u64;
        if hi.is_some() && total + n > batch_size {
            break;
        }
        total += n;
        hi = Some(Key::read(row, 0, conv_kind)?);
    }
    Ok(hi.map(|hi| Batch {
        lo,
        hi,
        rows: total,
    }))
}

/// Opens a read transaction whose statements all see one consistent snapshot: REPEATABLE READ
/// on PostgreSQL and MySQL/MariaDB (seed 000 §2: a message that arrives during the batch is
/// never marked read by it), a deferred transaction on SQLite (serializable by design).
pub async fn begin_snapshot(conn: &mut AnyConnection, dialect: Dialect) -> Result<()> {
    match dialect {
        Dialect::Postgres => {
            sqlx::raw_sql("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                .execute(&mut *conn)
                .await?;
        }
        Dialect::Mysql => {
            sqlx::raw_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                .execute(&mut *conn)
                .await?;
            sqlx::raw_sql("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
                .execute(&mut *conn)
                .await?;
        }
        Dialect::Sqlite => {
            sqlx::raw_sql("BEGIN").execute(&mut *conn).await?;
        }
    }
    Ok(())
}

/// Opens a short write transaction (SQLite: `BEGIN IMMEDIATE`, taking the write lock at once
/// rather than failing to upgrade a read lock later).
pub async fn begin_write(conn: &mut AnyConnection, dialect: Dialect) -> Result<()> {
    let sql = match dialect {
        Dialect::Sqlite => "BEGIN IMMEDIATE",
        Dialect::Mysql => "START TRANSACTION",
        Dialect::Postgres => "BEGIN",
    };
    sqlx::raw_sql(sql).execute(&mut *conn).await?;
    Ok(())
}

/// Commits the open transaction.
pub async fn commit(conn: &mut AnyConnection) -> Result<()> {
    sqlx::raw_sql("COMMIT").execute(&mut *conn).await?;
    Ok(())
}

/// Rolls back the open transaction, ignoring a failure (the connection may be gone).
pub async fn rollback(conn: &mut AnyConnection) {
    let _ = sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await;
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}
