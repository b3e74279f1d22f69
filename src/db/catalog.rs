//! What the database has, as every layer above asks it: whether a table or view exists, its
//! columns, a column's declared type. The queries are the engine's
//! ([`crate::dialect::Catalog`], `sql/<dialect>/column_type.sql` and `contract_columns.sql`).

use anyhow::Result;
use sqlx::AnyConnection;

use crate::dialect::{render, Dialect, SqlContext};
use crate::values::text;

/// The declared type of `table.column` as the catalog spells it, or None when the column does
/// not exist.
pub async fn column_type(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    table: &str,
    column: &str,
) -> Result<Option<String>> {
    let sql = render("column_type.sql", ctx, minijinja::context! {})?;
    let mut q = sqlx::query(&sql);
    for bind in ctx.dialect.catalog().catalog_table_binds(table) {
        q = q.bind(bind);
    }
    let row = q
        .bind(column.to_string())
        .fetch_optional(&mut *conn)
        .await?;
    Ok(match row {
        Some(r) => text(&r, 0)?,
        None => None,
    })
}

/// The columns of `table`, in order (empty when it does not exist).
pub async fn table_columns(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    table: &str,
) -> Result<Vec<String>> {
    let sql = render("contract_columns.sql", ctx, minijinja::context! {})?;
    let mut q = sqlx::query(&sql);
    for bind in ctx.dialect.catalog().table_columns_binds(table) {
        q = q.bind(bind);
    }
    let rows = q.fetch_all(&mut *conn).await?;
    rows.iter()
        .map(|r| Ok(text(r, "name")?.unwrap_or_default()))
        .collect()
}

/// Whether `table` is a view (stages that only read accept views; `contract` does not).
pub async fn is_view(conn: &mut AnyConnection, dialect: Dialect, table: &str) -> Result<bool> {
    let (sql, binds) = dialect.catalog().view_count_query(table);
    let mut q = sqlx::query_scalar(&sql);
    for bind in binds {
        q = q.bind(bind);
    }
    let n: i64 = q.fetch_one(&mut *conn).await?;
    Ok(n > 0)
}

/// Whether a table exists (used by `status` and `expand --dry-run`).
///
/// Errors (exit 3): the session may not read it ("permission denied", with the GRANT that is
/// missing: [`super::privileges::denied`]), or the database fails.
pub async fn table_exists(conn: &mut AnyConnection, dialect: Dialect, table: &str) -> Result<bool> {
    let sql = format!("SELECT 1 FROM {} WHERE 1 = 0", dialect.quote(table));
    match sqlx::raw_sql(&sql).execute(&mut *conn).await {
        Ok(_) => Ok(true),
        Err(e) => {
            let e = anyhow::Error::from(e);
            if Dialect::error_is_lock_wait(&e) {
                return Err(e.context(format!(
                    "reading table {table}: another session holds a lock"
                )));
            }
            if super::privileges::is_permission_denied(&e) {
                let select = [super::privileges::Privilege::Select];
                return Err(super::privileges::denied(conn, dialect, table, &select, &e).await);
            }
            match e.downcast::<sqlx::Error>() {
                Ok(sqlx::Error::Database(_)) => Ok(false),
                Ok(other) => Err(other.into()),
                Err(other) => Err(other),
            }
        }
    }
}
