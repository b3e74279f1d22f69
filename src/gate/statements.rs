//! The server's statement statistics (pg_stat_statements, performance_schema digests): does a
//! statement still read or write the counter column? Where each engine keeps them is a
//! method of [`crate::dialect::Catalog`].

use serde::Serialize;
use sqlx::{AnyConnection, Row};

use crate::dialect::{render, SqlContext};
use crate::mapping::Mapping;

/// What the server's statement statistics say about the counter column.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "finding", rename_all = "snake_case")]
pub enum StatementUse {
    /// The server keeps no statement statistics (or tidemark cannot read them).
    Unavailable {
        /// Why, in words (for example "pg_stat_statements is not installed").
        reason: String,
    },
    /// Statistics are kept and no statement mentions the counter column.
    Unused {
        /// Where tidemark looked (`pg_stat_statements`, `performance_schema…`).
        source: String,
    },
    /// Statements that still read or write the counter column.
    Used {
        /// Where tidemark looked.
        source: String,
        /// The statements (normalised text) and how often each ran.
        statements: Vec<StatementSeen>,
    },
}

impl StatementUse {
    /// The finding in one line.
    pub fn describe(&self) -> String {
        match self {
            StatementUse::Unavailable { reason } => {
                format!("statement statistics not available: {reason}")
            }
            StatementUse::Unused { source } => {
                format!("no statement in {source} reads or writes the counter column")
            }
            StatementUse::Used { source, statements } => format!(
                "{} statement(s) in {source} still read or write the counter column",
                statements.len()
            ),
        }
    }
}

/// A statement seen in the server's statistics.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatementSeen {
    /// Its normalised text (constants replaced), cut to 300 characters.
    pub text: String,
    /// How many times it ran since the statistics were reset.
    pub calls: i64,
}

/// What the server's statement statistics say about `column` of `table` (the counter, as the
/// mapping names them). Never an error: a server without statistics, or a view tidemark may
/// not read, is reported as unavailable, with the reason.
pub async fn statement_use(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    table: &str,
    column: &str,
    mapping: &Mapping,
) -> StatementUse {
    let source = match ctx.dialect.catalog().statement_statistics(conn).await {
        Ok(source) => source,
        Err(reason) => return StatementUse::Unavailable { reason },
    };
    let sql = match render("contract_statements.sql", ctx, minijinja::context! {}) {
        Ok(s) => s,
        Err(e) => {
            return StatementUse::Unavailable {
                reason: e.to_string(),
            }
        }
    };
    let pattern = format!("%{column}%");
    let rows = match sqlx::query(&sql).bind(pattern).fetch_all(&mut *conn).await {
        Ok(rows) => rows,
        Err(e) => {
            return StatementUse::Unavailable {
                reason: ctx
                    .dialect
                    .catalog()
                    .statement_statistics_error(source, &db_message(&e)),
            }
        }
    };
    let exclude = [mapping.watermarks.table.as_str()];
    let mut seen = Vec::new();
    for r in &rows {
        let Ok(Some(query)) = crate::values::text(r, "query") else {
            continue;
        };
        let calls: i64 = r.try_get("calls").unwrap_or_default();
        if statement_uses(&query, table, column, &exclude) {
            seen.push(StatementSeen {
                text: query.chars().take(300).collect(),
                calls,
            });
        }
    }
    if seen.is_empty() {
        StatementUse::Unused {
            source: source.into(),
        }
    } else {
        StatementUse::Used {
            source: source.into(),
            statements: seen,
        }
    }
}

/// The database's own message of an error (without the driver's wrapping).
pub fn db_message(e: &sqlx::Error) -> String {
    e.as_database_error()
        .map(|d| d.message().to_string())
        .unwrap_or_else(|| e.to_string())
}

/// Whether a statement's text (as the server's statistics normalise it) reads or writes
/// `column` of `table`: both names appear as whole identifiers (bare or quoted with `"` or
/// `` ` ``, case-insensitive; a schema-qualified table matches on its last part). A statement
/// that is tidemark's own (it names `tidemark_` tables, the watermark table `exclude`, or the
/// statistics views) does not count.
pub fn statement_uses(text: &str, table: &str, column: &str, exclude: &[&str]) -> bool {
    let idents = crate::sql_text::identifiers(text);
    let has = |name: &str| idents.iter().any(|i| i.eq_ignore_ascii_case(name));
    let table_name = table.rsplit('.').next().unwrap_or(table);
    if !has(column) || !has(table_name) {
        return false;
    }
    let own = idents.iter().any(|i| {
        let l = i.to_ascii_lowercase();
        l.starts_with("tidemark_")
            || l == "pg_stat_statements"
            || l == "events_statements_summary_by_digest"
            || exclude.iter().any(|e| {
                let e = e.rsplit('.').next().unwrap_or(e);
                l.eq_ignore_ascii_case(e)
            })
    });
    !own
}
