//! A warning `inspect` writes at the top of its proposal (and the command line on stderr).

/// One warning: what is wrong, how many rows it touches, and the statement that fixes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// What is wrong, in words (names the table and columns).
    pub message: String,
    /// How many rows it concerns, when counted.
    pub count: Option<u64>,
    /// The statement (or the change) that fixes it.
    pub fix: Option<String>,
}
