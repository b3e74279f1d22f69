//! What scripts read: the `--format json` outputs.

use std::io::{self, Write};

use crate::stages::audit::AuditSummary;

/// The audit summary as one pretty-printed JSON object and a newline (`audit --format json`;
/// the keys are the fields of [`AuditSummary`]).
pub fn audit(w: &mut dyn Write, s: &AuditSummary) -> io::Result<()> {
    writeln!(w, "{}", serde_json::to_string_pretty(s)?)
}
