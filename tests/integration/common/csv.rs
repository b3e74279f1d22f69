//! Reading the CSV files tidemark writes (audit reports, contract archives).

use std::path::Path;

use anyhow::{Context, Result};

/// A CSV file: its header line as written, and its data rows as raw fields.
#[derive(Debug, Clone)]
pub struct CsvFile {
    /// The first line, exactly as written (without its line end).
    pub header: String,
    /// The header's fields.
    pub columns: Vec<String>,
    /// The data rows, each as its raw fields (an empty field: NULL).
    pub rows: Vec<Vec<String>>,
}

/// Reads `path` as a CSV file with a header.
///
/// Errors: the file cannot be read, or a record is not valid CSV.
pub fn try_read(path: &Path) -> Result<CsvFile> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let header = text.lines().next().unwrap_or_default().to_string();
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(text.as_bytes());
    let columns = reader
        .headers()
        .with_context(|| format!("the header of {}", path.display()))?
        .iter()
        .map(str::to_string)
        .collect();
    let rows = reader
        .records()
        .map(|r| {
            r.map(|r| r.iter().map(str::to_string).collect())
                .with_context(|| format!("a record of {}", path.display()))
        })
        .collect::<Result<_>>()?;
    Ok(CsvFile {
        header,
        columns,
        rows,
    })
}

/// Reads `path` as a CSV file with a header ([`try_read`]).
///
/// # Panics
///
/// When [`try_read`] fails.
#[track_caller]
pub fn read(path: &Path) -> CsvFile {
    try_read(path).unwrap_or_else(|e| panic!("{e:#}"))
}
