//! Least privilege (issue 13, row 2): a statement the database refuses for want of a
//! privilege is reported as "permission denied", with the GRANT that is missing, exit 3 (not
//! as a missing table, nor as bad input).
//!
//! [`check`] probes, before a stage writes anything, that the session may use each table as
//! the stage needs: statements that touch no row (`SELECT … WHERE 1 = 0`, `INSERT … SELECT …
//! WHERE 1 = 0`, `UPDATE … WHERE 1 = 0`), which the servers still check privileges for. SQLite
//! has no privileges: nothing is probed there. The right to change the counter's table for
//! `contract` ([`missing_ddl_right`]) is probed per engine, also without changing anything.

use anyhow::{anyhow, Result};
use sqlx::{AnyConnection, Row};

use crate::dialect::{DdlProbe, Dialect};
use crate::values::text;

/// A privilege a stage needs on a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Privilege {
    /// Read rows.
    Select,
    /// Add rows.
    Insert,
    /// Change rows (the column probed is given with it).
    Update,
}

impl Privilege {
    /// The privilege's SQL name.
    pub fn as_str(self) -> &'static str {
        match self {
            Privilege::Select => "SELECT",
            Privilege::Insert => "INSERT",
            Privilege::Update => "UPDATE",
        }
    }
}

/// What a stage needs on one table: its name, a column (for the UPDATE probe) and the
/// privileges.
#[derive(Debug, Clone)]
pub struct Need<'a> {
    /// The table, `name` or `schema.name`, unquoted.
    pub table: &'a str,
    /// A column of the table (the UPDATE probe sets it to itself).
    pub column: &'a str,
    /// The privileges, e.g. SELECT, INSERT, UPDATE.
    pub privileges: &'a [Privilege],
}

/// Whether a database error is a refused privilege: PostgreSQL 42501 (`permission denied for
/// table …`), MySQL/MariaDB 1142/1143 (`… command denied to user …`, SQLSTATE 42000) and
/// 1044/1045 (`Access denied for user …`). The codes and messages of every engine are
/// recognised (an error does not say which engine sent it).
pub fn is_permission_denied(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        let Some(sqlx::Error::Database(db)) = cause.downcast_ref::<sqlx::Error>() else {
            return false;
        };
        let message = db.message().to_ascii_lowercase();
        db.code().as_deref() == Some("42501")
            || message.contains("permission denied")
            || message.contains("command denied")
            || message.contains("access denied")
    })
}

/// The session's user as a GRANT names it (`"tm_ro"`, `'tm_ro'@'%'`), or None where the
/// database has no users (SQLite) or cannot say.
pub async fn grantee(conn: &mut AnyConnection, dialect: Dialect) -> Option<String> {
    let sql = dialect.catalog().current_user_sql()?;
    let row = sqlx::query(sql).fetch_one(&mut *conn).await.ok()?;
    let user = text(&row, 0).ok()??;
    Some(dialect.catalog().grantee(&user))
}

/// [`grantee`], or `<this user>` when the database cannot say.
async fn grantee_or_placeholder(conn: &mut AnyConnection, dialect: Dialect) -> String {
    grantee(conn, dialect)
        .await
        .unwrap_or_else(|| "<this user>".to_string())
}

/// The "permission denied" error for `privileges` on `table`, naming the GRANT that is
/// missing and the database's own message (`cause`). Exit 3.
pub async fn denied(
    conn: &mut AnyConnection,
    dialect: Dialect,
    table: &str,
    privileges: &[Privilege],
    cause: &anyhow::Error,
) -> anyhow::Error {
    let who = grantee_or_placeholder(conn, dialect).await;
    let list = privileges
        .iter()
        .map(|p| p.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let why = cause
        .chain()
        .find_map(|c| match c.downcast_ref::<sqlx::Error>() {
            Some(sqlx::Error::Database(db)) => Some(db.message().to_string()),
            _ => None,
        })
        .unwrap_or_else(|| cause.to_string());
    anyhow!(
        "permission denied: this user may not {list} table {table} ({why}); missing: GRANT {list} ON {} TO {who}",
        dialect.quote(table)
    )
}

/// Probes every need (see the module documentation), the tables in order.
///
/// Errors (exit 3): the first privilege refused, as [`denied`] words it (all the privileges
/// of that table in the GRANT); any other database failure as it is.
pub async fn check(conn: &mut AnyConnection, dialect: Dialect, needs: &[Need<'_>]) -> Result<()> {
    if dialect.catalog().current_user_sql().is_none() {
        return Ok(());
    }
    for need in needs {
        let t = dialect.quote(need.table);
        let c = dialect.quote(need.column);
        for p in need.privileges {
            let sql = match p {
                Privilege::Select => format!("SELECT {c} FROM {t} WHERE 1 = 0"),
                Privilege::Insert => {
                    format!("INSERT INTO {t} SELECT * FROM {t} WHERE 1 = 0")
                }
                Privilege::Update => format!("UPDATE {t} SET {c} = {c} WHERE 1 = 0"),
            };
            if let Err(e) = sqlx::raw_sql(&sql).execute(&mut *conn).await {
                let e = anyhow::Error::from(e);
                if is_permission_denied(&e) {
                    return Err(denied(conn, dialect, need.table, need.privileges, &e).await);
                }
                return Err(e.context(format!("checking {} on {}", p.as_str(), need.table)));
            }
        }
    }
    Ok(())
}

/// SELECT, INSERT and UPDATE: what a stage needs on the tables it writes.
const WRITE: &[Privilege] = &[Privilege::Select, Privilege::Insert, Privilege::Update];

/// `backfill`: write on the watermark table and the ledger.
///
/// Errors (exit 3): as [`check`].
pub async fn for_backfill(
    conn: &mut AnyConnection,
    dialect: Dialect,
    watermarks: &str,
) -> Result<()> {
    let needs = [
        Need {
            table: watermarks,
            column: "last_read_id",
            privileges: WRITE,
        },
        Need {
            table: crate::tables::LEDGER_TABLE,
            column: "status",
            privileges: WRITE,
        },
    ];
    check(conn, dialect, &needs).await?;
    let probes = dialect.catalog().backfill_privilege_probes();
    match first_refused(conn, dialect, watermarks, &probes).await? {
        Some(message) => Err(anyhow!(message)),
        None => Ok(()),
    }
}

/// `audit` with its ledger: write on the ledger (and the drift rows table with
/// `--store-rows`).
///
/// Errors (exit 3): as [`check`].
pub async fn for_audit(conn: &mut AnyConnection, dialect: Dialect, store_rows: bool) -> Result<()> {
    let mut needs = vec![Need {
        table: crate::tables::LEDGER_TABLE,
        column: "status",
        privileges: WRITE,
    }];
    if store_rows {
        needs.push(Need {
            table: crate::tables::DRIFT_ROWS_TABLE,
            column: "run_id",
            privileges: &[Privilege::Select, Privilege::Insert],
        });
    }
    check(conn, dialect, &needs).await
}

/// `contract --execute`: write on the ledger, SELECT and INSERT on the archive table, and the
/// right to change each target table (`targets`: the table, unquoted, and whether the whole
/// table is dropped: ALTER, or DROP), all probed before the final audit, the archive or the
/// DDL write anything ([`missing_ddl_right`]).
///
/// Errors (exit 3): as [`check`]; the first missing DDL right as [`missing_ddl_right`] words it.
pub async fn for_contract(
    conn: &mut AnyConnection,
    dialect: Dialect,
    targets: &[(&str, bool)],
    lock_timeout: std::time::Duration,
) -> Result<()> {
    for_contract_tables(conn, dialect).await?;
    for (table, drop_table) in targets {
        if let Some(message) =
            missing_ddl_right(conn, dialect, table, *drop_table, lock_timeout).await?
        {
            return Err(anyhow!(message));
        }
    }
    Ok(())
}

/// The right to change `table` (unquoted, maybe `schema.name`) that this session lacks, as a
/// "permission denied: … missing: GRANT …" message, or None when it has it (or the engine has
/// no privileges). Probed without changing anything, as
/// [`crate::dialect::Catalog::ddl_privilege_probe`] says (PostgreSQL: membership in the
/// owning role; MySQL/MariaDB: statements refused either way), each statement's lock wait
/// bounded by `lock_timeout`. The contract's dry run prints the message as a note; `--execute`
/// stops on it before writing anything (issue 13: no archive, no final audit without it).
///
/// Errors (exit 3): the database fails other than by refusing the privilege.
pub async fn missing_ddl_right(
    conn: &mut AnyConnection,
    dialect: Dialect,
    table: &str,
    drop_table: bool,
    lock_timeout: std::time::Duration,
) -> Result<Option<String>> {
    let Some(probe) = dialect.catalog().ddl_privilege_probe(table, drop_table) else {
        return Ok(None);
    };
    match probe {
        DdlProbe::Owner { sql, binds } => {
            let mut q = sqlx::query(&sql);
            for b in binds {
                q = q.bind(b);
            }
            let Some(row) = q.fetch_optional(&mut *conn).await? else {
                return Ok(None);
            };
            let allowed: i64 = row.try_get("allowed")?;
            if allowed == 1 {
                return Ok(None);
            }
            let owner = text(&row, 1)?.unwrap_or_default();
            let what = if drop_table { "DROP" } else { "ALTER" };
            let who = grantee_or_placeholder(conn, dialect).await;
            Ok(Some(format!(
                "permission denied: this user may not {what} table {table} (only its owner {owner} may, and this user is not a member of that role); missing: GRANT {} TO {who}",
                dialect.quote(&owner)
            )))
        }
        DdlProbe::Refused(probes) => {
            crate::lock::set_lock_timeout(conn, dialect, lock_timeout).await?;
            first_refused(conn, dialect, table, &probes).await
        }
    }
}

/// The first of `probes` the server refuses for want of a privilege, as a "permission denied:
/// … missing: GRANT …" message naming `table` (or the database, for a probe `on_database`);
/// None when every probe passes (accepted and undone, or refused for another reason).
///
/// Errors (exit 3): a lock wait that gave up, or a database failure of a `skip_if` query.
async fn first_refused(
    conn: &mut AnyConnection,
    dialect: Dialect,
    table: &str,
    probes: &[crate::dialect::RefusedProbe],
) -> Result<Option<String>> {
    for p in probes {
        if let Some((sql, binds)) = &p.skip_if {
            let mut q = sqlx::query_scalar::<_, i64>(sql);
            for b in binds {
                q = q.bind(b.clone());
            }
            if q.fetch_one(&mut *conn).await? > 0 {
                continue;
            }
        }
        let e = match sqlx::raw_sql(&p.sql).execute(&mut *conn).await {
            // Accepted (then undone), or refused for another reason: the right is there.
            Ok(_) => {
                if let Some(undo) = &p.undo {
                    sqlx::raw_sql(undo).execute(&mut *conn).await?;
                }
                continue;
            }
            Err(e) => anyhow::Error::from(e),
        };
        if !is_permission_denied(&e) {
            if crate::lock::is_lock_wait(&e) {
                return Err(e.context(format!(
                    "checking the ALTER privilege on {table}: a lock wait gave up"
                )));
            }
            continue;
        }
        let why = e
            .chain()
            .find_map(|c| match c.downcast_ref::<sqlx::Error>() {
                Some(sqlx::Error::Database(db)) => Some(db.message().to_string()),
                _ => None,
            })
            .unwrap_or_else(|| e.to_string());
        let who = grantee_or_placeholder(conn, dialect).await;
        let (what, on) = if p.on_database {
            let schema = match table.split_once('.') {
                Some((schema, _)) => schema.to_string(),
                None => {
                    let row = sqlx::query("SELECT DATABASE()")
                        .fetch_one(&mut *conn)
                        .await?;
                    text(&row, 0)?.unwrap_or_default()
                }
            };
            (
                format!("in database {schema} ({}; table {table})", p.why),
                format!("{}.*", dialect.quote(&schema)),
            )
        } else {
            (format!("table {table}"), dialect.quote(table))
        };
        return Ok(Some(format!(
                "permission denied: this user may not {} {what} ({why}); missing: GRANT {} ON {on} TO {who}",
                p.privileges,
                p.privileges,
            )));
    }
    Ok(None)
}

/// `contract --execute`'s tables: write on the ledger, SELECT and INSERT on the archive table.
///
/// Errors (exit 3): as [`check`].
async fn for_contract_tables(conn: &mut AnyConnection, dialect: Dialect) -> Result<()> {
    let needs = [
        Need {
            table: crate::tables::LEDGER_TABLE,
            column: "status",
            privileges: WRITE,
        },
        Need {
            table: crate::tables::ARCHIVE_TABLE,
            column: "contract_id",
            privileges: &[Privilege::Select, Privilege::Insert],
        },
    ];
    check(conn, dialect, &needs).await
}
