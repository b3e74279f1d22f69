//! What an audit's numbers mean: the tolerance limits crossed, the error of an empty scope,
//! and the Prometheus metrics file.

use anyhow::{Context, Result};
use std::path::Path;

use super::types::{AuditOptions, AuditSummary};
use crate::error::input_error;
use crate::mapping::Mapping;

/// Writes the summary as Prometheus text format (atomically: a temporary file renamed into
/// place, as node_exporter's textfile collector asks).
pub fn write_metrics(path: &Path, s: &AuditSummary, fingerprint: &str) -> Result<()> {
    use std::fmt::Write as _;
    let labels = format!(
        "mapping=\"{}\",shape=\"{}\"",
        &fingerprint[..12.min(fingerprint.len())],
        s.shape
    );
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, extra: &str, value: String| {
        if !out.contains(&format!("# TYPE {name} ")) {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        }
        let _ = writeln!(out, "{name}{{{labels}{extra}}} {value}");
    };
    gauge(
        "tidemark_audit_rows_checked",
        "Rows compared by the last audit.",
        "",
        s.rows_checked.to_string(),
    );
    gauge(
        "tidemark_audit_drifting_rows_all",
        "Drifting rows found by the last audit, every class (a gauge: Prometheus keeps _total for counters).",
        "",
        s.drifting_rows.to_string(),
    );
    for (class, n) in &s.by_class {
        gauge(
            "tidemark_audit_drifting_rows",
            "Drifting rows per drift class.",
            &format!(",class=\"{class}\""),
            n.to_string(),
        );
    }
    gauge(
        "tidemark_audit_abs_drift_sum",
        "Sum of |stored - recomputed| over drifting rows.",
        "",
        s.sum_abs_drift.to_string(),
    );
    gauge(
        "tidemark_audit_abs_drift_max",
        "Largest |stored - recomputed|.",
        "",
        s.max_abs_drift.to_string(),
    );
    gauge(
        "tidemark_audit_duration_seconds",
        "Wall time of the audit (all parts).",
        "",
        format!("{:.3}", s.duration_ms as f64 / 1000.0),
    );
    gauge(
        "tidemark_audit_passed",
        "1 when drift was within tolerance.",
        "",
        u8::from(s.passed).to_string(),
    );
    gauge(
        "tidemark_audit_complete",
        "1 when every row in scope was covered.",
        "",
        u8::from(s.complete).to_string(),
    );
    gauge(
        "tidemark_audit_members_without_watermark",
        "Members audited with no watermark.",
        "",
        s.members_without_watermark.to_string(),
    );
    if let Some(b) = &s.backfill {
        gauge(
            "tidemark_audit_backfill_finished",
            "1 when the mapping's newest backfill had finished as the audit started (0: the gate does not count the audit).",
            "",
            u8::from(b.finished).to_string(),
        );
    }
    gauge(
        "tidemark_audit_timestamp_seconds",
        "When the audit finished (Unix time).",
        "",
        format!("{:.3}", crate::values::now_ms() as f64 / 1000.0),
    );
    crate::report::check_destination(path)?;
    let tmp = path.with_extension(format!("prom.{}.tmp", std::process::id()));
    if let Err(e) = write_replacing(&tmp, path, out.as_bytes()) {
        // Disk full: leave no half-written temporary file beside the destination.
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("writing the metrics file {}", tmp.display()));
    }
    std::fs::rename(&tmp, path)
        .with_context(|| format!("moving the metrics file into place at {}", path.display()))?;
    Ok(())
}

/// Writes `bytes` to `tmp`, which is to replace `dest`: with the replaced file's mode, owner and
/// group where permitted (issue 25, row 12); a new metrics file keeps the mode the umask gives
/// (node_exporter, another user, reads it; it names no user).
fn write_replacing(tmp: &Path, dest: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write as _;
    let mut file = std::fs::File::create(tmp)?;
    file.write_all(bytes)?;
    crate::report::take_place_of(&file, dest, None, None)?;
    file.sync_all()?;
    Ok(())
}

/// The error of an audit whose scope checked no row: it names the scope.
pub(super) fn empty_scope(mapping: &Mapping, scope: &[String]) -> anyhow::Error {
    let what = if scope.is_empty() {
        format!("the whole table {}", mapping.counter_table())
    } else {
        scope.join(", ")
    };
    input_error(format!(
        "the audit checked no row (scope: {what}): an empty scope proves nothing (a mistyped range?); --allow-empty accepts it"
    ))
}

/// The tolerance limits the summary crosses, each as a sentence (only the limits checked).
pub(super) fn crossed(s: &AuditSummary, opts: &AuditOptions) -> Vec<String> {
    let mut out = Vec::new();
    if opts.checked.rows && s.drifting_rows > opts.max_drift_rows {
        out.push(format!(
            "drifting rows {} > --max-drift-rows {}",
            s.drifting_rows, opts.max_drift_rows
        ));
    }
    let ratio = if s.rows_checked == 0 {
        0.0
    } else {
        s.drifting_rows as f64 / s.rows_checked as f64
    };
    if opts.checked.ratio && ratio > opts.max_drift_ratio {
        out.push(format!(
            "drift ratio {ratio:.6} > --max-drift-ratio {}",
            opts.max_drift_ratio
        ));
    }
    if opts.checked.abs && s.max_abs_drift > opts.max_abs_drift {
        out.push(format!(
            "largest |drift| {} > --max-abs-drift {}",
            s.max_abs_drift, opts.max_abs_drift
        ));
    }
    out
}
