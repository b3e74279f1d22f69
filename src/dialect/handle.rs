//! [`Dialect`], the small handle the rest of tidemark passes around: which engine a database
//! runs, learnt from its URL's scheme ([`Dialect::from_scheme`]), and the engine's operations,
//! one trait per job ([`super::traits`]). This file and the engine folders are the only places
//! that know which engines exist.

use serde::Serialize;

use super::mysql::Mysql;
use super::postgres::Postgres;
use super::sqlite::Sqlite;
use super::traits::{Admin, Catalog, ColumnDrop, Distribution, RunnerLocks, Sessions, Spelling};

/// The engine of a target database. It dereferences to its [`Spelling`] (SQL rendering, the
/// most common need); the other operations are [`Dialect::sessions`], [`Dialect::locks`],
/// [`Dialect::catalog`], [`Dialect::ddl`], [`Dialect::distribution`] and [`Dialect::admin`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    /// PostgreSQL 12 or later ([`super::postgres`]).
    Postgres,
    /// MySQL 8.0 or later, or MariaDB 10.6 or later, one server or a Galera cluster
    /// ([`super::mysql`]).
    Mysql,
    /// SQLite 3.35 or later, the bundled library ([`super::sqlite`]).
    Sqlite,
}

impl Dialect {
    /// Every dialect, for tests that render each template for each engine.
    pub const ALL: [Dialect; 3] = [Dialect::Postgres, Dialect::Mysql, Dialect::Sqlite];

    /// The dialect a URL scheme names (lower case, without `:`), and the scheme the driver
    /// is given in its place when they differ: `postgres`/`postgresql`, `mysql`, `mariadb`
    /// (sqlx knows MariaDB by the `mysql` scheme: the wire protocol is the same) and
    /// `sqlite`. None for any other scheme.
    pub fn from_scheme(scheme: &str) -> Option<(Dialect, &'static str)> {
        Some(match scheme {
            "postgres" => (Dialect::Postgres, "postgres"),
            "postgresql" => (Dialect::Postgres, "postgresql"),
            "mysql" | "mariadb" => (Dialect::Mysql, "mysql"),
            "sqlite" => (Dialect::Sqlite, "sqlite"),
            _ => return None,
        })
    }

    /// The engine's SQL rendering (also reached through `Deref`).
    pub fn sql(self) -> &'static dyn Spelling {
        match self {
            Dialect::Postgres => &Postgres,
            Dialect::Mysql => &Mysql,
            Dialect::Sqlite => &Sqlite,
        }
    }

    /// The engine's sessions and transactions.
    pub fn sessions(self) -> &'static dyn Sessions {
        match self {
            Dialect::Postgres => &Postgres,
            Dialect::Mysql => &Mysql,
            Dialect::Sqlite => &Sqlite,
        }
    }

    /// The engine's runner lock.
    pub fn locks(self) -> &'static dyn RunnerLocks {
        match self {
            Dialect::Postgres => &Postgres,
            Dialect::Mysql => &Mysql,
            Dialect::Sqlite => &Sqlite,
        }
    }

    /// The engine's catalog reading.
    pub fn catalog(self) -> &'static dyn Catalog {
        match self {
            Dialect::Postgres => &Postgres,
            Dialect::Mysql => &Mysql,
            Dialect::Sqlite => &Sqlite,
        }
    }

    /// The engine's contract drop.
    pub fn ddl(self) -> &'static dyn ColumnDrop {
        match self {
            Dialect::Postgres => &Postgres,
            Dialect::Mysql => &Mysql,
            Dialect::Sqlite => &Sqlite,
        }
    }

    /// The engine's tables spread over nodes (Citus on PostgreSQL).
    pub fn distribution(self) -> &'static dyn Distribution {
        match self {
            Dialect::Postgres => &Postgres,
            Dialect::Mysql => &Mysql,
            Dialect::Sqlite => &Sqlite,
        }
    }

    /// What the demo and the tests need of the engine.
    pub fn admin(self) -> &'static dyn Admin {
        match self {
            Dialect::Postgres => &Postgres,
            Dialect::Mysql => &Mysql,
            Dialect::Sqlite => &Sqlite,
        }
    }

    /// Whether a database error with `code` (as the driver reports it, empty when none) and
    /// `message` is a lock wait that gave up, a deadlock or a serialization failure, by the
    /// codes and messages of every engine ([`Sessions::lock_wait_codes`],
    /// [`Sessions::lock_wait_messages`]): an error does not say which engine sent it.
    pub fn is_lock_wait(code: &str, message: &str) -> bool {
        let message = message.to_ascii_lowercase();
        Dialect::ALL.iter().any(|d| {
            let s = d.sessions();
            s.lock_wait_codes().contains(&code)
                || s.lock_wait_messages().iter().any(|m| message.contains(m))
        })
    }

    /// Whether any cause in `error`'s chain says the session with the server is gone (issue
    /// 25, row 14): the driver lost the socket or the protocol (`sqlx::Error::Io`,
    /// `Protocol`, `Tls`, `WorkerCrashed`), or the server ended the session (a SQLSTATE of
    /// class 08, connection exception, or a code of [`Sessions::session_ended_codes`] of any
    /// engine). Then the client cannot know whether a statement in flight was applied.
    pub fn error_is_connection_lost(error: &anyhow::Error) -> bool {
        error
            .chain()
            .any(|cause| match cause.downcast_ref::<sqlx::Error>() {
                Some(
                    sqlx::Error::Io(_)
                    | sqlx::Error::Protocol(_)
                    | sqlx::Error::Tls(_)
                    | sqlx::Error::WorkerCrashed,
                ) => true,
                Some(sqlx::Error::Database(db)) => {
                    let code = db.code().map(|c| c.to_string()).unwrap_or_default();
                    code.starts_with("08")
                        || Dialect::ALL
                            .iter()
                            .any(|d| d.sessions().session_ended_codes().contains(&code.as_str()))
                }
                _ => false,
            })
    }

    /// Whether any cause in `error`'s chain is a database error that [`Dialect::is_lock_wait`]
    /// recognises: worth a retry after a pause.
    pub fn error_is_lock_wait(error: &anyhow::Error) -> bool {
        error.chain().any(|cause| {
            let Some(sqlx::Error::Database(db)) = cause.downcast_ref::<sqlx::Error>() else {
                return false;
            };
            let code = db.code().map(|c| c.to_string()).unwrap_or_default();
            Dialect::is_lock_wait(&code, db.message())
        })
    }
}

impl std::ops::Deref for Dialect {
    type Target = dyn Spelling;

    fn deref(&self) -> &Self::Target {
        self.sql()
    }
}

#[cfg(test)]
mod tests {
    use super::Dialect;

    #[test]
    fn quoting_per_dialect() {
        assert_eq!(
            Dialect::Postgres.quote("public.messages"),
            "\"public\".\"messages\""
        );
        assert_eq!(Dialect::Mysql.quote("messages"), "`messages`");
        assert_eq!(Dialect::Sqlite.quote("m"), "\"m\"");
        assert_eq!(Dialect::Postgres.placeholder(3), "$3");
        assert_eq!(Dialect::Mysql.placeholder(3), "?");
    }

    #[test]
    fn lock_waits_of_every_engine_are_recognised() {
        assert!(Dialect::is_lock_wait(
            "55P03",
            "canceling statement due to lock timeout"
        ));
        assert!(Dialect::is_lock_wait("40P01", ""));
        assert!(Dialect::is_lock_wait(
            "HY000",
            "Lock wait timeout exceeded; try restarting"
        ));
        assert!(Dialect::is_lock_wait("5", ""));
        assert!(Dialect::is_lock_wait("", "database is locked"));
        assert!(!Dialect::is_lock_wait(
            "23505",
            "duplicate key value violates unique constraint"
        ));
        assert!(!Dialect::is_lock_wait("", ""));
    }

    #[test]
    fn schemes() {
        assert_eq!(
            Dialect::from_scheme("mariadb"),
            Some((Dialect::Mysql, "mysql"))
        );
        assert_eq!(
            Dialect::from_scheme("postgresql"),
            Some((Dialect::Postgres, "postgresql"))
        );
        assert_eq!(Dialect::from_scheme("oracle"), None);
    }
}
