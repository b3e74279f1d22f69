//! Mysql's catalog reading ([`Catalog`]).

use anyhow::Result;
use sqlx::AnyConnection;

use super::Mysql;
use crate::dialect::collation::Collation;
use crate::dialect::traits::{Catalog, Spelling};
use crate::dialect::types::{BoxFuture, DdlProbe, RefusedProbe, ReplicaState};

impl Catalog for Mysql {
    fn replica_state<'a>(
        &'a self,
        primary: &'a mut AnyConnection,
        replica: &'a mut AnyConnection,
        limit: std::time::Duration,
    ) -> BoxFuture<'a, Result<ReplicaState>> {
        Box::pin(super::replica::state(primary, replica, limit))
    }

    /// `information_schema.TABLES.ENGINE` of each table, in its schema or the connection's
    /// database.
    fn spider_tables<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        tables: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<String>>> {
        Box::pin(async move {
            let mut spider = Vec::new();
            for table in tables {
                let (schema, name) = split_table(table);
                let n: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM information_schema.TABLES \
                     WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? \
                     AND UPPER(ENGINE) = 'SPIDER'",
                )
                .bind(schema)
                .bind(name)
                .fetch_one(&mut *conn)
                .await?;
                if n > 0 && !spider.contains(table) {
                    spider.push(table.clone());
                }
            }
            Ok(spider)
        })
    }

    /// `MEDIUMINT` (signed or not) travels as the wire type `Int24`, which sqlx's Any driver
    /// does not map (`Any driver does not support MySql type … Int24`).
    fn key_type_unreadable(&self, declared: &str) -> bool {
        declared
            .trim()
            .to_ascii_lowercase()
            .starts_with("mediumint")
    }

    fn time_has_zone(&self, declared: &str) -> bool {
        // TIMESTAMP is kept in UTC and shown in the session's zone; DATETIME is wall time.
        let d = declared.trim().to_ascii_lowercase();
        d.split(['(', ' ']).next() == Some("timestamp")
    }

    /// The column type of a zero-row `SELECT` of the expression, from the result set's
    /// metadata (the server reports it for a prepared statement without running it). sqlx's
    /// generic driver names only some types and refuses the others with an error that names
    /// the protocol's type (`Tiny`, `NewDecimal`, `Datetime`…): both are mapped to type names
    /// [`crate::dialect::TypeClass::of_server_type`] reads. MySQL reports `TEXT` columns as BLOBs: named
    /// `text/blob`.
    fn expression_type<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        expr: &'a str,
        from: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>>> {
        Box::pin(async move {
            use sqlx::{Column, Executor, TypeInfo};
            let sql = format!("SELECT ({expr}) AS v FROM {from} AND 1 = 0");
            let name = match (&mut *conn).describe(&sql).await {
                Ok(d) => d
                    .columns()
                    .first()
                    .map(|c| c.type_info().name().to_ascii_lowercase()),
                Err(sqlx::Error::AnyDriverError(e)) => {
                    // "Any driver does not support MySql type MySqlTypeInfo { type: X, … }"
                    let msg = e.to_string();
                    msg.split("type: ")
                        .nth(1)
                        .and_then(|r| r.split([',', ' ', '}']).next())
                        .map(str::to_string)
                }
                Err(e) => return Err(e.into()),
            };
            Ok(name.and_then(|n| {
                let n = match n.as_str() {
                    "null" => return None,
                    "blob" => "text/blob".to_string(),
                    "Tiny" | "Int24" | "Year" | "Bit" => format!("int ({n})"),
                    "Decimal" | "NewDecimal" => "decimal".to_string(),
                    "Date" | "Time" | "Datetime" | "Timestamp" | "NewDate" => {
                        n.to_ascii_lowercase()
                    }
                    "Enum" | "Set" => format!("{} (text)", n.to_ascii_lowercase()),
                    _ => n.to_ascii_lowercase(),
                };
                Some(n)
            }))
        })
    }

    /// An integer type, but not `BIGINT UNSIGNED` (up to 18446744073709551615).
    fn holds_only_int64(&self, declared: &str) -> bool {
        let lower = declared.to_ascii_lowercase();
        self.type_class(declared) == crate::dialect::TypeClass::Integer
            && !(lower.starts_with("bigint") && lower.contains("unsigned"))
    }

    /// The schema (NULL: the current database) and the table name.
    fn catalog_table_binds(&self, table: &str) -> Vec<Option<String>> {
        let (schema, name) = split_table(table);
        vec![schema, Some(name)]
    }

    /// `information_schema.COLUMNS`: `COLLATION_NAME` (NULL for a type without one) and
    /// `CHARACTER_SET_NAME`; exact for `binary` and the `_bin` collations.
    fn column_collation<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        table: &'a str,
        column: &'a str,
    ) -> BoxFuture<'a, Result<Option<Collation>>> {
        Box::pin(async move {
            let sql = "SELECT CAST(COLLATION_NAME AS CHAR(255)) AS name, \
                       CAST(CHARACTER_SET_NAME AS CHAR(255)) AS charset \
                       FROM information_schema.COLUMNS \
                       WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? \
                       AND COLUMN_NAME = ? AND COLLATION_NAME IS NOT NULL";
            let mut q = sqlx::query(sql);
            for bind in self.catalog_table_binds(table) {
                q = q.bind(bind);
            }
            let Some(row) = q
                .bind(column.to_string())
                .fetch_optional(&mut *conn)
                .await?
            else {
                return Ok(None);
            };
            let name = crate::values::text(&row, "name")?.unwrap_or_default();
            Ok(Some(Collation {
                exact: name == "binary" || name.ends_with("_bin"),
                sql_name: name.clone(),
                name,
                detail: String::new(),
                charset: crate::values::text(&row, "charset")?.unwrap_or_default(),
            }))
        })
    }

    fn view_count_query(&self, table: &str) -> (String, Vec<Option<String>>) {
        (
            "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? AND TABLE_TYPE = 'VIEW'"
                .to_string(),
            self.catalog_table_binds(table),
        )
    }

    /// `sql/mysql/column_type.sql` appends ` CHARACTER SET … COLLATE …` to character types.
    fn split_type_attributes<'a>(&self, declared: &'a str) -> (&'a str, &'a str) {
        match declared.find(" CHARACTER SET ") {
            Some(i) => (&declared[..i], &declared[i..]),
            None => (declared, ""),
        }
    }

    fn current_user_sql(&self) -> Option<&'static str> {
        Some("SELECT CAST(CURRENT_USER() AS CHAR(255))")
    }

    /// `user@host` as `'user'@'host'`.
    fn grantee(&self, user: &str) -> String {
        match user.rsplit_once('@') {
            Some((u, h)) => format!("'{u}'@'{h}'"),
            None => format!("'{user}'"),
        }
    }

    /// `ALTER TABLE t FORCE, ALGORITHM=INSTANT`: refused for want of ALTER (1142), else
    /// refused because a rebuild is never instant (1845). `LOCK TABLES` (the contract's DDL
    /// runs under `LOCK TABLES … WRITE`, a database-wide privilege): a READ lock on tidemark's
    /// own archive table, released at once (the counter's table is never locked by the
    /// probe). With `drop_table`, `ALTER TABLE t DROP PARTITION tidemark_privilege_probe`
    /// (needs ALTER and DROP; refused as 1505 on a table without partitions), skipped if a
    /// partition of that name exists.
    fn ddl_privilege_probe(&self, table: &str, drop_table: bool) -> Option<DdlProbe> {
        let t = self.quote(table);
        let mut probes = vec![
            RefusedProbe {
                privileges: "ALTER",
                sql: format!("ALTER TABLE {t} FORCE, ALGORITHM=INSTANT"),
                skip_if: None,
                undo: None,
                on_database: false,
                why: "",
            },
            RefusedProbe {
                privileges: "LOCK TABLES",
                sql: format!("LOCK TABLES {} READ", crate::tables::ARCHIVE_TABLE),
                skip_if: None,
                undo: Some("UNLOCK TABLES".to_string()),
                on_database: true,
                why: "the DDL runs under LOCK TABLES … WRITE",
            },
        ];
        if drop_table {
            probes.push(RefusedProbe {
                privileges: "ALTER, DROP",
                sql: format!("ALTER TABLE {t} DROP PARTITION tidemark_privilege_probe"),
                skip_if: Some((
                    "SELECT COUNT(*) FROM information_schema.PARTITIONS \
                     WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? \
                     AND PARTITION_NAME = 'tidemark_privilege_probe'"
                        .to_string(),
                    self.catalog_table_binds(table),
                )),
                undo: None,
                on_database: false,
                why: "",
            });
        }
        Some(DdlProbe::Refused(probes))
    }

    /// `CREATE TEMPORARY TABLE` of a probe table, dropped again at once: each batch plans its
    /// watermarks into the temporary table `tm_plan`.
    fn backfill_privilege_probes(&self) -> Vec<RefusedProbe> {
        vec![RefusedProbe {
            privileges: "CREATE TEMPORARY TABLES",
            sql: "CREATE TEMPORARY TABLE tm_privilege_probe (x INT)".to_string(),
            skip_if: None,
            undo: Some("DROP TEMPORARY TABLE tm_privilege_probe".to_string()),
            on_database: true,
            why: "each batch plans its watermarks in a temporary table before it writes",
        }]
    }

    fn table_columns_binds(&self, table: &str) -> Vec<Option<String>> {
        match table.split_once('.') {
            Some((schema, name)) => vec![Some(schema.to_string()), Some(name.to_string())],
            None => vec![None, Some(table.to_string())],
        }
    }

    fn statement_statistics<'a>(
        &'a self,
        conn: &'a mut sqlx::AnyConnection,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<&'static str, String>> + Send + 'a>,
    > {
        Box::pin(async move {
            let on: Result<i64, _> =
                sqlx::query_scalar("SELECT CAST(@@performance_schema AS SIGNED)")
                    .fetch_one(&mut *conn)
                    .await;
            match on {
                Ok(0) => return Err("performance_schema is OFF on this server".into()),
                Ok(_) => {}
                Err(e) => {
                    let msg = e
                        .as_database_error()
                        .map(|d| d.message().to_string())
                        .unwrap_or_else(|| e.to_string());
                    return Err(format!("cannot read @@performance_schema: {msg}"));
                }
            }
            let consumer: Result<Option<String>, _> = sqlx::query_scalar(
                "SELECT CONVERT(ENABLED USING utf8mb4) FROM performance_schema.setup_consumers WHERE NAME = 'statements_digest'",
            )
            .fetch_optional(&mut *conn)
            .await;
            if let Ok(Some(enabled)) = consumer {
                if enabled != "YES" {
                    return Err(
                        "the performance_schema consumer statements_digest is disabled".into(),
                    );
                }
            }
            Ok("performance_schema.events_statements_summary_by_digest")
        })
    }

    fn inspect_columns_query(&self) -> &'static str {
        "SELECT CAST('' AS CHAR), CAST(c.TABLE_NAME AS CHAR), \
                CAST(CASE WHEN t.TABLE_TYPE = 'VIEW' THEN 'view' ELSE 'table' END AS CHAR), \
                CAST(c.COLUMN_NAME AS CHAR), CAST(c.COLUMN_TYPE AS CHAR), \
                CAST(c.ORDINAL_POSITION AS SIGNED) \
         FROM information_schema.COLUMNS c \
         JOIN information_schema.TABLES t \
           ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME \
         WHERE c.TABLE_SCHEMA = DATABASE() \
         ORDER BY 2, 6"
    }

    fn inspect_foreign_keys_query(&self) -> &'static str {
        "SELECT CAST('' AS CHAR), CAST(TABLE_NAME AS CHAR), CAST(COLUMN_NAME AS CHAR), \
                CAST(REFERENCED_TABLE_NAME AS CHAR) \
         FROM information_schema.KEY_COLUMN_USAGE \
         WHERE TABLE_SCHEMA = DATABASE() AND REFERENCED_TABLE_NAME IS NOT NULL \
         ORDER BY 2, 3"
    }

    fn inspect_indexes_query(&self) -> &'static str {
        "SELECT CAST('' AS CHAR), CAST(TABLE_NAME AS CHAR), CAST(INDEX_NAME AS CHAR), \
                CAST(1 - NON_UNIQUE AS SIGNED), CAST(0 AS SIGNED), \
                CAST(SEQ_IN_INDEX AS SIGNED), CAST(COLUMN_NAME AS CHAR) \
         FROM information_schema.STATISTICS \
         WHERE TABLE_SCHEMA = DATABASE() \
         ORDER BY 2, 3, 6"
    }
}

/// Splits `schema.table` (unquoted) into its schema, if any, and the table's name.
fn split_table(table: &str) -> (Option<String>, String) {
    match table.split_once('.') {
        Some((s, t)) => (Some(s.to_string()), t.to_string()),
        None => (None, table.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use crate::dialect::Dialect;
    use crate::schema::{key_type, KeyKind};

    /// Moved from `schema.rs` with the MySQL key types it checks.
    #[test]
    fn key_types_keep_the_collation() {
        let k = key_type(
            Dialect::Mysql,
            "varchar(255) CHARACTER SET ascii COLLATE ascii_bin",
            "x",
        )
        .unwrap();
        assert_eq!(
            (k.kind, k.ddl.as_str()),
            (
                KeyKind::Text,
                "varchar(255) CHARACTER SET ascii COLLATE ascii_bin"
            )
        );
        let k = key_type(
            Dialect::Mysql,
            "mediumtext CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
            "x",
        )
        .unwrap();
        assert_eq!(
            k.ddl,
            "VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
        );
        assert_eq!(
            key_type(Dialect::Mysql, "bigint(20) unsigned", "x")
                .unwrap()
                .kind,
            KeyKind::Integer
        );
    }
}
