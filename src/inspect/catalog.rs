//! What `inspect` reads from the catalog: tables and views, their columns with a type class,
//! and their indexes. The queries and the type classes are the dialect's
//! ([`crate::dialect::Catalog`]); this module only turns their rows into a [`Catalog`].

use anyhow::{Context, Result};
use sqlx::{AnyConnection, Row};

use crate::dialect::Dialect;
use crate::mapping::check_identifier;
use crate::values::text;

pub use crate::dialect::TypeClass;

/// One column.
#[derive(Debug, Clone)]
pub struct Column {
    /// Its name as the catalog spells it.
    pub name: String,
    /// Its declared type as the catalog shows it.
    pub declared: String,
    /// The declared type's class.
    pub class: TypeClass,
}

/// One index (the primary key included).
#[derive(Debug, Clone)]
pub struct Index {
    /// Its name (`PRIMARY KEY` for a SQLite rowid table's key).
    pub name: String,
    /// Whether it is unique.
    pub unique: bool,
    /// Whether it has a WHERE clause (a partial index serves only some rows).
    pub partial: bool,
    /// Its key columns in order; None for an expression.
    pub columns: Vec<Option<String>>,
}

impl Index {
    /// Whether the index's key starts with `prefix`, in that order.
    pub fn starts_with(&self, prefix: &[&str]) -> bool {
        prefix.len() <= self.columns.len()
            && prefix
                .iter()
                .zip(&self.columns)
                .all(|(want, have)| have.as_deref() == Some(*want))
    }
}

/// One table or view.
#[derive(Debug, Clone)]
pub struct Table {
    /// The name as a mapping writes it: `table`, or `schema.table` outside the default schema.
    pub name: String,
    /// The schema when it is not the default one.
    pub schema: Option<String>,
    /// The table's own name.
    pub bare: String,
    /// Whether it is a view (no indexes of its own).
    pub is_view: bool,
    /// Its columns in order.
    pub columns: Vec<Column>,
    /// Its indexes.
    pub indexes: Vec<Index>,
}

impl Table {
    /// The column named `name` (compared case-insensitively), if any.
    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns
            .iter()
            .find(|c| c.name.eq_ignore_ascii_case(name))
    }

    /// Whether some unique, non-partial index's columns are all among `columns`: then at most
    /// one row exists per value of `columns`.
    pub fn unique_on(&self, columns: &[&str]) -> bool {
        self.indexes.iter().any(|i| {
            i.unique
                && !i.partial
                && i.columns
                    .iter()
                    .all(|c| c.as_deref().is_some_and(|c| columns.contains(&c)))
        })
    }
}

/// Every table and view of the database that a mapping could name.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    /// Tables and views, by name.
    pub tables: Vec<Table>,
    /// Declared foreign keys (issue 32), one per referencing column: (table as a mapping names
    /// it, column, the referenced table's own name).
    pub foreign_keys: Vec<(String, String, String)>,
    /// Names skipped because tidemark cannot quote them (see
    /// [`crate::mapping::check_identifier`]), or because they are tidemark's own.
    pub skipped: Vec<String>,
}

/// Tables tidemark itself creates (`expand`): never proposed.
fn is_tidemarks_own(table: &str, is_view: bool) -> bool {
    let lower = table.to_ascii_lowercase();
    lower == "refinery_schema_history"
        || lower == "read_watermarks"
        || (!is_view && lower.starts_with("tidemark_"))
}

/// Reads the catalog of the connection's database.
///
/// Errors (exit 3): a catalog query fails.
pub async fn read(conn: &mut AnyConnection, dialect: Dialect) -> Result<Catalog> {
    let rows = sqlx::raw_sql(dialect.catalog().inspect_columns_query())
        .fetch_all(&mut *conn)
        .await
        .context("reading the catalog's columns")?;
    let mut catalog = Catalog::default();
    for row in &rows {
        let schema = text(row, 0)?.unwrap_or_default();
        let bare = text(row, 1)?.unwrap_or_default();
        let is_view = text(row, 2)?.as_deref() == Some("view");
        let column = text(row, 3)?.unwrap_or_default();
        let declared = text(row, 4)?.unwrap_or_default();
        let name = if schema.is_empty() {
            bare.clone()
        } else {
            format!("{schema}.{bare}")
        };
        if is_tidemarks_own(&bare, is_view) || check_identifier(&name, true).is_err() {
            if !catalog.skipped.contains(&name) {
                catalog.skipped.push(name);
            }
            continue;
        }
        if catalog.tables.last().map(|t| &t.name) != Some(&name) {
            catalog.tables.push(Table {
                name: name.clone(),
                schema: (!schema.is_empty()).then(|| schema.clone()),
                bare: bare.clone(),
                is_view,
                columns: Vec::new(),
                indexes: Vec::new(),
            });
        }
        let table = catalog.tables.last_mut().expect("pushed above");
        if check_identifier(&column, false).is_err() {
            continue;
        }
        table.columns.push(Column {
            class: dialect.catalog().type_class(&declared),
            name: column,
            declared,
        });
    }
    let rows = sqlx::raw_sql(dialect.catalog().inspect_indexes_query())
        .fetch_all(&mut *conn)
        .await
        .context("reading the catalog's indexes")?;
    for row in &rows {
        let schema = text(row, 0)?.unwrap_or_default();
        let bare = text(row, 1)?.unwrap_or_default();
        let index = text(row, 2)?.unwrap_or_default();
        let unique = row.try_get::<i64, _>(3)? != 0;
        let partial = row.try_get::<i64, _>(4)? != 0;
        let column = text(row, 6)?;
        let name = if schema.is_empty() {
            bare
        } else {
            format!("{schema}.{bare}")
        };
        let Some(table) = catalog.tables.iter_mut().find(|t| t.name == name) else {
            continue;
        };
        match table.indexes.last_mut() {
            Some(last) if last.name == index => last.columns.push(column),
            _ => table.indexes.push(Index {
                name: index,
                unique,
                partial,
                columns: vec![column],
            }),
        }
    }
    let rows = sqlx::raw_sql(dialect.catalog().inspect_foreign_keys_query())
        .fetch_all(&mut *conn)
        .await
        .context("reading the catalog's foreign keys")?;
    for row in &rows {
        let schema = text(row, 0)?.unwrap_or_default();
        let bare = text(row, 1)?.unwrap_or_default();
        let name = if schema.is_empty() {
            bare
        } else {
            format!("{schema}.{bare}")
        };
        let column = text(row, 2)?.unwrap_or_default();
        let referenced = text(row, 3)?.unwrap_or_default();
        catalog.foreign_keys.push((name, column, referenced));
    }
    Ok(catalog)
}
