//! Test and benchmark support: a scratch database of its own per test or benchmark run on a
//! PostgreSQL or MySQL/MariaDB server (SQLite needs none: a file in a temporary directory).
//!
//! Used by the integration tests (`tests/integration/common`) and `benches/pipeline.rs`; nothing
//! in tidemark's commands calls it. The statements run on an admin connection to another
//! database of the same server (for example `postgres://postgres@127.0.0.1:5432/test`).

use anyhow::{bail, Context, Result};
use sqlx::AnyConnection;

use super::Dsn;
use crate::dialect::Dialect;

/// `DROP DATABASE IF EXISTS <name>` for the admin connection's engine; PostgreSQL drops it
/// even while connections to it remain open (`WITH (FORCE)`, PostgreSQL 13 and later).
///
/// Errors: a SQLite admin DSN (SQLite has no databases to create on a server).
pub fn drop_database_sql(admin: &Dsn, name: &str) -> Result<String> {
    server_sql(admin, name, |d, q| d.drop_database_sql(q))
}

/// `CREATE DATABASE <name>` for the admin connection's engine; MySQL/MariaDB databases are
/// created `CHARACTER SET utf8mb4` (the server default may be `latin1`).
///
/// Errors: a SQLite admin DSN.
pub fn create_database_sql(admin: &Dsn, name: &str) -> Result<String> {
    server_sql(admin, name, |d, q| d.create_database_sql(q))
}

/// The statement `make` spells for the admin DSN's engine with `name` quoted.
fn server_sql(
    admin: &Dsn,
    name: &str,
    make: impl Fn(&dyn crate::dialect::Admin, &str) -> Option<String>,
) -> Result<String> {
    let quoted = admin.dialect.quote_part(name);
    match make(admin.dialect.admin(), &quoted) {
        Some(sql) => Ok(sql),
        None => bail!("{admin}: SQLite has no server databases to create or drop"),
    }
}

/// Drops `name` if it exists, then creates it afresh, on the admin connection `conn` (opened
/// with `admin`). Returns the DSN of the new database (the admin DSN with `name` as its path).
///
/// Errors: a SQLite admin DSN, or the server refuses a statement (message: the statement and
/// the driver's reason, password masked).
pub async fn recreate_database(conn: &mut AnyConnection, admin: &Dsn, name: &str) -> Result<Dsn> {
    for sql in [
        drop_database_sql(admin, name)?,
        create_database_sql(admin, name)?,
    ] {
        run(conn, admin, &sql).await?;
    }
    admin.with_database(name)
}

/// Drops `name` if it exists, on the admin connection `conn` (opened with `admin`).
///
/// Errors: a SQLite admin DSN, or the server refuses the statement.
pub async fn drop_database(conn: &mut AnyConnection, admin: &Dsn, name: &str) -> Result<()> {
    run(conn, admin, &drop_database_sql(admin, name)?).await
}

async fn run(conn: &mut AnyConnection, admin: &Dsn, sql: &str) -> Result<()> {
    sqlx::raw_sql(sql)
        .execute(&mut *conn)
        .await
        .map(|_| ())
        .map_err(|e| anyhow::anyhow!(admin.scrub(&e.to_string())))
        .with_context(|| format!("{admin}: {sql}"))
}

/// The admin URL of the test or benchmark server for `dialect` (None for SQLite, which needs
/// none): `TIDEMARK_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`) or
/// `TIDEMARK_TEST_MYSQL_URL` (default `mysql://root@127.0.0.1:3306/test`); an empty variable
/// counts as unset.
pub fn admin_url(dialect: Dialect) -> Option<String> {
    let (var, default) = dialect.admin().test_server()?;
    Some(
        std::env::var(var)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .unwrap_or_else(|| default.to_string()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_per_engine() {
        let pg = Dsn::parse("postgres://u:pw@h/admin").unwrap();
        let my = Dsn::parse("mariadb://root@h/admin").unwrap();
        assert_eq!(
            drop_database_sql(&pg, "tm_x").unwrap(),
            "DROP DATABASE IF EXISTS \"tm_x\" WITH (FORCE)"
        );
        assert_eq!(
            create_database_sql(&pg, "tm_x").unwrap(),
            "CREATE DATABASE \"tm_x\""
        );
        assert_eq!(
            drop_database_sql(&my, "tm_x").unwrap(),
            "DROP DATABASE IF EXISTS `tm_x`"
        );
        assert_eq!(
            create_database_sql(&my, "tm_x").unwrap(),
            "CREATE DATABASE `tm_x` CHARACTER SET utf8mb4"
        );
        let lite = Dsn::parse("sqlite:x.db").unwrap();
        assert!(create_database_sql(&lite, "tm_x").is_err());
    }
}
