//! The files and the JSON of a sharded run (issue 31, [`super::shards`]): each shard's own
//! file beside the one named ([`per_shard`]), the combined drift report with its leading
//! `shard` column ([`combine`]), and the one JSON object of `--format json` ([`json`]).

use anyhow::{Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::outcome::Outcome;
use super::stage_runs::Ran;
use crate::db::shard_list::Shard;

/// How one shard's run ended: its output (what the command prints for one database) and its
/// result.
pub struct ShardEnd {
    /// The shard.
    pub shard: Shard,
    /// What the stage wrote for this shard.
    pub output: Vec<u8>,
    /// How it ended, or its error.
    pub result: Result<Ran>,
}

impl ShardEnd {
    /// Its ending ([`Outcome::of_error`] for an error).
    pub fn outcome(&self) -> Outcome {
        match &self.result {
            Ok(ran) => ran.outcome,
            Err(e) => Outcome::of_error(e),
        }
    }
}

/// The first column of the combined drift report: the shard a row comes from.
pub const SHARD_COLUMN: &str = "shard";

/// The file of shard `name` beside `path`: `drift.eu.csv` for `drift.csv`, `page.eu.html` for
/// `page.html`, `report.eu` for `report`.
pub fn per_shard(path: &Path, name: &str) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let file = match path.extension() {
        Some(ext) => format!("{stem}.{name}.{}", ext.to_string_lossy()),
        None => format!("{stem}.{name}"),
    };
    path.with_file_name(file)
}

/// Writes `report` from the reports of the shards whose audit covered every row this run
/// (exit 0 or 1): a `shard` column, then the columns of one database's report
/// (`shared/spec/interface.md`), the rows of each shard in the order the shards were given and,
/// within a shard, in its report's order. Returns notes for the summary: where the report is,
/// and each shard left out and why. Written through a temporary file and renamed, as every
/// report (mode: `mode`, or the replaced file's, or 0600).
///
/// Errors (exit 3): a shard's report cannot be read, the combined one cannot be written.
pub fn combine(ends: &[ShardEnd], report: &Path, mode: Option<u32>) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    let mut writer: Option<crate::report::ReportWriter> = None;
    let (mut rows, mut shards) = (0u64, 0usize);
    for end in ends {
        let covered = matches!(end.outcome(), Outcome::Done | Outcome::DriftAboveTolerance);
        if !covered {
            notes.push(format!(
                "shard {} is not in {} (exit {}: its audit did not cover every row)",
                end.shard.name,
                report.display(),
                end.outcome().code()
            ));
            continue;
        }
        let own = per_shard(report, &end.shard.name);
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(true)
            .from_path(&own)
            .with_context(|| {
                format!(
                    "reading the report of shard {}, {}",
                    end.shard.name,
                    own.display()
                )
            })?;
        if writer.is_none() {
            let mut header = vec![SHARD_COLUMN.to_string()];
            header.extend(reader.headers()?.iter().map(str::to_string));
            let header: Vec<&str> = header.iter().map(String::as_str).collect();
            writer = Some(crate::report::ReportWriter::with_header(
                report, &header, mode,
            )?);
        }
        let w = writer.as_mut().context("the combined report")?;
        for record in reader.records() {
            let record = record.with_context(|| format!("reading {}", own.display()))?;
            let mut cells = vec![end.shard.name.clone()];
            cells.extend(record.iter().map(str::to_string));
            w.row(&cells)?;
            rows += 1;
        }
        shards += 1;
    }
    match writer {
        Some(w) => {
            w.finish()?;
            notes.insert(
                0,
                format!(
                    "report: {} ({rows} drifting rows of {shards} shards, a leading `shard` column; each shard's own beside it)",
                    report.display()
                ),
            );
        }
        None => notes.insert(
            0,
            format!(
                "no report written to {}: no shard's audit covered every row",
                report.display()
            ),
        ),
    }
    Ok(notes)
}

/// The one JSON object of a sharded run: `shards` (each: `name`, `database` as printed,
/// `exit_code`, `error` when it failed, `output`: the object the command prints for one
/// database, or null), `totals` (the figures added up), `notes` and `exit_code` (the worst).
pub fn json(
    out: &mut dyn Write,
    ends: &[ShardEnd],
    totals: &[(String, u64)],
    notes: &[String],
    worst: Outcome,
) -> std::io::Result<()> {
    let shards: Vec<serde_json::Value> = ends
        .iter()
        .map(|end| {
            let output = serde_json::from_slice::<serde_json::Value>(&end.output)
                .unwrap_or(serde_json::Value::Null);
            let mut shard = serde_json::json!({
                "name": end.shard.name,
                "database": end.shard.dsn.to_string(),
                "exit_code": end.outcome().code(),
                "output": output,
            });
            if let Err(e) = &end.result {
                shard["error"] = serde_json::Value::String(crate::error::describe(e));
            }
            shard
        })
        .collect();
    let totals: serde_json::Map<String, serde_json::Value> = totals
        .iter()
        .map(|(k, n)| (k.replace(' ', "_"), serde_json::Value::from(*n)))
        .collect();
    let all = serde_json::json!({
        "shards": shards,
        "totals": totals,
        "notes": notes,
        "exit_code": worst.code(),
    });
    serde_json::to_writer_pretty(&mut *out, &all)?;
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_shard_has_its_own_file_beside() {
        assert_eq!(
            per_shard(Path::new("/r/drift.csv"), "eu"),
            Path::new("/r/drift.eu.csv")
        );
        assert_eq!(per_shard(Path::new("report"), "s1"), Path::new("report.s1"));
        assert_eq!(
            per_shard(Path::new("a/p.x.html"), "b"),
            Path::new("a/p.x.b.html")
        );
    }
}
