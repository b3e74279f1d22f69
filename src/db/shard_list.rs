//! Several databases as shards (issue 31): `--database URL` given several times, or
//! `--databases FILE` with one `name url` a line. Each [`Shard`] is a name (for the output, the
//! combined drift report's `shard` column and file names) and its [`Dsn`]; the stages run on
//! each as on a single database (its own checkpoint, runner lock and ledger).
//!
//! The file's format: a line is `name url` (the name, then blanks, then the URL to the end of
//! the line, so a password may hold blanks as psql takes them); blank lines and lines whose
//! first non-blank character is `#` are skipped. A name is letters, digits, `_`, `.` and `-`,
//! beginning with a letter or digit, unique in the file. A URL is never printed: its errors name
//! the file, the line and the shard, and the URL only as [`Dsn`] shows it (no password).

use anyhow::Result;
use std::collections::BTreeSet;
use std::path::Path;

use super::Dsn;
use crate::error::input_error;

/// One database of a sharded run: its name and URL.
#[derive(Debug, Clone)]
pub struct Shard {
    /// The name (from the file, or [`names`] for `--database` given several times).
    pub name: String,
    /// The database.
    pub dsn: Dsn,
}

/// Whether `name` is a shard name: 1 to 64 letters, digits, `_`, `.`, `-`, the first a letter
/// or digit (so it is a safe file name part and never a spreadsheet formula).
pub fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && name.len() <= 64
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// Reads `--databases FILE`.
///
/// Errors (exit 2): the file is missing or unreadable (named by its path), a line has no URL
/// or a bad name (`FILE:LINE`), a name is repeated, a URL does not parse (`FILE:LINE`, the
/// shard's name and the parser's reason, never the URL), or the file names no database.
pub fn read(path: &Path) -> Result<Vec<Shard>> {
    let text = std::fs::read(path).map_err(|e| {
        input_error(format!(
            "cannot read the databases file {}: {}",
            path.display(),
            std::io::Error::from(e.kind())
        ))
    })?;
    let text = String::from_utf8(text).map_err(|_| {
        input_error(format!(
            "the databases file {} is not UTF-8 text",
            path.display()
        ))
    })?;
    parse(&text, &path.display().to_string())
}

/// Parses the text of a databases file called `file` in messages (see [`read`]).
///
/// Errors: as [`read`].
pub fn parse(text: &str, file: &str) -> Result<Vec<Shard>> {
    let mut shards = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, line) in text.lines().enumerate() {
        let at = format!("{file}:{}", i + 1);
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((name, url)) = line.split_once(char::is_whitespace) else {
            // The line may be a bare URL with its password: it is not echoed.
            return Err(input_error(format!(
                "{at}: expected `name url` (a shard name, blanks, then its database URL)"
            )));
        };
        if !valid_name(name) {
            return Err(input_error(format!(
                "{at}: {name:?} is not a shard name: use letters, digits, _ . - (first a letter or digit, at most 64)"
            )));
        }
        if !seen.insert(name.to_string()) {
            return Err(input_error(format!(
                "{at}: the shard name {name:?} is used twice: each shard needs its own name"
            )));
        }
        let dsn = Dsn::parse(url.trim())
            .map_err(|e| input_error(format!("{at}: shard {name}: {e:#}")))?;
        shards.push(Shard {
            name: name.to_string(),
            dsn,
        });
    }
    if shards.is_empty() {
        return Err(input_error(format!(
            "the databases file {file} names no database (one `name url` a line)"
        )));
    }
    Ok(shards)
}

/// Names for databases given by `--database` several times: each database's name (the URL's
/// path, `test` of `postgres://h/test`; the file name without extension for SQLite) when
/// those are valid and distinct, else `shard1`, `shard2`, … in the order given.
pub fn names(dsns: Vec<Dsn>) -> Vec<Shard> {
    let own: Vec<Option<String>> = dsns.iter().map(own_name).collect();
    let distinct: BTreeSet<&String> = own.iter().flatten().collect();
    let usable = own.iter().all(Option::is_some) && distinct.len() == own.len();
    dsns.into_iter()
        .zip(own)
        .enumerate()
        .map(|(i, (dsn, own))| Shard {
            name: match own {
                Some(name) if usable => name,
                _ => format!("shard{}", i + 1),
            },
            dsn,
        })
        .collect()
}

/// The name a database gives itself: its database name (the URL's path; for a SQLite file,
/// its name without folder and extension); None when that is no valid shard name.
fn own_name(dsn: &Dsn) -> Option<String> {
    let path = dsn.database_name()?;
    let path = path.split('?').next().unwrap_or_default();
    let name = Path::new(path).file_stem()?.to_string_lossy().into_owned();
    valid_name(&name).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_of_named_urls() {
        let text =
            "# shards\n\n eu  postgres://app:p a#ss@db1:5432/chat\nus\tmysql://root@db2/chat\n";
        let shards = parse(text, "f").unwrap();
        assert_eq!(shards.len(), 2);
        assert_eq!(shards[0].name, "eu");
        assert_eq!(
            shards[0].dsn.to_string(),
            "postgres://app:***@db1:5432/chat"
        );
        assert_eq!(shards[1].name, "us");
        assert!(crate::error::describe(&parse("x", "f").unwrap_err()).contains("f:1"));
    }

    #[test]
    fn bad_lines_are_named_without_the_url() {
        let err = |text: &str| crate::error::describe(&parse(text, "dbs").unwrap_err());
        let bare = err("postgres://app:secret@db/chat\n");
        assert!(bare.contains("dbs:1") && !bare.contains("secret"), "{bare}");
        let twice = err("a sqlite:a.db\n# c\na sqlite:b.db\n");
        assert!(
            twice.contains("dbs:3") && twice.contains("twice"),
            "{twice}"
        );
        let bad = err("-a sqlite:a.db\n");
        assert!(bad.contains("not a shard name"), "{bad}");
        let scheme = err("a ftp://u:secret@h/x\n");
        assert!(
            scheme.contains("shard a") && !scheme.contains("secret"),
            "{scheme}"
        );
        assert!(err("# only\n").contains("names no database"));
        assert!(
            crate::error::kind(&parse("", "x").unwrap_err()) == crate::error::ErrorKind::BadInput
        );
    }

    #[test]
    fn repeated_databases_are_named_by_their_database() {
        let dsn = |u: &str| Dsn::parse(u).unwrap();
        let shards = names(vec![
            dsn("postgres://h/a"),
            dsn("sqlite:/tmp/b.db?mode=rwc"),
        ]);
        let got: Vec<&str> = shards.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(got, ["a", "b"]);
        let same = names(vec![dsn("postgres://h1/chat"), dsn("postgres://h2/chat")]);
        let got: Vec<&str> = same.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(got, ["shard1", "shard2"]);
    }
}
