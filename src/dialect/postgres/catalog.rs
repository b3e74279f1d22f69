//! Postgres's catalog reading ([`Catalog`]).

use anyhow::Result;
use sqlx::AnyConnection;

use super::Postgres;
use crate::dialect::collation::Collation;
use crate::dialect::traits::{Catalog, Spelling};
use crate::dialect::types::{BoxFuture, DdlProbe, ReplicaState};
use crate::values::text;

impl Catalog for Postgres {
    fn replica_state<'a>(
        &'a self,
        primary: &'a mut AnyConnection,
        replica: &'a mut AnyConnection,
        limit: std::time::Duration,
    ) -> BoxFuture<'a, Result<ReplicaState>> {
        Box::pin(super::replica::state(primary, replica, limit))
    }

    fn time_has_zone(&self, declared: &str) -> bool {
        let d = declared.trim().to_ascii_lowercase();
        d.contains("with time zone") || d.starts_with("timestamptz") || d.starts_with("timetz")
    }

    /// `pg_typeof` of the expression in a zero-row subquery, outer-joined to one row: the
    /// NULL it yields still has the expression's type (`integer`, `text`, `numeric`…).
    fn expression_type<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        expr: &'a str,
        from: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>>> {
        Box::pin(async move {
            let sql = format!(
                "SELECT CAST(pg_typeof(tm_s.v) AS TEXT) AS t FROM (SELECT 1 AS one) tm_one \
                 LEFT JOIN (SELECT ({expr}) AS v FROM {from} AND 1 = 0) tm_s ON TRUE"
            );
            let row = sqlx::query(&sql).fetch_one(&mut *conn).await?;
            Ok(text(&row, "t")?.filter(|t| t != "unknown"))
        })
    }

    /// The quoted table name, resolved by `to_regclass` (which follows the search path).
    fn catalog_table_binds(&self, table: &str) -> Vec<Option<String>> {
        vec![Some(self.quote(table))]
    }

    /// `pg_attribute.attcollation` in `pg_collation` (no row: a type without collation);
    /// `default` with the database's `datcollate` as its detail.
    fn column_collation<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        table: &'a str,
        column: &'a str,
    ) -> BoxFuture<'a, Result<Option<Collation>>> {
        Box::pin(async move {
            let sql = "SELECT CAST(c.collname AS TEXT) AS name, CAST(n.nspname AS TEXT) AS nsp, \
                       CAST(CASE WHEN c.collisdeterministic THEN 1 ELSE 0 END AS BIGINT) AS exact, \
                       CAST(CASE WHEN c.collname = 'default' THEN (SELECT d.datcollate FROM pg_database d \
                                 WHERE d.datname = current_database()) ELSE '' END AS TEXT) AS detail \
                       FROM pg_attribute a \
                       JOIN pg_collation c ON c.oid = a.attcollation \
                       JOIN pg_namespace n ON n.oid = c.collnamespace \
                       WHERE a.attrelid = to_regclass($1) AND a.attname = $2 AND NOT a.attisdropped";
            let row = sqlx::query(sql)
                .bind(self.quote(table))
                .bind(column.to_string())
                .fetch_optional(&mut *conn)
                .await?;
            let Some(row) = row else {
                return Ok(None);
            };
            let name = text(&row, "name")?.unwrap_or_default();
            let nsp = text(&row, "nsp")?.unwrap_or_default();
            Ok(Some(Collation {
                sql_name: format!("{}.{}", self.quote_part(&nsp), self.quote_part(&name)),
                name,
                detail: text(&row, "detail")?.unwrap_or_default(),
                exact: sqlx::Row::try_get::<i64, _>(&row, "exact")? == 1,
                charset: String::new(),
            }))
        })
    }

    fn view_count_query(&self, table: &str) -> (String, Vec<Option<String>>) {
        (
            "SELECT COUNT(*) FROM pg_class WHERE oid = to_regclass($1) AND relkind IN ('v', 'm')"
                .to_string(),
            self.catalog_table_binds(table),
        )
    }

    fn current_user_sql(&self) -> Option<&'static str> {
        Some("SELECT CAST(current_user AS TEXT)")
    }

    /// The role's name, quoted.
    fn grantee(&self, user: &str) -> String {
        self.quote(user)
    }

    /// PostgreSQL has no ALTER privilege: ALTER TABLE and DROP TABLE need the owner's rights
    /// (`pg_has_role(…, 'USAGE')`: the owner, a member inheriting from the owning role, or a
    /// superuser).
    fn ddl_privilege_probe(&self, table: &str, _drop_table: bool) -> Option<DdlProbe> {
        Some(DdlProbe::Owner {
            sql: "SELECT CAST(CASE WHEN pg_has_role(current_user, c.relowner, 'USAGE') THEN 1 ELSE 0 END AS BIGINT) AS allowed, \
                  CAST(pg_get_userbyid(c.relowner) AS TEXT) AS owner \
                  FROM pg_class c WHERE c.oid = to_regclass($1)"
                .to_string(),
            binds: self.catalog_table_binds(table),
        })
    }

    fn table_columns_binds(&self, table: &str) -> Vec<Option<String>> {
        vec![Some(self.quote(table))]
    }

    fn statement_statistics<'a>(
        &'a self,
        _conn: &'a mut sqlx::AnyConnection,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<&'static str, String>> + Send + 'a>,
    > {
        Box::pin(async { Ok("pg_stat_statements") })
    }

    fn statement_statistics_error(&self, source: &str, message: &str) -> String {
        if message.contains("does not exist") {
            "pg_stat_statements is not installed in this database (shared_preload_libraries and CREATE EXTENSION pg_stat_statements)".to_string()
        } else {
            format!("cannot read {source}: {message}")
        }
    }

    /// Tables, views and their columns outside the system schemas; a partition is not a table
    /// of its own (issue 29, row 8): its partitioned parent stands for it, as one table.
    fn inspect_columns_query(&self) -> &'static str {
        "SELECT CASE WHEN n.nspname = current_schema() THEN '' ELSE n.nspname::text END, \
                c.relname::text, \
                CASE WHEN c.relkind IN ('v', 'm') THEN 'view' ELSE 'table' END, \
                a.attname::text, format_type(a.atttypid, a.atttypmod), CAST(a.attnum AS BIGINT) \
         FROM pg_class c \
         JOIN pg_namespace n ON n.oid = c.relnamespace \
         JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped \
         WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND NOT c.relispartition \
           AND n.nspname NOT IN ('pg_catalog', 'information_schema') \
           AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE 'pg\\_temp%' \
         ORDER BY 1, 2, 6"
    }

    /// The indexes of the tables [`Catalog::inspect_columns_query`] reads (a partitioned
    /// table's own, not its partitions').
    fn inspect_foreign_keys_query(&self) -> &'static str {
        "SELECT CASE WHEN n.nspname = current_schema() THEN '' ELSE n.nspname::text END, \
                t.relname::text, a.attname::text, r.relname::text \
         FROM pg_constraint c \
         JOIN pg_class t ON t.oid = c.conrelid \
         JOIN pg_namespace n ON n.oid = t.relnamespace \
         JOIN pg_class r ON r.oid = c.confrelid \
         CROSS JOIN LATERAL unnest(c.conkey) AS k(attnum) \
         JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum \
         WHERE c.contype = 'f' AND n.nspname NOT IN ('pg_catalog', 'information_schema') \
         ORDER BY 1, 2, 3"
    }

    fn inspect_indexes_query(&self) -> &'static str {
        "SELECT CASE WHEN n.nspname = current_schema() THEN '' ELSE n.nspname::text END, \
                t.relname::text, i.relname::text, \
                CAST(CASE WHEN x.indisunique THEN 1 ELSE 0 END AS BIGINT), \
                CAST(CASE WHEN x.indpred IS NULL THEN 0 ELSE 1 END AS BIGINT), \
                CAST(k.ord AS BIGINT), a.attname::text \
         FROM pg_index x \
         JOIN pg_class i ON i.oid = x.indexrelid \
         JOIN pg_class t ON t.oid = x.indrelid \
         JOIN pg_namespace n ON n.oid = t.relnamespace \
         CROSS JOIN LATERAL unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord) \
         LEFT JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum AND k.attnum > 0 \
         WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND NOT t.relispartition \
           AND n.nspname NOT LIKE 'pg\\_toast%' AND k.ord <= x.indnkeyatts \
         ORDER BY 1, 2, 3, 6"
    }
}

#[cfg(test)]
mod tests {
    use crate::dialect::Dialect;
    use crate::schema::key_type;

    /// Moved from `schema.rs` (`key_types_keep_the_collation`), the PostgreSQL part.
    #[test]
    fn key_types_keep_the_declared_type() {
        assert_eq!(
            key_type(Dialect::Postgres, "character varying(64)", "x")
                .unwrap()
                .ddl,
            "character varying(64)"
        );
        // Issue 29 row 14: a uuid key keys the watermark table by uuid.
        assert_eq!(
            key_type(Dialect::Postgres, "uuid", "x").unwrap().ddl,
            "uuid"
        );
        assert!(key_type(Dialect::Postgres, "bytea", "x").is_err());
    }
}
