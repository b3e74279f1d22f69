//! Recognising a catalog's tables and columns by name, and writing their names into the SQL
//! a proposal shows.

use super::catalog::{Column, Table};
use crate::dialect::Dialect;

/// The first column of `table` named in `names` (its rank and the column).
pub(super) fn pick<'a>(table: &'a Table, names: &[&str]) -> Option<(usize, &'a Column)> {
    names
        .iter()
        .enumerate()
        .find_map(|(i, n)| table.column(n).map(|c| (i, c)))
}

/// The name in lower case (catalog names are compared without case).
pub(super) fn lower(s: &str) -> String {
    s.to_ascii_lowercase()
}

/// Whether a table is named like a receipts table (`read_receipts`, `read_markers`, `*_reads`).
pub(super) fn is_receipts(table: &Table) -> bool {
    let n = lower(&table.bare);
    n.contains("receipt") || n.contains("read_marker") || n.ends_with("_reads")
}

/// A column as a predicate names it: quoted when it has capitals (PostgreSQL folds unquoted
/// names to lower case), as it is otherwise so that the DBA reads plain SQL.
pub(super) fn col(dialect: Dialect, name: &str) -> String {
    if name.chars().any(|c| c.is_ascii_uppercase()) {
        dialect.quote(name)
    } else {
        name.to_string()
    }
}

/// A table name as a statement writes it: each part quoted when it has capitals.
pub(super) fn table_ref(dialect: Dialect, name: &str) -> String {
    name.split('.')
        .map(|part| col(dialect, part))
        .collect::<Vec<_>>()
        .join(".")
}
