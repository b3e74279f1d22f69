//! Sqlite's catalog reading ([`Catalog`]).

use anyhow::Result;
use sqlx::AnyConnection;

use super::Sqlite;
use crate::dialect::collation::Collation;
use crate::dialect::traits::{Catalog, Spelling};
use crate::dialect::types::{BoxFuture, TypeClass};
use crate::values::text;

impl Catalog for Sqlite {
    /// `typeof` of the first value that is not an integer or NULL (`text`, `real`, `blob`):
    /// SQLite declares no type for an expression, and a value's own type is what the stages
    /// would read.
    fn expression_type<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        expr: &'a str,
        from: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>>> {
        Box::pin(async move {
            let sql = format!(
                "SELECT typeof(tm_s.v) AS t FROM (SELECT ({expr}) AS v FROM {from}) tm_s \
                 WHERE typeof(tm_s.v) NOT IN ('integer', 'null') LIMIT 1"
            );
            match sqlx::query(&sql).fetch_optional(&mut *conn).await? {
                Some(row) => text(&row, "t"),
                None => Ok(None),
            }
        })
    }

    /// The schema (`main` when none is named) and the table name.
    fn catalog_table_binds(&self, table: &str) -> Vec<Option<String>> {
        let (schema, name) = match table.split_once('.') {
            Some((s, t)) => (s.to_string(), t.to_string()),
            None => ("main".to_string(), table.to_string()),
        };
        vec![Some(schema), Some(name)]
    }

    /// The `COLLATE` clause of the column's definition in the table's `CREATE TABLE` (SQLite
    /// keeps no other record of it); `BINARY`, SQLite's default, when it has none. None for a
    /// view (its column's collation is its expression's) or a column not found.
    fn column_collation<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        table: &'a str,
        column: &'a str,
    ) -> BoxFuture<'a, Result<Option<Collation>>> {
        Box::pin(async move {
            let (master, name) = match table.split_once('.') {
                Some((s, t)) => (format!("{}.sqlite_master", self.quote(s)), t),
                None => ("sqlite_master".to_string(), table),
            };
            let sql = format!("SELECT sql FROM {master} WHERE type = 'table' AND name = ?");
            let row = sqlx::query(&sql)
                .bind(name.to_string())
                .fetch_optional(&mut *conn)
                .await?;
            let Some(definition) = row.map(|r| text(&r, "sql")).transpose()?.flatten() else {
                return Ok(None);
            };
            Ok(
                declared_collation(&definition, column).map(|name| Collation {
                    exact: name == "BINARY",
                    sql_name: name.clone(),
                    name,
                    detail: String::new(),
                    charset: String::new(),
                }),
            )
        })
    }

    /// `sqlite_master` of the table's schema (an attached database has its own).
    fn view_count_query(&self, table: &str) -> (String, Vec<Option<String>>) {
        let (master, name) = match table.split_once('.') {
            Some((s, t)) => (format!("{}.sqlite_master", self.quote(s)), t),
            None => ("sqlite_master".to_string(), table),
        };
        (
            format!("SELECT COUNT(*) FROM {master} WHERE type = 'view' AND name = ?"),
            vec![Some(name.to_string())],
        )
    }

    fn table_columns_binds(&self, table: &str) -> Vec<Option<String>> {
        match table.split_once('.') {
            Some((schema, name)) => vec![Some(schema.to_string()), Some(name.to_string())],
            None => vec![Some("main".to_string()), Some(table.to_string())],
        }
    }

    fn statement_statistics<'a>(
        &'a self,
        _conn: &'a mut sqlx::AnyConnection,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<&'static str, String>> + Send + 'a>,
    > {
        Box::pin(async { Err("SQLite keeps no statement statistics".to_string()) })
    }

    fn inspect_columns_query(&self) -> &'static str {
        "SELECT '', m.name, m.type, p.name, p.type, p.cid + 1 \
         FROM sqlite_master m JOIN pragma_table_info(m.name) p \
         WHERE m.type IN ('table', 'view') AND m.name NOT LIKE 'sqlite\\_%' ESCAPE '\\' \
         ORDER BY 2, 6"
    }

    fn inspect_foreign_keys_query(&self) -> &'static str {
        "SELECT '', m.name, f.\"from\", f.\"table\" \
         FROM sqlite_master m JOIN pragma_foreign_key_list(m.name) f \
         WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite\\_%' ESCAPE '\\' \
         ORDER BY 2, 3"
    }

    fn inspect_indexes_query(&self) -> &'static str {
        // A rowid table's INTEGER PRIMARY KEY has no index of its own: table_info's pk is it.
        "SELECT '', m.name, il.name, il.\"unique\", il.partial, ii.seqno + 1, ii.name \
         FROM sqlite_master m \
         JOIN pragma_index_list(m.name) il \
         JOIN pragma_index_info(il.name) ii \
         WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite\\_%' ESCAPE '\\' \
         UNION ALL \
         SELECT '', m.name, 'PRIMARY KEY', 1, 0, p.pk, p.name \
         FROM sqlite_master m JOIN pragma_table_info(m.name) p \
         WHERE m.type = 'table' AND p.pk > 0 AND m.name NOT LIKE 'sqlite\\_%' ESCAPE '\\' \
           AND NOT EXISTS (SELECT 1 FROM pragma_index_list(m.name) l WHERE l.origin = 'pk') \
         ORDER BY 2, 3, 6"
    }

    fn type_class(&self, declared: &str) -> TypeClass {
        TypeClass::of_sqlite_type(declared)
    }

    fn dates_in_text(&self) -> bool {
        true
    }

    /// Never: an INTEGER column keeps 2.7 as a REAL and `'7abc'` as text.
    fn holds_only_int64(&self, _declared: &str) -> bool {
        false
    }
}

/// The collation a `CREATE TABLE` statement declares for `column` (upper case; `BINARY` when
/// it declares none), or None when the statement has no such column.
fn declared_collation(create_table: &str, column: &str) -> Option<String> {
    const CONSTRAINTS: [&str; 5] = ["CONSTRAINT", "PRIMARY", "UNIQUE", "CHECK", "FOREIGN"];
    let parts = super::ddl::split_create_table(create_table)?;
    parts.elements.iter().find_map(|element| {
        let words = crate::sql_text::identifiers(element);
        let first = words.first()?;
        if !first.eq_ignore_ascii_case(column)
            || CONSTRAINTS.iter().any(|c| first.eq_ignore_ascii_case(c))
        {
            return None;
        }
        let collate = words.iter().position(|w| w.eq_ignore_ascii_case("COLLATE"));
        Some(match collate.and_then(|i| words.get(i + 1)) {
            Some(name) => name.to_ascii_uppercase(),
            None => "BINARY".to_string(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::declared_collation;

    #[test]
    fn the_declared_collation_of_a_column() {
        let sql = "CREATE TABLE m (\"conv_id\" TEXT COLLATE nocase NOT NULL, id INT, note TEXT DEFAULT 'x COLLATE y', PRIMARY KEY (conv_id, id))";
        assert_eq!(
            declared_collation(sql, "conv_id").as_deref(),
            Some("NOCASE")
        );
        assert_eq!(
            declared_collation(sql, "CONV_ID").as_deref(),
            Some("NOCASE")
        );
        assert_eq!(declared_collation(sql, "note").as_deref(), Some("BINARY"));
        assert_eq!(declared_collation(sql, "id").as_deref(), Some("BINARY"));
        assert_eq!(declared_collation(sql, "missing"), None);
        assert_eq!(declared_collation("CREATE TABLE t AS SELECT 1", "a"), None);
    }
}
