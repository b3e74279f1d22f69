//! How every `--format json` object is written: one pretty-printed JSON value and a newline.
//! A leaf of `render::json`: the folder's top (`mod.rs`) and its children (`contract.rs`) both
//! write through it, so no child imports from `mod.rs`.

use serde::Serialize;
use std::io::{self, Write};

/// Writes `value` pretty-printed and a newline. Errors: the writer's, or serialization's
/// (as `io::Error`).
pub(super) fn emit<T: Serialize>(w: &mut dyn Write, value: &T) -> io::Result<()> {
    writeln!(w, "{}", serde_json::to_string_pretty(value)?)
}
