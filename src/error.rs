//! Exit codes and the error kinds that choose them.
//!
//! The codes are a contract (`shared/spec/interface.md`, "Exit codes"): cron jobs and release
//! checklists branch on them, so every error that leaves the library carries exactly one.

use std::fmt;

/// Done; for `audit`, drift within tolerance.
pub const EXIT_OK: u8 = 0;
/// `audit` found drift above tolerance.
pub const EXIT_DRIFT: u8 = 1;
/// Bad usage, bad mapping or bad input, named with the file/line or table/column at fault.
pub const EXIT_USAGE: u8 = 2;
/// Database or I/O failure: connection refused, lock timeout after retries, disk full.
pub const EXIT_FAILURE: u8 = 3;

/// Stopped before covering every row (`audit --run-time`, or an audit or a backfill stopped by
/// Ctrl-C or SIGTERM); running the command again continues from the checkpoint.
pub const EXIT_INCOMPLETE: u8 = 4;

/// Bad input from the person running tidemark: a mapping file that does not parse, an
/// identifier that is not one, a table or column that does not exist. Maps to exit code 2.
#[derive(Debug)]
pub struct InputError(pub String);

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InputError {}

/// Builds an [`anyhow::Error`] that exits with code 2.
pub fn input_error(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(InputError(message.into()))
}

/// An error and its causes on one line, each cause once: drivers repeat their cause in their
/// own message ("error returned from database: X" caused by "X"), so a cause already said is
/// left out.
pub fn describe(error: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// The exit code for an error: 2 when any cause in its chain is an [`InputError`] or a
/// database URL option the driver rejects (sqlx's configuration error), else 3
/// (database and I/O failures, and anything unforeseen: a failure never exits 0 or 1).
pub fn exit_code(error: &anyhow::Error) -> u8 {
    let bad_configuration = error.chain().any(|cause| {
        matches!(
            cause.downcast_ref::<sqlx::Error>(),
            Some(sqlx::Error::Configuration(_))
        )
    });
    if bad_configuration || error.chain().any(|cause| cause.is::<InputError>()) {
        EXIT_USAGE
    } else {
        EXIT_FAILURE
    }
}
