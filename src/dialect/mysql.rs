//! MySQL 8 and MariaDB 10.6 or later (one server or a Galera cluster: the runner lock is then
//! a lock row, [`super::galera`]).

use anyhow::Result;
use sqlx::{AnyConnection, Row};
use std::time::Duration;

use super::runner_lock::{advisory_key, BoxFuture, LockAttempt, LockKind};
use super::{galera, SqlDialect};
use crate::values::text;

/// MySQL 8 and MariaDB 10.6 or later (one server or a Galera cluster).
#[derive(Debug, Clone, Copy)]
pub struct Mysql;

impl SqlDialect for Mysql {
    fn name(&self) -> &'static str {
        "mysql"
    }

    fn quote_part(&self, part: &str) -> String {
        format!("`{part}`")
    }

    fn placeholder(&self, _n: usize) -> String {
        "?".to_string()
    }

    fn int_cast(&self) -> &'static str {
        "SIGNED"
    }

    fn greatest(&self) -> &'static str {
        "GREATEST"
    }

    fn cte_materialized(&self) -> &'static str {
        ""
    }

    // ---- transactions, locks and catalog ----
    // (runner lock, lock timeouts, isolation, catalog queries, key types)

    fn begin_snapshot_sql(&self) -> &'static [&'static str] {
        &[
            "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",
            "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY",
        ]
    }

    fn begin_write_sql(&self) -> &'static str {
        "START TRANSACTION"
    }

    /// `innodb_lock_wait_timeout` (row locks) and `lock_wait_timeout` (metadata locks), in
    /// whole seconds, at least 1.
    fn lock_timeout_sql(&self, timeout: Duration) -> Vec<String> {
        let secs = timeout.as_secs().max(1);
        vec![
            format!("SET SESSION innodb_lock_wait_timeout = {secs}"),
            format!("SET SESSION lock_wait_timeout = {secs}"),
        ]
    }

    fn lock_wait_codes(&self) -> &'static [&'static str] {
        // The driver reports SQLSTATEs, not MySQL's error numbers: 1205 (lock wait timeout)
        // and 1213 (deadlock) are recognised by their messages.
        &[]
    }

    fn lock_wait_messages(&self) -> &'static [&'static str] {
        &["lock wait timeout", "deadlock"]
    }

    /// GET_LOCK names are server-wide (PostgreSQL advisory locks are per database): the
    /// database is part of the name, at most 64 characters in all.
    fn runner_lock_name<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        name: &'a str,
    ) -> BoxFuture<'a, Result<String>> {
        Box::pin(async move {
            let row = sqlx::query("SELECT DATABASE()")
                .fetch_one(&mut *conn)
                .await?;
            let db = text(&row, 0)?;
            Ok(format!(
                "{name}:{:016x}",
                advisory_key(&db.unwrap_or_default())
            ))
        })
    }

    /// A named lock (`GET_LOCK` with no wait, [`LockKind::Session`]); the holder is named from
    /// the process list. On a Galera node, where `GET_LOCK` is per node, a lock row
    /// ([`super::galera`], [`LockKind::Row`]). The only runner-lock call that asks the server
    /// whether it is a Galera node.
    fn try_runner_lock<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        name: &'a str,
    ) -> BoxFuture<'a, Result<LockAttempt>> {
        Box::pin(async move {
            if galera::is_galera(conn).await? {
                return galera::try_lock(conn, name).await;
            }
            let got: Option<i64> = sqlx::query_scalar("SELECT CAST(GET_LOCK(?, 0) AS SIGNED)")
                .bind(name.to_string())
                .fetch_one(&mut *conn)
                .await?;
            if got == Some(1) {
                return Ok(LockAttempt::Taken(LockKind::Session));
            }
            let holder = sqlx::query(
                "SELECT CAST(p.ID AS SIGNED), CAST(p.HOST AS CHAR(255)), CAST(p.TIME AS SIGNED) \
                 FROM information_schema.PROCESSLIST p WHERE p.ID = IS_USED_LOCK(?)",
            )
            .bind(name.to_string())
            .fetch_optional(&mut *conn)
            .await
            .ok()
            .flatten()
            .map(|r| {
                format!(
                    "connection {} from {}, for {} s",
                    r.try_get::<i64, _>(0).unwrap_or_default(),
                    text(&r, 1).ok().flatten().unwrap_or_default(),
                    r.try_get::<i64, _>(2).unwrap_or_default()
                )
            })
            .unwrap_or_else(|| "another connection".to_string());
            Ok(LockAttempt::Held(format!("held by {holder}")))
        })
    }

    /// The lock row's heartbeat on a Galera node ([`LockKind::Row`]); nothing, and no
    /// statement, for `GET_LOCK` ([`LockKind::Session`]: it lives with the session).
    fn refresh_runner_lock<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        name: &'a str,
        kind: LockKind,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            if kind == LockKind::Row {
                galera::refresh(conn, name).await?;
            }
            Ok(())
        })
    }

    /// `RELEASE_LOCK` ([`LockKind::Session`]), or the lock row deleted ([`LockKind::Row`]).
    fn release_runner_lock<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        name: &'a str,
        kind: LockKind,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            if kind == LockKind::Row {
                return galera::release(conn, name).await;
            }
            sqlx::query("SELECT RELEASE_LOCK(?)")
                .bind(name.to_string())
                .execute(&mut *conn)
                .await?;
            Ok(())
        })
    }

    fn runner_lock_held<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        name: &'a str,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            if galera::is_galera(conn).await? {
                return galera::held(conn, name).await;
            }
            let holder: Option<i64> = sqlx::query_scalar("SELECT CAST(IS_USED_LOCK(?) AS SIGNED)")
                .bind(name.to_string())
                .fetch_one(&mut *conn)
                .await?;
            Ok(holder.is_some())
        })
    }

    /// The column type of a zero-row `SELECT` of the expression, from the result set's
    /// metadata (the server reports it for a prepared statement without running it). sqlx's
    /// generic driver names only some types and refuses the others with an error that names
    /// the protocol's type (`Tiny`, `NewDecimal`, `Datetime`…): both are mapped to type names
    /// [`crate::column_types::family`] reads. MySQL reports `TEXT` columns as BLOBs: named
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

    /// The schema (NULL: the current database) and the table name.
    fn catalog_table_binds(&self, table: &str) -> Vec<Option<String>> {
        let (schema, name) = split_table(table);
        vec![schema, Some(name)]
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

    /// A CHAR or VARCHAR as declared, with its character set and collation; any other text
    /// type as `VARCHAR(255)` with the same attributes: a TEXT column cannot be part of a
    /// MySQL primary key without a prefix length.
    fn text_key_ddl(&self, declared: &str) -> String {
        let (base, attributes) = self.split_type_attributes(declared);
        let t = base.to_ascii_lowercase();
        if t.starts_with("varchar") || t.starts_with("char") {
            declared.to_string()
        } else {
            format!("VARCHAR(255){attributes}")
        }
    }

    fn text_key_hash(&self) -> Result<&'static str> {
        Ok("CRC32({col})")
    }

    fn seconds_ago(&self, secs: u64) -> String {
        format!("(CURRENT_TIMESTAMP(6) - INTERVAL {secs} SECOND)")
    }

    fn migrations(&self) -> &'static [(&'static str, &'static str)] {
        &[
            (
                "V1__watermarks",
                include_str!("../../migrations/mysql/V1__watermarks.sql"),
            ),
            (
                "V2__ledger",
                include_str!("../../migrations/mysql/V2__ledger.sql"),
            ),
            (
                "V3__counter_archive",
                include_str!("../../migrations/mysql/V3__counter_archive.sql"),
            ),
            (
                "V4__drift_rows",
                include_str!("../../migrations/mysql/V4__drift_rows.sql"),
            ),
        ]
    }

    fn transactional_ddl(&self) -> bool {
        false
    }

    fn index_name(&self, _schema: Option<&str>, index: &str) -> String {
        <dyn SqlDialect>::quote(self, index)
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
    fn ddl_privilege_probe(&self, table: &str, drop_table: bool) -> Option<super::DdlProbe> {
        let t = <dyn SqlDialect>::quote(self, table);
        let mut probes = vec![
            super::RefusedProbe {
                privileges: "ALTER",
                sql: format!("ALTER TABLE {t} FORCE, ALGORITHM=INSTANT"),
                skip_if: None,
                undo: None,
                on_database: false,
                why: "",
            },
            super::RefusedProbe {
                privileges: "LOCK TABLES",
                sql: format!("LOCK TABLES {} READ", crate::tables::ARCHIVE_TABLE),
                skip_if: None,
                undo: Some("UNLOCK TABLES".to_string()),
                on_database: true,
                why: "the DDL runs under LOCK TABLES … WRITE",
            },
        ];
        if drop_table {
            probes.push(super::RefusedProbe {
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
        Some(super::DdlProbe::Refused(probes))
    }

    /// `CREATE TEMPORARY TABLE` of a probe table, dropped again at once: each batch plans its
    /// watermarks into the temporary table `tm_plan`.
    fn backfill_privilege_probes(&self) -> Vec<super::RefusedProbe> {
        vec![super::RefusedProbe {
            privileges: "CREATE TEMPORARY TABLES",
            sql: "CREATE TEMPORARY TABLE tm_privilege_probe (x INT)".to_string(),
            skip_if: None,
            undo: Some("DROP TEMPORARY TABLE tm_privilege_probe".to_string()),
            on_database: true,
            why: "each batch plans its watermarks in a temporary table before it writes",
        }]
    }
    // ---- end transactions, locks and catalog ----

    // ---- ledger, gate and contract ----
    // (RETURNING, DDL plans, statement statistics, the SQLite rebuild)
    fn returning_id(&self) -> Option<&'static str> {
        None
    }

    fn last_insert_id(&self) -> Option<&'static str> {
        Some("SELECT CAST(LAST_INSERT_ID() AS SIGNED)")
    }

    fn table_columns_binds(&self, table: &str) -> Vec<Option<String>> {
        match table.split_once('.') {
            Some((schema, name)) => vec![Some(schema.to_string()), Some(name.to_string())],
            None => vec![None, Some(table.to_string())],
        }
    }

    fn lock_namespace_query(&self) -> Option<&'static str> {
        Some("SELECT DATABASE() AS name")
    }

    fn ddl_lock(&self, table: &str, lock_timeout: std::time::Duration) -> Vec<String> {
        let secs = lock_timeout.as_secs_f64().ceil().max(1.0) as u64;
        vec![
            format!("SET SESSION lock_wait_timeout = {secs}"),
            format!("SET SESSION innodb_lock_wait_timeout = {secs}"),
            format!("LOCK TABLES {table} WRITE, tidemark_counter_archive READ"),
        ]
    }

    fn ddl_commit(&self) -> &'static str {
        "UNLOCK TABLES"
    }

    fn ddl_on_failure(&self) -> &'static str {
        "UNLOCK TABLES"
    }

    fn instant_drop_version_query(&self) -> Option<&'static str> {
        Some("SELECT VERSION() AS version")
    }

    fn exact_decimal(&self) -> Option<&'static str> {
        Some("DECIMAL(65,0)")
    }

    fn text_type(&self) -> &'static str {
        "CHAR"
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
    // ---- end ledger, gate and contract ----

    // ---- stage SQL spellings ----
    // (values the audit and backfill templates need)

    fn audit_session(&self) -> &'static [&'static str] {
        // MariaDB (>= 10.3, in an executable comment MySQL skips) may otherwise compute the
        // per-conversation lowest threshold as a LATERAL DERIVED table once per message.
        &["SET @tidemark_audit = 1 /*M!100300 , SESSION optimizer_switch = 'split_materialized=off' */"]
    }

    fn backfill_write_begin_sql(&self) -> &'static [&'static str] {
        &[
            "SET TRANSACTION ISOLATION LEVEL READ COMMITTED",
            "START TRANSACTION",
        ]
    }

    fn backfill_plan_drop_sql(&self) -> Option<&'static str> {
        Some("DROP TEMPORARY TABLE IF EXISTS tm_plan")
    }
    // ---- end stage SQL spellings ----

    // ---- demo and generator ----
    // (what the demo and the generator need)

    fn generator_begin(&self) -> &'static str {
        "START TRANSACTION"
    }

    fn demo_begin_write(&self) -> &'static str {
        "BEGIN"
    }

    fn demo_watermark_upsert(&self) -> &'static str {
        "INSERT INTO read_watermarks (user_id, conversation_id, last_read_id) VALUES (?, ?, ?) \
             ON DUPLICATE KEY UPDATE last_read_id = GREATEST(last_read_id, VALUES(last_read_id))"
    }

    fn demo_database_is_file(&self) -> bool {
        false
    }
    // ---- end demo and generator ----

    // ---- inspect ----
    // (catalog reading for `tidemark inspect`)

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

    fn inspect_indexes_query(&self) -> &'static str {
        "SELECT CAST('' AS CHAR), CAST(TABLE_NAME AS CHAR), CAST(INDEX_NAME AS CHAR), \
                CAST(1 - NON_UNIQUE AS SIGNED), CAST(0 AS SIGNED), \
                CAST(SEQ_IN_INDEX AS SIGNED), CAST(COLUMN_NAME AS CHAR) \
         FROM information_schema.STATISTICS \
         WHERE TABLE_SCHEMA = DATABASE() \
         ORDER BY 2, 3, 6"
    }

    fn inspect_integer_fix(&self, table: &str, column: &str) -> String {
        format!("ALTER TABLE {table} MODIFY COLUMN {column} BIGINT;  -- keep its NULL / NOT NULL")
    }
    // ---- end inspect ----

    // ---- test support ----
    fn drop_database_sql(&self, quoted: &str) -> Option<String> {
        Some(format!("DROP DATABASE IF EXISTS {quoted}"))
    }

    /// `CHARACTER SET utf8mb4`: the server default may be `latin1`.
    fn create_database_sql(&self, quoted: &str) -> Option<String> {
        Some(format!("CREATE DATABASE {quoted} CHARACTER SET utf8mb4"))
    }
    // ---- end test support ----

    // ---- predicate parsing ----
    fn sql_parser_dialect(&self) -> &'static dyn sqlparser::dialect::Dialect {
        &sqlparser::dialect::MySqlDialect {}
    }
    // ---- end predicate parsing ----
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
