//! Where a mapping error points: [`Locator`] turns a span of the mapping text into an
//! `origin:line:col: message` error (exit 2), and [`section`] parses one TOML section on its own
//! so that an error points into it. A leaf of `mapping`: it knows no mapping type.

use serde::Deserialize;
use std::ops::Range;
use toml::Spanned;

use crate::error::input_error;

/// Turns a span of the mapping text into `origin:line:col: message` errors (exit 2).
pub(super) struct Locator<'a> {
    /// The mapping text.
    pub(super) text: &'a str,
    /// Its name in messages (a path, or `<demo>`).
    pub(super) origin: &'a str,
}

impl Locator<'_> {
    /// An input error at the start of `span` (line 1, column 1 when there is none).
    pub(super) fn at(&self, span: Option<Range<usize>>, msg: &str) -> anyhow::Error {
        let (line, col) = span.map(|s| line_col(self.text, s.start)).unwrap_or((1, 1));
        input_error(format!("{}:{line}:{col}: {msg}", self.origin))
    }

    /// The span of `key`'s value in `table`.
    pub(super) fn value_span(
        &self,
        table: &Spanned<toml::Table>,
        key: &str,
    ) -> Option<Range<usize>> {
        find_value_span(self.text, table.span(), key)
    }
}

/// Parses one section again on its own so that an error points into it: at the offending
/// key's own line (toml's spans, [`toml::de::DeTable`]), or at the key the message names.
pub(super) fn section<T: for<'de> Deserialize<'de>>(
    loc: &Locator<'_>,
    table: &Spanned<toml::Table>,
    name: &str,
) -> anyhow::Result<T> {
    T::deserialize(toml::Value::Table(table.get_ref().clone())).map_err(|e| {
        let key = e
            .message()
            .split('`')
            .nth(1)
            .unwrap_or_default()
            .to_string();
        let span = spanned_error::<T>(loc.text, table.span())
            .or_else(|| {
                (!key.is_empty())
                    .then(|| find_key_span(loc.text, table.span(), &key))
                    .flatten()
            })
            .unwrap_or(table.span());
        loc.at(Some(span), &format!("[{name}]: {}", e.message()))
    })
}

/// The span toml gives the error of deserializing `T` from the section at `within` when it
/// reads the section with spans (the key or value at fault), if it points past the
/// section's start (its header).
fn spanned_error<T: for<'de> Deserialize<'de>>(
    text: &str,
    within: Range<usize>,
) -> Option<Range<usize>> {
    let doc = toml::de::DeTable::parse(text).ok()?;
    let found = doc.get_ref().values().find_map(|v| match v.get_ref() {
        toml::de::DeValue::Table(_) if v.span() == within => Some(v.clone()),
        toml::de::DeValue::Array(items) => items.iter().find(|i| i.span() == within).cloned(),
        _ => None,
    })?;
    T::deserialize(toml::de::ValueDeserializer::from(found))
        .err()?
        .span()
        .filter(|s| s.start > within.start)
}

/// 1-based line and column of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rfind('\n')
        .map(|nl| before.len() - nl)
        .unwrap_or(before.len() + 1);
    (line, col)
}

/// The span of a key (the start of its line's key) in the table that starts at `within.start`.
fn find_key_span(text: &str, within: Range<usize>, key: &str) -> Option<Range<usize>> {
    let value = find_value_span(text, within.clone(), key)?;
    let line_start = text[..value.start].rfind('\n').map(|i| i + 1).unwrap_or(0);
    let indent = text[line_start..].len() - text[line_start..].trim_start().len();
    Some(line_start + indent..value.end)
}

/// The span of `key = value`'s value in the table that starts at `within.start` (a line-based
/// search up to the next `[header]`: mapping files are flat key/value tables).
fn find_value_span(text: &str, within: Range<usize>, key: &str) -> Option<Range<usize>> {
    let region = text.get(within.start..)?;
    let mut offset = within.start;
    for (n, line) in region.split_inclusive('\n').enumerate() {
        let trimmed = line.trim_start();
        if n > 0 && trimmed.starts_with('[') {
            break;
        }
        if let Some(rest) = trimmed.strip_prefix(key) {
            let rest_trim = rest.trim_start();
            if rest_trim.starts_with('=') {
                let value_start = line.len() - rest_trim.len() + 1;
                let value = &line[value_start..];
                let lead = value.len() - value.trim_start().len();
                let start = offset + value_start + lead;
                return Some(start..offset + line.trim_end().len());
            }
        }
        offset += line.len();
    }
    None
}
