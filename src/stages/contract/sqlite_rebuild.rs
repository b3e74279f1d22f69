//! SQLite (the dialect's `drop_column_by_rebuild`): a table or column drop
//! that no trigger or view elsewhere still uses, and a column dropped in place (3.35+) or by
//! the table rebuild SQLite documents ("Making Other Kinds Of Table Schema Changes").

use anyhow::{anyhow, bail, Result};
use sqlx::AnyConnection;
use std::time::Duration;

use super::{Plan, Step, Target};
use crate::dialect::SqlContext;
use crate::error::input_error;
use crate::values::text;

/// The SQLite plan for `target`, waiting at most `lock_timeout` for the database lock.
/// `execute`: the plan is to be run (a view that uses the column refuses it then; in a dry
/// run the gate names it, see `dependents.rs`).
///
/// Errors (exit 2): a trigger (or, with `execute` or `--drop-table`, a view) that still uses
/// the column (or the table, with `--drop-table`), a counter column that is part of the
/// primary key or that another column's definition uses.
pub async fn plan(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    target: &Target,
    lock_timeout: Duration,
    execute: bool,
) -> Result<Plan> {
    let d = ctx.dialect;
    let ms = lock_timeout.as_millis().max(1);
    let (schema, name) = match target.table.split_once('.') {
        Some((s, t)) => (Some(s.to_string()), t.to_string()),
        None => (None, target.table.clone()),
    };
    let schema = schema.unwrap_or_else(|| "main".to_string());
    let qs = d.quote(&schema);
    let table = d.quote(&target.table);
    let master = format!("{qs}.sqlite_master");
    let column = &target.column;

    let table_sql: Option<String> = {
        let row = sqlx::query(&format!(
            "SELECT sql FROM {master} WHERE type = 'table' AND name = ? COLLATE NOCASE"
        ))
        .bind(name.clone())
        .fetch_optional(&mut *conn)
        .await?;
        match row {
            Some(r) => text(&r, "sql")?,
            None => None,
        }
    };
    let table_sql =
        table_sql.ok_or_else(|| input_error(format!("table {:?} not found", target.table)))?;

    // Triggers and views elsewhere that use the table (the column, unless it is all dropped).
    let objects = sqlx::query(&format!(
        "SELECT type, name, tbl_name, sql FROM {master} WHERE type IN ('trigger', 'view') AND sql IS NOT NULL"
    ))
    .fetch_all(&mut *conn)
    .await?;
    let mut own_triggers = Vec::new();
    for r in &objects {
        let kind = text(r, "type")?.unwrap_or_default();
        let obj = text(r, "name")?.unwrap_or_default();
        let on = text(r, "tbl_name")?.unwrap_or_default();
        let sql = text(r, "sql")?.unwrap_or_default();
        let idents = crate::sql_text::identifiers(&sql);
        let mentions = |n: &str| idents.iter().any(|i| i.eq_ignore_ascii_case(n));
        let on_table = kind == "trigger" && on.eq_ignore_ascii_case(&name);
        let uses = if target.drop_table {
            !on_table && mentions(&name)
        } else {
            mentions(&name) && mentions(column)
        };
        if uses && (kind == "trigger" || execute || target.drop_table) {
            return Err(input_error(format!(
                "{kind} {obj:?} uses {}: change or drop it first (SQLite would leave it broken)",
                if target.drop_table {
                    format!("table {name}")
                } else {
                    format!("{name}.{column}")
                }
            )));
        }
        if on_table {
            own_triggers.push(sql);
        }
    }

    let busy = format!("PRAGMA busy_timeout = {ms}");
    if target.drop_table {
        return Ok(Plan {
            steps: vec![
                Step::Sql(busy),
                Step::Sql("BEGIN IMMEDIATE".into()),
                Step::Verify,
                Step::Sql(format!("DROP TABLE {table}")),
                Step::Sql("COMMIT".into()),
            ],
            on_failure: vec!["ROLLBACK".into()],
            notes: Vec::new(),
        });
    }

    let version: String = {
        let row = sqlx::query("SELECT sqlite_version() AS version")
            .fetch_one(&mut *conn)
            .await?;
        text(&row, "version")?.unwrap_or_default()
    };
    let in_place_supported = {
        let v: Vec<u32> = version.split('.').map(|p| p.parse().unwrap_or(0)).collect();
        (
            v.first().copied().unwrap_or(0),
            v.get(1).copied().unwrap_or(0),
        ) >= (3, 35)
    };

    let pk: i64 = sqlx::query_scalar(
        "SELECT COALESCE(MAX(pk), 0) FROM pragma_table_info(?2, ?1) WHERE name = ?3 COLLATE NOCASE",
    )
    .bind(schema.clone())
    .bind(name.clone())
    .bind(column.clone())
    .fetch_one(&mut *conn)
    .await?;
    if pk > 0 {
        return Err(input_error(format!(
            "{}.{column} is part of the primary key: tidemark does not drop it",
            target.table
        )));
    }
    let fk: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM pragma_foreign_key_list(?2, ?1) WHERE \"from\" = ?3 COLLATE NOCASE",
    )
    .bind(schema.clone())
    .bind(name.clone())
    .bind(column.clone())
    .fetch_one(&mut *conn)
    .await?;

    // Indexes: those that use the column go; an automatic one (UNIQUE) needs the rebuild.
    let index_rows = sqlx::query(&format!(
        "SELECT name, sql FROM {master} WHERE type = 'index' AND tbl_name = ? COLLATE NOCASE ORDER BY name"
    ))
    .bind(name.clone())
    .fetch_all(&mut *conn)
    .await?;
    let mut drop_indexes = Vec::new();
    let mut keep_indexes = Vec::new();
    let mut unique_on_column = false;
    for r in &index_rows {
        let index = text(r, "name")?.unwrap_or_default();
        let sql = text(r, "sql")?;
        let cols: Vec<String> = {
            let rows = sqlx::query("SELECT name FROM pragma_index_info(?1, ?2)")
                .bind(index.clone())
                .bind(schema.clone())
                .fetch_all(&mut *conn)
                .await?;
            rows.iter()
                .filter_map(|r| text(r, "name").ok().flatten())
                .collect()
        };
        let uses = cols.iter().any(|c| c.eq_ignore_ascii_case(column))
            || sql.as_deref().is_some_and(|s| {
                crate::sql_text::identifiers(s)
                    .iter()
                    .any(|i| i.eq_ignore_ascii_case(column))
            });
        match (uses, sql) {
            (true, Some(_)) => drop_indexes.push(index),
            (true, None) => unique_on_column = true,
            (false, Some(sql)) => keep_indexes.push(sql),
            (false, None) => {}
        }
    }

    let parts = split_create_table(&table_sql).ok_or_else(|| {
        anyhow!(
            "cannot read the CREATE TABLE statement of {}: {table_sql}",
            target.table
        )
    })?;
    let mut kept = Vec::new();
    let mut dropped_constraints = Vec::new();
    let mut found = false;
    for element in &parts.elements {
        let idents = crate::sql_text::identifiers(element);
        let first = idents.first().cloned().unwrap_or_default();
        let is_constraint = ["CONSTRAINT", "PRIMARY", "UNIQUE", "CHECK", "FOREIGN"]
            .iter()
            .any(|k| first.eq_ignore_ascii_case(k))
            && !element.trim_start().starts_with(['"', '`', '[']);
        let mentions = idents.iter().any(|i| i.eq_ignore_ascii_case(column));
        if !is_constraint && first.eq_ignore_ascii_case(column) {
            found = true;
        } else if mentions && is_constraint {
            dropped_constraints.push(element.trim().to_string());
        } else if mentions {
            return Err(input_error(format!(
                "{}: the definition of another column uses {column} ({}): tidemark does not drop it",
                target.table,
                element.trim()
            )));
        } else {
            kept.push(element.trim().to_string());
        }
    }
    if !found {
        bail!(
            "cannot find the definition of {column} in the CREATE TABLE statement of {}",
            target.table
        );
    }
    let in_place =
        in_place_supported && !unique_on_column && fk == 0 && dropped_constraints.is_empty();

    let mut notes = Vec::new();
    for index in &drop_indexes {
        notes.push(format!(
            "index {index} uses {column} and is dropped with it"
        ));
    }
    let mut steps = vec![Step::Sql(busy)];
    let mut on_failure = vec!["ROLLBACK".to_string()];
    if in_place {
        steps.push(Step::Sql("BEGIN IMMEDIATE".into()));
        steps.push(Step::Verify);
        for index in &drop_indexes {
            steps.push(Step::Sql(format!("DROP INDEX {qs}.{}", d.quote(index))));
        }
        steps.push(Step::Sql(format!(
            "ALTER TABLE {table} DROP COLUMN {}",
            d.quote(column)
        )));
        steps.push(Step::Sql("COMMIT".into()));
        return Ok(Plan {
            steps,
            on_failure,
            notes,
        });
    }

    // The rebuild SQLite documents ("Making Other Kinds Of Table Schema Changes").
    notes.push(format!(
        "SQLite {version} cannot drop {column} in place ({}): the table is rebuilt without it",
        [
            (!in_place_supported).then_some("SQLite before 3.35"),
            unique_on_column.then_some("a UNIQUE constraint"),
            (fk > 0).then_some("a foreign key"),
            (!dropped_constraints.is_empty()).then_some("a table constraint"),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", ")
    ));
    for c in &dropped_constraints {
        notes.push(format!(
            "the table constraint `{c}` uses {column} and is dropped with it"
        ));
    }
    let fk_on: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
        .fetch_one(&mut *conn)
        .await?;
    let copy_cols: Vec<String> = {
        let rows = sqlx::query(
            "SELECT name FROM pragma_table_xinfo(?2, ?1) WHERE hidden = 0 ORDER BY cid",
        )
        .bind(schema.clone())
        .bind(name.clone())
        .fetch_all(&mut *conn)
        .await?;
        rows.iter()
            .filter_map(|r| text(r, "name").ok().flatten())
            .filter(|c| !c.eq_ignore_ascii_case(column))
            .map(|c| d.quote(&c))
            .collect()
    };
    let new_name = format!("tidemark_rebuild_{name}");
    let new_table = format!("{qs}.{}", d.quote(&new_name));
    if fk_on != 0 {
        steps.push(Step::Sql("PRAGMA foreign_keys = OFF".into()));
    }
    steps.push(Step::Sql("BEGIN IMMEDIATE".into()));
    steps.push(Step::Verify);
    steps.push(Step::Sql(format!(
        "CREATE TABLE {new_table} (\n  {}\n){}",
        kept.join(",\n  "),
        parts.tail
    )));
    let cols = copy_cols.join(", ");
    steps.push(Step::Sql(format!(
        "INSERT INTO {new_table} ({cols}) SELECT {cols} FROM {table}"
    )));
    steps.push(Step::Sql(format!("DROP TABLE {table}")));
    steps.push(Step::Sql("PRAGMA legacy_alter_table = ON".into()));
    steps.push(Step::Sql(format!(
        "ALTER TABLE {new_table} RENAME TO {}",
        d.quote(&name)
    )));
    steps.push(Step::Sql("PRAGMA legacy_alter_table = OFF".into()));
    for sql in keep_indexes.iter().chain(own_triggers.iter()) {
        steps.push(Step::Sql(sql.clone()));
    }
    steps.push(Step::ForeignKeyCheck(format!(
        "PRAGMA {qs}.foreign_key_check({})",
        d.quote(&name)
    )));
    steps.push(Step::Sql("COMMIT".into()));
    on_failure.push("PRAGMA legacy_alter_table = OFF".into());
    if fk_on != 0 {
        steps.push(Step::Sql("PRAGMA foreign_keys = ON".into()));
        on_failure.push("PRAGMA foreign_keys = ON".into());
    }
    Ok(Plan {
        steps,
        on_failure,
        notes,
    })
}

/// A CREATE TABLE statement cut at its top-level parentheses: the column definitions and
/// table constraints between them, and what follows (`WITHOUT ROWID`, `STRICT`).
#[derive(Debug, Clone, PartialEq)]
pub struct CreateTableParts {
    /// Column definitions and table constraints, in order, as written.
    pub elements: Vec<String>,
    /// The text after the closing parenthesis.
    pub tail: String,
}

/// Splits a CREATE TABLE statement (quotes, brackets and comments respected). None when it has
/// no parenthesised definition list (`CREATE TABLE … AS SELECT`).
pub fn split_create_table(sql: &str) -> Option<CreateTableParts> {
    let chars: Vec<char> = sql.chars().collect();
    let mut i = 0;
    let mut depth = 0usize;
    let mut start = None;
    let mut elements = Vec::new();
    let mut current = String::new();
    while i < chars.len() {
        let c = chars[i];
        // Quoted text and comments are copied whole.
        let close = match c {
            '\'' => Some('\''),
            '"' => Some('"'),
            '`' => Some('`'),
            '[' => Some(']'),
            _ => None,
        };
        if let Some(close) = close {
            let from = i;
            i += 1;
            while i < chars.len() {
                if chars[i] == close {
                    if close != ']' && chars.get(i + 1) == Some(&close) {
                        i += 2;
                        continue;
                    }
                    break;
                }
                i += 1;
            }
            if depth > 0 {
                current.extend(&chars[from..(i + 1).min(chars.len())]);
            }
            i += 1;
            continue;
        }
        if c == '-' && chars.get(i + 1) == Some(&'-') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if c == '/' && chars.get(i + 1) == Some(&'*') {
            i += 2;
            while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                i += 1;
            }
            i += 2;
            continue;
        }
        match c {
            '(' => {
                depth += 1;
                if depth == 1 {
                    start = Some(i);
                } else {
                    current.push(c);
                }
            }
            ')' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    elements.push(current.trim().to_string());
                    let tail: String = chars[i + 1..].iter().collect();
                    start?;
                    return Some(CreateTableParts {
                        elements,
                        tail: tail.trim_end().trim_end_matches(';').to_string(),
                    });
                }
                current.push(c);
            }
            ',' if depth == 1 => {
                elements.push(current.trim().to_string());
                current.clear();
            }
            _ => {
                if depth > 0 {
                    current.push(c);
                }
            }
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_table_split() {
        let sql = "CREATE TABLE \"t\" (a INT, \"b,c\" TEXT DEFAULT 'x,y', n INT CHECK (n > 0), -- note, here\n PRIMARY KEY (a, \"b,c\"), CHECK (n < 10)) WITHOUT ROWID";
        let p = split_create_table(sql).unwrap();
        assert_eq!(
            p.elements,
            vec![
                "a INT",
                "\"b,c\" TEXT DEFAULT 'x,y'",
                "n INT CHECK (n > 0)",
                "PRIMARY KEY (a, \"b,c\")",
                "CHECK (n < 10)"
            ]
        );
        assert_eq!(p.tail, " WITHOUT ROWID");
        assert!(split_create_table("CREATE TABLE t AS SELECT 1").is_none());
    }

    #[test]
    fn identifiers_skip_literals() {
        assert_eq!(
            crate::sql_text::identifiers(
                "SELECT [a b], 'unread_count', `x` FROM \"t\" -- unread_count"
            ),
            vec!["SELECT", "a b", "x", "FROM", "t"]
        );
    }
}
