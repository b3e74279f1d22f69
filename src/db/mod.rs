//! Connections: which dialect a DSN names, how it is shown without its password, and how
//! tidemark connects (one sqlx `AnyConnection` per command, no pool: every stage is a single
//! sequential writer). [`tx`] opens the stages' transactions, [`values`] reads text columns and
//! the clock the same way on every engine.

use anyhow::{Context, Result};
use sqlx::any::AnyConnectOptions;
use sqlx::{AnyConnection, ConnectOptions, Connection};
use std::str::FromStr;
use std::time::Duration;

use crate::dialect::Dialect;
use crate::error::input_error;

pub mod catalog;
mod dsn_text;
pub mod pooling;
pub mod privileges;
pub mod replica;
pub mod shard_list;
pub mod testing;
pub mod tx;

/// A database URL (DSN) with its dialect. `Display` shows it with the password replaced by
/// `***` (and every password parameter); the raw text is only handed to the driver. The user
/// info runs to the last `@`, so a password may hold any character (`src/db/dsn_text.rs`).
#[derive(Clone)]
pub struct Dsn {
    raw: String,
    /// The URL as printed.
    shown: String,
    /// What [`Dsn::scrub`] masks: the URL and its password in every form.
    masks: Vec<(String, String)>,
    /// The dialect named by the URL scheme.
    pub dialect: Dialect,
    /// The time zone sessions compare times in when the DBA names one (`--time-zone`, issue
    /// 29 row 2); None: the database's own ([`crate::dialect::Sessions::session_time_zone`]).
    pub time_zone: Option<String>,
}

impl Dsn {
    /// Parses `postgres://`/`postgresql://`, `mysql://`/`mariadb://` and `sqlite:` URLs.
    ///
    /// Errors (exit 2): an empty URL or an unknown scheme, named without the password; a text
    /// that no reading makes a URL (the parser's reason; the text is never shown).
    pub fn parse(raw: &str) -> Result<Dsn> {
        let raw = raw.trim();
        if raw.is_empty() {
            return Err(input_error(
                "no database given: pass --database URL or set DATABASE_URL",
            ));
        }
        let scheme = raw
            .split(':')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        let (dialect, raw) = match Dialect::from_scheme(&scheme) {
            Some((dialect, driver_scheme)) => {
                (dialect, format!("{driver_scheme}{}", &raw[scheme.len()..]))
            }
            // The text is not echoed: without a known scheme nothing says where a password
            // would be (a URL file holding something else must not print its content).
            _ if raw.contains(':')
                && !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')) =>
            {
                return Err(input_error(format!(
                    "the database URL has an unknown scheme {scheme:?}: use postgres://, mysql://, mariadb:// or sqlite:"
                )))
            }
            _ => {
                return Err(input_error(
                    "the database URL is not a URL (no scheme): use postgres://, mysql://, mariadb:// or sqlite:",
                ))
            }
        };
        let text = dsn_text::read(&raw).map_err(|why| {
            input_error(format!(
                "the database URL cannot be read: {why}; its text is not shown (percent-encode a password's special characters, e.g. # as %23)"
            ))
        })?;
        // Every error tidemark prints masks them too (the driver's errors can echo parts).
        crate::error::never_show(&text.masks);
        Ok(Dsn {
            raw: text.driver,
            shown: text.shown,
            masks: text.masks,
            dialect,
            time_zone: None,
        })
    }

    /// The DSN of a command line: `--database URL` (or `DATABASE_URL`), or the first line of
    /// the file `--database-file PATH` names (trimmed), so that the password never shows in
    /// `ps` or the environment. clap makes the two options mutually exclusive.
    ///
    /// Errors (exit 2): as [`Dsn::parse`]; a file that is missing, unreadable, not UTF-8 or
    /// whose first line is empty, named by its path (its content is never shown).
    pub fn from_args(database: Option<&str>, file: Option<&std::path::Path>) -> Result<Dsn> {
        match file {
            None => Dsn::parse(database.unwrap_or_default()),
            Some(path) => {
                let text = std::fs::read(path).map_err(|e| {
                    input_error(format!(
                        "cannot read the database URL file {}: {}",
                        path.display(),
                        std::io::Error::from(e.kind())
                    ))
                })?;
                let text = String::from_utf8(text).map_err(|_| {
                    input_error(format!(
                        "the database URL file {} is not UTF-8 text",
                        path.display()
                    ))
                })?;
                let first = text.lines().next().unwrap_or_default().trim();
                if first.is_empty() {
                    return Err(input_error(format!(
                        "the database URL file {} has no URL on its first line",
                        path.display()
                    )));
                }
                Dsn::parse(first)
            }
        }
    }

    /// A SQLite DSN for a file path, created when missing (used by `demo`).
    pub fn sqlite_file(path: &std::path::Path, create: bool) -> Dsn {
        let mode = if create { "?mode=rwc" } else { "" };
        Dsn::parse(&format!("sqlite:{}{mode}", path.display()))
            .expect("a sqlite: URL always parses")
    }

    /// The URL as given to the driver. Never print it: use `Display`.
    pub fn expose(&self) -> &str {
        &self.raw
    }

    /// Opens one connection with a 10 s connect timeout, and refuses it when a pooler shares
    /// its server session with other clients ([`pooling::refuse_shared_session`]).
    ///
    /// Errors (exit 3): the server refuses or does not answer, the credentials are wrong, the
    /// database does not exist. The message names the DSN with its password redacted, and any
    /// occurrence of the password in the driver's own text is masked too. Exit 2: a pooler in
    /// transaction or statement mode.
    pub async fn connect(&self) -> Result<AnyConnection> {
        let mut conn = self.connect_session().await?;
        if pooling::probed(self.dialect) {
            let other = self.connect_session().await;
            pooling::refuse_shared_session(self.dialect, &self.to_string(), &mut conn, other)
                .await?;
        }
        Ok(conn)
    }

    /// [`Dsn::connect`] without the shared-session probe (the probe's own second connection).
    ///
    /// Errors: as [`Dsn::connect`], without the pooler's.
    pub async fn connect_session(&self) -> Result<AnyConnection> {
        sqlx::any::install_default_drivers();
        let options = AnyConnectOptions::from_str(&self.raw)
            .map_err(|e| {
                input_error(format!(
                    "cannot parse database URL {self}: {}",
                    self.scrub(&e.to_string())
                ))
            })?
            .disable_statement_logging();
        let connect = AnyConnection::connect_with(&options);
        let conn = tokio::time::timeout(Duration::from_secs(10), connect)
            .await
            .map_err(|_| anyhow::anyhow!("cannot connect to {self}: no answer within 10 s"))?
            .map_err(|e| {
                let bad_option = matches!(e, sqlx::Error::Configuration(_));
                let why = self.scrub(&crate::error::describe(&anyhow::Error::from(e)));
                if bad_option {
                    // An option in the URL the driver rejects: the input is at fault (exit 2).
                    input_error(format!("database URL {self}: {why}"))
                } else {
                    anyhow::anyhow!("cannot connect to {self}: {why}")
                }
            })?;
        let mut conn = conn;
        for sql in self.dialect.sessions().session_setup_sql() {
            // Settings the server may not know (an older version): ignored.
            let _ = sqlx::raw_sql(sql).execute(&mut conn).await;
        }
        self.dialect
            .sessions()
            .session_time_zone(&mut conn, self.time_zone.as_deref())
            .await?;
        Ok(conn)
    }

    /// Masks the URL (as written or as the driver got it: replaced by its printed form) and
    /// its password (as written, percent-decoded and -encoded, and its pieces between URL
    /// delimiters), and every password parameter, wherever they appear in `text` (driver
    /// errors sometimes echo them).
    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (secret, instead) in &self.masks {
            out = out.replace(secret, instead);
        }
        crate::error::masked(&out)
    }

    /// The same DSN with sessions in the time zone `zone` (`--time-zone`; None: the
    /// database's own), see [`Dsn::time_zone`].
    pub fn with_time_zone(mut self, zone: Option<String>) -> Dsn {
        self.time_zone = zone.filter(|z| !z.trim().is_empty());
        self
    }

    /// The database name in the URL path (`test` in `postgres://h/test`), if any.
    pub fn database_name(&self) -> Option<String> {
        let url = url::Url::parse(&self.raw).ok()?;
        let name = url.path().trim_start_matches('/');
        (!name.is_empty()).then(|| name.to_string())
    }

    /// The same server with another database in the path (tests create one database each).
    pub fn with_database(&self, name: &str) -> Result<Dsn> {
        let mut url = url::Url::parse(&self.raw).with_context(|| format!("bad URL {self}"))?;
        url.set_path(&format!("/{name}"));
        Dsn::parse(url.as_str())
    }
}

impl std::fmt::Display for Dsn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The demo's own open mode is not part of what the user named.
        let shown = &self.shown;
        f.write_str(shown.strip_suffix("?mode=rwc").unwrap_or(shown))
    }
}

impl std::fmt::Debug for Dsn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Dsn({self})")
    }
}

/// A URL as printed: its user info (to the last `@`) as `user:***`, every password parameter
/// as `***`. Text that no reading makes a URL is not shown at all (a placeholder instead).
pub fn redact(raw: &str) -> String {
    dsn_text::read(raw.trim())
        .map(|t| t.shown)
        .unwrap_or_else(|_| dsn_text::NOT_SHOWN.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_password_in_user_info_and_query() {
        assert_eq!(
            redact("postgres://alice:s3cret@db.example:5432/chat"),
            "postgres://alice:***@db.example:5432/chat"
        );
        assert_eq!(
            redact("mysql://root@127.0.0.1/test?password=hunter2&ssl-mode=disabled"),
            "mysql://root@127.0.0.1/test?password=***&ssl-mode=disabled"
        );
        assert_eq!(redact("sqlite:demo.db"), "sqlite:demo.db");
        // Issue 25, row 9: a text that is not a URL is not shown at all; an `@` in an opaque
        // URL still ends a user info.
        assert_eq!(redact("garbage:pw@host"), "garbage:***@host");
        assert_eq!(redact("not a url user:pw@host"), dsn_text::NOT_SHOWN);
    }

    #[test]
    fn dialect_from_scheme() {
        assert_eq!(
            Dsn::parse("postgresql://h/db").unwrap().dialect,
            Dialect::Postgres
        );
        assert_eq!(
            Dsn::parse("mariadb://root@h/db").unwrap().expose(),
            "mysql://root@h/db"
        );
        assert_eq!(Dsn::parse("sqlite:x.db").unwrap().dialect, Dialect::Sqlite);
        let err = Dsn::parse("oracle://u:pw@h/db").unwrap_err();
        assert_eq!(crate::error::kind(&err), crate::error::ErrorKind::BadInput);
        assert!(!err.to_string().contains("pw@"), "{err}");
    }

    #[test]
    fn url_from_a_file_first_line_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("url");
        std::fs::write(&path, "  postgres://u:hunter2@h/db  \nignored\n").unwrap();
        let dsn = Dsn::from_args(None, Some(&path)).unwrap();
        assert_eq!(dsn.expose(), "postgres://u:hunter2@h/db");
        let missing = dir.path().join("nope");
        let err = Dsn::from_args(None, Some(&missing)).unwrap_err();
        assert_eq!(crate::error::kind(&err), crate::error::ErrorKind::BadInput);
        assert!(
            err.to_string().contains(&missing.display().to_string()),
            "{err}"
        );
        std::fs::write(&path, "\npostgres://u:hunter2@h/db\n").unwrap();
        let err = Dsn::from_args(None, Some(&path)).unwrap_err().to_string();
        assert!(
            err.contains("first line") && !err.contains("hunter2"),
            "{err}"
        );
        std::fs::write(&path, "oracle://u:hunter2@h/db\n").unwrap();
        let err = Dsn::from_args(None, Some(&path)).unwrap_err().to_string();
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[test]
    fn a_text_that_is_not_a_url_is_never_echoed() {
        for text in [
            "not a url S3cretPw",
            "S3cretPw",
            "user:S3cretPw@host/db",
            "post gres://u:S3cretPw@h/db",
        ] {
            let e = format!("{:#}", Dsn::parse(text).err().unwrap());
            assert!(!e.contains("S3cretPw"), "{text}: {e}");
            assert_eq!(
                crate::error::kind(&Dsn::parse(text).unwrap_err()),
                crate::error::ErrorKind::BadInput
            );
        }
        let e = format!("{:#}", Dsn::parse("oracle://u:S3cretPw@h/db").unwrap_err());
        assert!(
            e.contains("unknown scheme \"oracle\"") && !e.contains("S3cretPw"),
            "{e}"
        );
    }

    #[test]
    fn scrub_masks_decoded_password() {
        let dsn = Dsn::parse("postgres://u:p%40ss@h/db").unwrap();
        assert_eq!(dsn.scrub("auth failed for p@ss"), "auth failed for ***");
        assert_eq!(dsn.to_string(), "postgres://u:***@h/db");
    }
}
