//! The small pieces every command's arguments share: the output [`Format`], the
//! `--database` / `--mapping` options ([`Common`]), the URL they name (`database_dsn`), and
//! the value parsers whose errors name the allowed range (clap prints them after the option's
//! name, exit 2). A leaf of `cli`: it imports nothing from its siblings.

use anyhow::Result;
use clap::{Args, ValueEnum};
use std::path::PathBuf;

use crate::db::Dsn;
use crate::mapping::Mapping;

/// Options every database command takes.
#[derive(Debug, Args, Clone)]
pub struct Common {
    /// Database URL: postgres://, mysql:// / mariadb://, or sqlite:PATH.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, value_name = "URL")]
    pub database: Option<String>,
    /// Read the database URL from the first line of this file instead (keeps the password
    /// out of `ps` and the environment); not together with --database / DATABASE_URL.
    #[arg(long, value_name = "PATH")]
    pub database_file: Option<PathBuf>,
    /// The mapping file.
    #[arg(long, default_value = "tidemark.toml", value_name = "FILE")]
    pub mapping: PathBuf,
    /// Compare times in this time zone (a zone name, or an offset such as -04:00) instead of
    /// the database's own: by default the role's or database's `timezone` (PostgreSQL) or
    /// `@@global.time_zone` (MariaDB/MySQL), as `psql` / `mysql` sessions get it. Matters
    /// where a time without zone meets one with zone, and for the settle time.
    #[arg(long, value_name = "ZONE", allow_hyphen_values = true)]
    pub time_zone: Option<String>,
}

impl Common {
    /// The DSN and the mapping, in that order of checks (both are bad input when wrong).
    pub fn resolve(&self) -> Result<(Dsn, Mapping)> {
        let dsn = database_dsn(self.database.as_deref(), self.database_file.as_deref())?
            .with_time_zone(self.time_zone.clone());
        let mapping = Mapping::load(&self.mapping)?;
        mapping.check_predicates(dsn.dialect.sql_parser_dialect(), dsn.dialect.name())?;
        Ok((dsn, mapping))
    }
}

/// Output format of `audit`, `backfill`, `status`, `plan`, `contract` and `inspect`.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Format {
    /// A summary for people.
    Text,
    /// One JSON object on stdout (keys documented in the book: docs/src/output.md).
    Json,
}

/// The URL from `--database` / `DATABASE_URL` or from `--database-file` (see
/// [`Dsn::from_args`]). Not both: the error names where the other URL came from, the command
/// line's `--database` or the `DATABASE_URL` environment variable (clap's own conflict check
/// cannot tell them apart and named `--database` for both), exit 2.
pub(crate) fn database_dsn(database: Option<&str>, file: Option<&std::path::Path>) -> Result<Dsn> {
    if let (Some(_), Some(path)) = (database, file) {
        let on_command_line = std::env::args_os().skip(1).any(|a| {
            let a = a.to_string_lossy();
            a == "--database" || a.starts_with("--database=")
        });
        let other = if on_command_line {
            "--database"
        } else {
            "the DATABASE_URL environment variable (unset it, or leave out --database-file)"
        };
        return Err(crate::error::input_error(format!(
            "--database-file {} cannot be used together with {other}: give the URL one way",
            path.display()
        )));
    }
    Dsn::from_args(database, file)
}

/// A value parser for a whole number of at least `min` (and at most `T`'s largest), whose error
/// names the allowed range ("a whole number, 1 or more"); clap prints it after the option's
/// name: `invalid value '-5' for '--batch-size <N>': …` (exit 2).
pub(crate) fn at_least<T>(min: i128) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync
where
    T: TryFrom<i128> + Send + Sync + Clone + 'static,
{
    whole_number(min, None)
}

/// [`at_least`] with a largest value too ("a whole number from 1 to 1000").
pub(crate) fn whole_number<T>(
    min: i128,
    max: Option<i128>,
) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync
where
    T: TryFrom<i128> + Send + Sync + Clone + 'static,
{
    move |s: &str| {
        let wanted = match max {
            Some(max) => format!("expected a whole number from {min} to {max}"),
            None => format!("expected a whole number, {min} or more"),
        };
        match s.trim().parse::<i128>() {
            Ok(n) if n < min => Err(format!("{n} is below {min}: {wanted}")),
            Ok(n) if max.is_some_and(|max| n > max) => Err(format!("{n} is too large: {wanted}")),
            Ok(n) => T::try_from(n).map_err(|_| format!("{n} is too large")),
            Err(_) => Err(wanted),
        }
    }
}

/// A rate: a number above 0 (members per second; fractions allowed, e.g. 0.5 for one member
/// every two seconds). 0 is refused rather than read as "no limit": leave the option out for
/// no throttle. The error names the allowed range; clap prints it after the option's name.
pub(crate) fn rate(s: &str) -> Result<f64, String> {
    const WANTED: &str = "expected a number above 0 (leave the option out for no limit)";
    match s.trim().parse::<f64>() {
        Ok(r) if r > 0.0 && r.is_finite() => Ok(r),
        Ok(r) if r.is_finite() => Err(format!("{r} is not above 0: {WANTED}")),
        _ => Err(format!("{s:?} is not a number: {WANTED}")),
    }
}

/// A ratio from 0 to 1 (`--max-drift-ratio`); the error names the value and the range.
pub(crate) fn parse_ratio(s: &str) -> Result<f64, String> {
    let r: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if (0.0..=1.0).contains(&r) {
        Ok(r)
    } else {
        Err(format!("{r} is outside 0..=1"))
    }
}

/// A file's permission bits in octal (`--report-mode`): `640`, `0640` or `0o640`, at most
/// 777; the error names the value and what is expected.
pub(crate) fn file_mode(s: &str) -> Result<u32, String> {
    let digits = s.trim();
    let digits = digits.strip_prefix("0o").unwrap_or(digits);
    let octal = !digits.is_empty() && digits.bytes().all(|b| (b'0'..=b'7').contains(&b));
    match u32::from_str_radix(digits, 8) {
        Ok(m) if octal && m <= 0o777 => Ok(m),
        _ => Err(format!(
            "{s:?} is not a file mode: expected octal permission bits such as 600 or 0640"
        )),
    }
}
