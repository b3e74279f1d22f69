//! The kinds of error tidemark tells apart: bad input (named, exit 2) and failures (exit 3).
//! Which exit code each kind gets is decided in one place, [`crate::cli::Outcome`].

use std::fmt;

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

/// Texts never to print, each with what is printed instead, longest first: a database URL as
/// written and its password in every form (registered by `crate::db::Dsn::parse`, issue 25
/// row 9), masked in every error [`describe`] words and every text [`masked`] is given.
static NEVER_SHOWN: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());

/// Registers texts never to print (see [`NEVER_SHOWN`]): each `(text, instead)` pair.
pub fn never_show(pairs: &[(String, String)]) {
    let mut all = NEVER_SHOWN.lock().unwrap_or_else(|e| e.into_inner());
    for pair in pairs {
        if !pair.0.is_empty() && !all.contains(pair) {
            all.push(pair.clone());
        }
    }
    all.sort_by_key(|(text, _)| std::cmp::Reverse(text.len()));
}

/// `text` with every registered secret (see [`never_show`]) replaced.
pub fn masked(text: &str) -> String {
    let all = NEVER_SHOWN.lock().unwrap_or_else(|e| e.into_inner());
    let mut out = text.to_string();
    for (secret, instead) in all.iter() {
        if out.contains(secret.as_str()) {
            out = out.replace(secret.as_str(), instead);
        }
    }
    out
}

/// An error and its causes on one line, each cause once: drivers repeat their cause in their
/// own message ("error returned from database: X" caused by "X"), so a cause already said is
/// left out. Registered secrets are masked ([`masked`]).
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
    masked(&out)
}

/// What kind of error a command ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Bad usage, a bad mapping or bad input ([`InputError`], or a database URL option the
    /// driver rejects).
    BadInput,
    /// A database or I/O failure, or anything unforeseen.
    Failure,
}

/// The kind of an error: [`ErrorKind::BadInput`] when any cause in its chain is an
/// [`InputError`] or a database URL option the driver rejects (sqlx's configuration error),
/// else [`ErrorKind::Failure`].
pub fn kind(error: &anyhow::Error) -> ErrorKind {
    let bad_configuration = error.chain().any(|cause| {
        matches!(
            cause.downcast_ref::<sqlx::Error>(),
            Some(sqlx::Error::Configuration(_))
        )
    });
    if bad_configuration || error.chain().any(|cause| cause.is::<InputError>()) {
        ErrorKind::BadInput
    } else {
        ErrorKind::Failure
    }
}
