//! The bridge between refinery and sqlx: refinery's async migration traits implemented over an
//! sqlx `AnyConnection`, so tidemark needs no second driver per database. The history table is
//! `tidemark_schema_history` (refinery's layout: version, name, applied_on, checksum).
//!
//! Migration files live under `migrations/<dialect>/V{n}__{name}.sql` and are templates: the
//! watermark table's name and key types come from the mapping and the legacy schema.

use refinery_core::traits::r#async::{AsyncMigrate, AsyncQuery, AsyncTransaction};
use refinery_core::Migration;
use sqlx::{AnyConnection, Executor, Row};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// An sqlx connection as a refinery migration target.
pub struct SqlxMigrator<'c> {
    /// The connection the migrations run on.
    pub conn: &'c mut AnyConnection,
    /// Whether DDL is transactional (PostgreSQL, SQLite): then a migration and its history row
    /// commit together. MySQL commits DDL implicitly, so a transaction there would mislead.
    pub transactional_ddl: bool,
}

impl AsyncTransaction for SqlxMigrator<'_> {
    type Error = sqlx::Error;

    async fn execute<'a, T: Iterator<Item = &'a str> + Send + 'a>(
        &'a mut self,
        queries: T,
    ) -> Result<usize, Self::Error> {
        // Owned copies first: the iterator must not live across an await.
        let queries: Vec<String> = queries.map(str::to_string).collect();
        run_all(self.conn, queries, self.transactional_ddl).await
    }
}

/// Runs `queries` in order, in one transaction when `transactional`; returns how many ran.
/// Each query (a migration file, refinery's history row) is sent one statement per call
/// ([`crate::sql_text::statements`]): Citus refuses a call of several statements once the
/// table they change is distributed ("cannot insert multiple commands into a prepared
/// statement", issue 21). The checksums refinery keeps are of the files, unchanged.
fn run_all(
    conn: &mut AnyConnection,
    queries: Vec<String>,
    transactional: bool,
) -> BoxFuture<'_, Result<usize, sqlx::Error>> {
    Box::pin(async move {
        if transactional {
            conn.execute("BEGIN").await?;
        }
        let mut count = 0;
        for query in queries.iter().flat_map(|q| crate::sql_text::statements(q)) {
            if let Err(e) = conn.execute(query.as_str()).await {
                if transactional {
                    let _ = conn.execute("ROLLBACK").await;
                }
                return Err(e);
            }
            count += 1;
        }
        if transactional {
            conn.execute("COMMIT").await?;
        }
        Ok(count)
    })
}

/// A boxed, sendable future: boxing here pins the executor lifetimes that refinery's
/// `Send` bound cannot name (the "Executor is not general enough" limitation).
type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

impl AsyncQuery<Vec<Migration>> for SqlxMigrator<'_> {
    async fn query<'a>(&'a mut self, query: &'a str) -> Result<Vec<Migration>, Self::Error> {
        let rows = fetch_all(self.conn, query.to_string()).await?;
        let mut applied = Vec::with_capacity(rows.len());
        for row in rows {
            let version: i32 = row.try_get(0)?;
            let name = text(&row, 1)?;
            let applied_on = text(&row, 2)?;
            let checksum = text(&row, 3)?;
            let applied_on = OffsetDateTime::parse(&applied_on, &Rfc3339)
                .map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
            let checksum = checksum
                .parse::<u64>()
                .map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
            applied.push(Migration::applied(version, name, applied_on, checksum));
        }
        Ok(applied)
    }
}

impl AsyncMigrate for SqlxMigrator<'_> {}

/// A text column that is never NULL ([`crate::values::text`]), with sqlx's error type, which
/// refinery's traits want.
fn text(row: &sqlx::any::AnyRow, idx: usize) -> Result<String, sqlx::Error> {
    crate::values::text(row, idx)
        .map(Option::unwrap_or_default)
        .map_err(|e| sqlx::Error::Decode(e.into()))
}

fn fetch_all(
    conn: &mut AnyConnection,
    sql: String,
) -> BoxFuture<'_, Result<Vec<sqlx::any::AnyRow>, sqlx::Error>> {
    Box::pin(async move { sqlx::query(&sql).fetch_all(&mut *conn).await })
}
