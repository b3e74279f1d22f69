//! The objects that depend on the counter column (issue 13, row 5): views, rules, triggers,
//! foreign keys and indexes, found in the catalog before any DDL
//! (`sql/<dialect>/contract_dependents.sql`), on PostgreSQL also over the table's partitions
//! and child tables (issue 29, row 8), and the functions and procedures whose source names
//! the column (issue 29, row 1: PostgreSQL's `pg_proc.prosrc`, MySQL/MariaDB's
//! `information_schema.ROUTINES`). One that would make the drop fail, or leave it broken,
//! closes the gate with its name; one that goes with the column is a note, and so is a
//! routine whose body cannot be read (a C function, a routine the session may not see).

use anyhow::{Context, Result};
use serde::Serialize;
use sqlx::AnyConnection;

use crate::dialect::{render, SqlContext};
use crate::gate;
use crate::sql_text::identifiers;
use crate::values::text;

/// An object that depends on the counter column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Dependent {
    /// What it is: `view`, `materialized view`, `rule`, `trigger`, `foreign key`, `index`,
    /// `constraint`, `sequence`, `object`.
    pub kind: String,
    /// Its name as the catalog gives it (schema-qualified where the engine has schemas;
    /// `NAME on TABLE` for indexes, constraints and triggers of PostgreSQL).
    pub name: String,
    /// Whether the drop fails because of it, or leaves it broken (views and triggers that
    /// use the column, another table's foreign key); false when it goes with the column.
    pub blocks: bool,
    /// A function or procedure whose body the catalog does not show (PostgreSQL: written in
    /// C or `internal`; MySQL/MariaDB: the session may not read it): whether it uses the
    /// column cannot be told (a note, `blocks` false).
    pub unreadable: bool,
}

impl Dependent {
    /// `view public.v`.
    pub fn describe(&self) -> String {
        format!("{} {}", self.kind, self.name)
    }
}

/// The objects that depend on `column` of `table` (as the mapping names them), blocking ones
/// first. A candidate whose definition the catalog returns as SQL text (MySQL/MariaDB,
/// SQLite) counts only when that text names both the table and the column as identifiers.
///
/// Errors: the catalog query fails (exit 3).
pub async fn dependents(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    table: &str,
    column: &str,
) -> Result<Vec<Dependent>> {
    let sql = render("contract_dependents.sql", ctx, minijinja::context! {})?;
    let mut q = sqlx::query(&sql);
    for bind in ctx.dialect.catalog().table_columns_binds(table) {
        q = q.bind(bind);
    }
    let rows = q
        .bind(column.to_string())
        .fetch_all(&mut *conn)
        .await
        .context("reading the objects that depend on the counter column")?;
    let bare_table = table.rsplit('.').next().unwrap_or(table);
    let mut out = Vec::new();
    for row in &rows {
        let definition = text(row, "definition")?;
        if let Some(sql) = definition {
            if !mentions_both(&sql, bare_table, column) {
                continue;
            }
        }
        // 1: it blocks; 0: it goes with the column; 2: a body that cannot be read.
        let blocks: i64 = sqlx::Row::try_get(row, "blocks")?;
        out.push(Dependent {
            kind: text(row, "kind")?.unwrap_or_default(),
            name: text(row, "name")?.unwrap_or_default(),
            blocks: blocks == 1,
            unreadable: blocks == 2,
        });
    }
    out.sort_by_key(|d| std::cmp::Reverse(d.blocks));
    Ok(out)
}

/// Closes `verdict` for every blocking dependent (a reason naming it) and notes the others
/// ("index x goes with the column"; a routine whose body cannot be read: check it by hand).
pub fn apply(
    verdict: &mut gate::Verdict,
    notes: &mut Vec<String>,
    found: &[Dependent],
    column: &str,
) {
    for d in found {
        if d.blocks {
            verdict.reasons.push(gate::Reason::DependentObject {
                object: d.kind.clone(),
                name: d.name.clone(),
                column: column.to_string(),
            });
            verdict.open = false;
        } else if d.unreadable {
            notes.push(format!(
                "{}: tidemark cannot read its body, so it cannot tell whether it uses {column}: check it before the drop",
                d.describe()
            ));
        } else {
            notes.push(format!(
                "{} depends on {column} and is dropped with it",
                d.describe()
            ));
        }
    }
}

/// Whether the SQL text names both `table` and `column` as identifiers (quoted or bare, any
/// case; qualified names count by their parts).
fn mentions_both(sql: &str, table: &str, column: &str) -> bool {
    let idents = identifiers(sql);
    let has = |name: &str| {
        idents
            .iter()
            .any(|i| i.split('.').any(|part| part.eq_ignore_ascii_case(name)))
    };
    has(table) && has(column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_definition_counts_when_it_names_the_table_and_the_column() {
        let maria = "select sum(`db`.`unread_counters`.`unread_count`) AS `total` from `db`.`unread_counters`";
        assert!(mentions_both(maria, "unread_counters", "unread_count"));
        let other = "select `db`.`t`.`unread_count_old` AS `x` from `db`.`unread_counters` `t`";
        assert!(!mentions_both(other, "unread_counters", "unread_count"));
        let comment = "CREATE VIEW v AS SELECT conv_id FROM unread_counters -- unread_count";
        assert!(!mentions_both(comment, "unread_counters", "unread_count"));
        let sqlite = "CREATE TRIGGER bump AFTER INSERT ON messages BEGIN UPDATE unread_counters SET unread_count = unread_count + 1; END";
        assert!(mentions_both(sqlite, "UNREAD_COUNTERS", "unread_count"));
    }
}
