//! SQLite's drop of a counter column or table ([`ColumnDrop`]): a drop that no trigger or view
//! elsewhere still uses, and a column dropped in place (SQLite 3.35+, "ALTER TABLE … DROP
//! COLUMN") or by the table rebuild SQLite documents ("Making Other Kinds Of Table Schema
//! Changes", sqlite.org/lang_altertable.html#otheralter) when a UNIQUE, foreign key or table
//! constraint uses it.

use anyhow::{anyhow, bail, Result};
use sqlx::AnyConnection;
use std::time::Duration;

use super::Sqlite;
use crate::dialect::traits::{ColumnDrop, Spelling};
use crate::dialect::types::{BoxFuture, DropPlan, DropStep, DropTarget};
use crate::error::input_error;
use crate::values::text;

impl ColumnDrop for Sqlite {
    /// See the module documentation; a view that uses the column refuses the plan only when
    /// it is to be run (`execute`) or the whole table goes (in a dry run the gate names it).
    fn plan_drop<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        target: &'a DropTarget,
        lock_timeout: Duration,
        execute: bool,
    ) -> BoxFuture<'a, Result<DropPlan>> {
        Box::pin(plan(conn, target, lock_timeout, execute))
    }
}

/// The table a drop is about, with the names the statements use.
struct Table {
    /// Its schema (`main` when the mapping names none).
    schema: String,
    /// Its name, unquoted.
    name: String,
    /// The schema, quoted.
    qs: String,
    /// `schema.table` as the mapping writes it, quoted.
    quoted: String,
    /// The schema's `sqlite_master`.
    master: String,
}

impl Table {
    fn of(target: &DropTarget) -> Table {
        let (schema, name) = match target.table.split_once('.') {
            Some((s, t)) => (s.to_string(), t.to_string()),
            None => ("main".to_string(), target.table.clone()),
        };
        let qs = Sqlite.quote(&schema);
        Table {
            master: format!("{qs}.sqlite_master"),
            quoted: Sqlite.quote(&target.table),
            schema,
            name,
            qs,
        }
    }
}

/// The plan for `target` (see [`ColumnDrop::plan_drop`]).
async fn plan(
    conn: &mut AnyConnection,
    target: &DropTarget,
    lock_timeout: Duration,
    execute: bool,
) -> Result<DropPlan> {
    let t = Table::of(target);
    let table_sql = table_definition(conn, &t)
        .await?
        .ok_or_else(|| input_error(format!("table {:?} not found", target.table)))?;
    let own_triggers = refuse_dependents(conn, &t, target, execute).await?;
    let busy = format!("PRAGMA busy_timeout = {}", lock_timeout.as_millis().max(1));
    if target.drop_table {
        return Ok(DropPlan {
            steps: vec![
                DropStep::Sql(busy),
                DropStep::Sql("BEGIN IMMEDIATE".into()),
                DropStep::Verify,
                DropStep::Sql(format!("DROP TABLE {}", t.quoted)),
                DropStep::Sql("COMMIT".into()),
            ],
            on_failure: vec!["ROLLBACK".into()],
            notes: Vec::new(),
        });
    }
    let facts = column_facts(conn, &t, &target.column).await?;
    if facts.pk {
        return Err(input_error(format!(
            "{}.{} is part of the primary key: tidemark does not drop it",
            target.table, target.column
        )));
    }
    let definition = split_definition(&table_sql, target)?;
    let in_place = facts.in_place_supported
        && !facts.unique_on_column
        && !facts.fk
        && definition.dropped_constraints.is_empty();
    let notes: Vec<String> = facts
        .drop_indexes
        .iter()
        .map(|index| {
            format!(
                "index {index} uses {} and is dropped with it",
                target.column
            )
        })
        .collect();
    if in_place {
        return Ok(in_place_plan(&t, target, &facts, busy, notes));
    }
    rebuild_plan(
        conn,
        &t,
        target,
        &facts,
        &definition,
        &own_triggers,
        busy,
        notes,
    )
    .await
}

/// The table's `CREATE TABLE` statement, or None when it does not exist.
async fn table_definition(conn: &mut AnyConnection, t: &Table) -> Result<Option<String>> {
    let row = sqlx::query(&format!(
        "SELECT sql FROM {} WHERE type = 'table' AND name = ? COLLATE NOCASE",
        t.master
    ))
    .bind(t.name.clone())
    .fetch_optional(&mut *conn)
    .await?;
    Ok(match row {
        Some(r) => text(&r, "sql")?,
        None => None,
    })
}

/// Refuses a trigger (or, with `execute` or a table drop, a view) elsewhere that uses the
/// column (or the table, when it is dropped whole): SQLite would leave it broken. Returns the
/// table's own triggers, which the rebuild creates again.
///
/// Errors (exit 2): the first such object, named.
async fn refuse_dependents(
    conn: &mut AnyConnection,
    t: &Table,
    target: &DropTarget,
    execute: bool,
) -> Result<Vec<String>> {
    let objects = sqlx::query(&format!(
        "SELECT type, name, tbl_name, sql FROM {} WHERE type IN ('trigger', 'view') AND sql IS NOT NULL",
        t.master
    ))
    .fetch_all(&mut *conn)
    .await?;
    let column = &target.column;
    let mut own_triggers = Vec::new();
    for r in &objects {
        let kind = text(r, "type")?.unwrap_or_default();
        let obj = text(r, "name")?.unwrap_or_default();
        let on = text(r, "tbl_name")?.unwrap_or_default();
        let sql = text(r, "sql")?.unwrap_or_default();
        let idents = crate::sql_text::identifiers(&sql);
        let mentions = |n: &str| idents.iter().any(|i| i.eq_ignore_ascii_case(n));
        let on_table = kind == "trigger" && on.eq_ignore_ascii_case(&t.name);
        let uses = if target.drop_table {
            !on_table && mentions(&t.name)
        } else {
            mentions(&t.name) && mentions(column)
        };
        if uses && (kind == "trigger" || execute || target.drop_table) {
            return Err(input_error(format!(
                "{kind} {obj:?} uses {}: change or drop it first (SQLite would leave it broken)",
                if target.drop_table {
                    format!("table {}", t.name)
                } else {
                    format!("{}.{column}", t.name)
                }
            )));
        }
        if on_table {
            own_triggers.push(sql);
        }
    }
    Ok(own_triggers)
}

/// What decides between the drop in place and the rebuild.
struct ColumnFacts {
    /// The library's version.
    version: String,
    /// SQLite 3.35 or later: `ALTER TABLE … DROP COLUMN` exists.
    in_place_supported: bool,
    /// The column is part of the primary key.
    pk: bool,
    /// A foreign key of the table uses the column.
    fk: bool,
    /// An automatic index (a UNIQUE constraint) uses the column.
    unique_on_column: bool,
    /// The indexes that use the column (dropped with it).
    drop_indexes: Vec<String>,
    /// The `CREATE INDEX` statements of the other indexes (created again by the rebuild).
    keep_indexes: Vec<String>,
}

/// The version, the column's keys and the indexes that use it.
async fn column_facts(conn: &mut AnyConnection, t: &Table, column: &str) -> Result<ColumnFacts> {
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
    .bind(t.schema.clone())
    .bind(t.name.clone())
    .bind(column.to_string())
    .fetch_one(&mut *conn)
    .await?;
    let fk: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM pragma_foreign_key_list(?2, ?1) WHERE \"from\" = ?3 COLLATE NOCASE",
    )
    .bind(t.schema.clone())
    .bind(t.name.clone())
    .bind(column.to_string())
    .fetch_one(&mut *conn)
    .await?;
    // Indexes: those that use the column go; an automatic one (UNIQUE) needs the rebuild.
    let index_rows = sqlx::query(&format!(
        "SELECT name, sql FROM {} WHERE type = 'index' AND tbl_name = ? COLLATE NOCASE ORDER BY name",
        t.master
    ))
    .bind(t.name.clone())
    .fetch_all(&mut *conn)
    .await?;
    let mut facts = ColumnFacts {
        version,
        in_place_supported,
        pk: pk > 0,
        fk: fk > 0,
        unique_on_column: false,
        drop_indexes: Vec::new(),
        keep_indexes: Vec::new(),
    };
    for r in &index_rows {
        let index = text(r, "name")?.unwrap_or_default();
        let sql = text(r, "sql")?;
        let cols: Vec<String> = {
            let rows = sqlx::query("SELECT name FROM pragma_index_info(?1, ?2)")
                .bind(index.clone())
                .bind(t.schema.clone())
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
            (true, Some(_)) => facts.drop_indexes.push(index),
            (true, None) => facts.unique_on_column = true,
            (false, Some(sql)) => facts.keep_indexes.push(sql),
            (false, None) => {}
        }
    }
    Ok(facts)
}

/// The table's definition without the column: the elements kept, and the table constraints
/// that use the column (dropped with it).
struct Definition {
    /// Column definitions and constraints kept, as written.
    kept: Vec<String>,
    /// Table constraints that use the column.
    dropped_constraints: Vec<String>,
    /// What follows the definition list (`WITHOUT ROWID`, `STRICT`).
    tail: String,
}

/// Cuts the table's `CREATE TABLE` into what the rebuild keeps and what goes with the column.
///
/// Errors (exit 2): another column's definition uses the column; exit 3: the statement cannot
/// be read or does not define the column.
fn split_definition(table_sql: &str, target: &DropTarget) -> Result<Definition> {
    let column = &target.column;
    let parts = split_create_table(table_sql).ok_or_else(|| {
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
    Ok(Definition {
        kept,
        dropped_constraints,
        tail: parts.tail,
    })
}

/// `ALTER TABLE … DROP COLUMN` (SQLite 3.35+), after the indexes that use the column.
fn in_place_plan(
    t: &Table,
    target: &DropTarget,
    facts: &ColumnFacts,
    busy: String,
    notes: Vec<String>,
) -> DropPlan {
    let mut steps = vec![
        DropStep::Sql(busy),
        DropStep::Sql("BEGIN IMMEDIATE".into()),
        DropStep::Verify,
    ];
    for index in &facts.drop_indexes {
        steps.push(DropStep::Sql(format!(
            "DROP INDEX {}.{}",
            t.qs,
            Sqlite.quote(index)
        )));
    }
    steps.push(DropStep::Sql(format!(
        "ALTER TABLE {} DROP COLUMN {}",
        t.quoted,
        Sqlite.quote(&target.column)
    )));
    steps.push(DropStep::Sql("COMMIT".into()));
    DropPlan {
        steps,
        on_failure: vec!["ROLLBACK".to_string()],
        notes,
    }
}

/// The rebuild SQLite documents: a new table without the column, the rows copied, the old
/// table dropped and the new one renamed, its other indexes and its triggers created again,
/// then `PRAGMA foreign_key_check`; foreign keys off around it when they are on.
#[allow(clippy::too_many_arguments)] // one call site, in `plan`: what it learnt, step by step
async fn rebuild_plan(
    conn: &mut AnyConnection,
    t: &Table,
    target: &DropTarget,
    facts: &ColumnFacts,
    definition: &Definition,
    own_triggers: &[String],
    busy: String,
    mut notes: Vec<String>,
) -> Result<DropPlan> {
    let column = &target.column;
    notes.push(format!(
        "SQLite {} cannot drop {column} in place ({}): the table is rebuilt without it",
        facts.version,
        [
            (!facts.in_place_supported).then_some("SQLite before 3.35"),
            facts.unique_on_column.then_some("a UNIQUE constraint"),
            facts.fk.then_some("a foreign key"),
            (!definition.dropped_constraints.is_empty()).then_some("a table constraint"),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", ")
    ));
    for c in &definition.dropped_constraints {
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
        .bind(t.schema.clone())
        .bind(t.name.clone())
        .fetch_all(&mut *conn)
        .await?;
        rows.iter()
            .filter_map(|r| text(r, "name").ok().flatten())
            .filter(|c| !c.eq_ignore_ascii_case(column))
            .map(|c| Sqlite.quote(&c))
            .collect()
    };
    let table = &t.quoted;
    let new_table = format!(
        "{}.{}",
        t.qs,
        Sqlite.quote(&format!("tidemark_rebuild_{}", t.name))
    );
    let mut steps = vec![DropStep::Sql(busy)];
    let mut on_failure = vec!["ROLLBACK".to_string()];
    if fk_on != 0 {
        steps.push(DropStep::Sql("PRAGMA foreign_keys = OFF".into()));
    }
    steps.push(DropStep::Sql("BEGIN IMMEDIATE".into()));
    steps.push(DropStep::Verify);
    steps.push(DropStep::Sql(format!(
        "CREATE TABLE {new_table} (\n  {}\n){}",
        definition.kept.join(",\n  "),
        definition.tail
    )));
    let cols = copy_cols.join(", ");
    steps.push(DropStep::Sql(format!(
        "INSERT INTO {new_table} ({cols}) SELECT {cols} FROM {table}"
    )));
    steps.push(DropStep::Sql(format!("DROP TABLE {table}")));
    steps.push(DropStep::Sql("PRAGMA legacy_alter_table = ON".into()));
    steps.push(DropStep::Sql(format!(
        "ALTER TABLE {new_table} RENAME TO {}",
        Sqlite.quote(&t.name)
    )));
    steps.push(DropStep::Sql("PRAGMA legacy_alter_table = OFF".into()));
    for sql in facts.keep_indexes.iter().chain(own_triggers.iter()) {
        steps.push(DropStep::Sql(sql.clone()));
    }
    steps.push(DropStep::ForeignKeyCheck(format!(
        "PRAGMA {}.foreign_key_check({})",
        t.qs,
        Sqlite.quote(&t.name)
    )));
    steps.push(DropStep::Sql("COMMIT".into()));
    on_failure.push("PRAGMA legacy_alter_table = OFF".into());
    if fk_on != 0 {
        steps.push(DropStep::Sql("PRAGMA foreign_keys = ON".into()));
        on_failure.push("PRAGMA foreign_keys = ON".into());
    }
    Ok(DropPlan {
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
