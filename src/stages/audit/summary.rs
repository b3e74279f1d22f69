//! What an audit's numbers mean: the tolerance limits crossed, the error of an empty scope,
//! and the Prometheus metrics file.

use anyhow::{Context, Result};
use std::path::Path;

use super::types::{AuditOptions, AuditSummary, CounterSummary};
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
    // Several counters (issue 22): each drift gauge once per counter, labelled `counter`.
    let per_counter: Vec<(String, DriftNumbers)> = if s.counters.is_empty() {
        vec![(String::new(), DriftNumbers::of_run(s))]
    } else {
        s.counters
            .iter()
            .map(|c| {
                (
                    format!(",counter=\"{}\"", c.name),
                    DriftNumbers::of_counter(c),
                )
            })
            .collect()
    };
    for (label, n) in &per_counter {
        gauge(
            "tidemark_audit_rows_checked",
            "Rows compared by the last audit.",
            label,
            n.rows_checked.to_string(),
        );
    }
    for (label, n) in &per_counter {
        gauge(
            "tidemark_audit_drifting_rows_all",
            "Drifting rows found by the last audit, every class (a gauge: Prometheus keeps _total for counters).",
            label,
            n.drifting_rows.to_string(),
        );
    }
    for (label, n) in &per_counter {
        for (class, k) in n.by_class {
            gauge(
                "tidemark_audit_drifting_rows",
                "Drifting rows per drift class.",
                &format!("{label},class=\"{class}\""),
                k.to_string(),
            );
        }
    }
    for (label, n) in &per_counter {
        gauge(
            "tidemark_audit_abs_drift_sum",
            "Sum of |stored - recomputed| over drifting rows.",
            label,
            n.sum_abs_drift.to_string(),
        );
    }
    for (label, n) in &per_counter {
        gauge(
            "tidemark_audit_abs_drift_max",
            "Largest |stored - recomputed|.",
            label,
            n.max_abs_drift.to_string(),
        );
    }
    gauge(
        "tidemark_audit_duration_seconds",
        "Wall time of the audit (all parts).",
        "",
        format!("{:.3}", s.duration_ms as f64 / 1000.0),
    );
    for (label, n) in &per_counter {
        gauge(
            "tidemark_audit_passed",
            "1 when drift was within tolerance.",
            label,
            u8::from(n.passed).to_string(),
        );
    }
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

/// The drift numbers the metrics file writes per counter (issue 22), or once for the run.
struct DriftNumbers<'a> {
    rows_checked: u64,
    drifting_rows: u64,
    by_class: &'a std::collections::BTreeMap<String, u64>,
    sum_abs_drift: i64,
    max_abs_drift: i64,
    passed: bool,
}

impl DriftNumbers<'_> {
    fn of_run(s: &AuditSummary) -> DriftNumbers<'_> {
        DriftNumbers {
            rows_checked: s.rows_checked,
            drifting_rows: s.drifting_rows,
            by_class: &s.by_class,
            sum_abs_drift: s.sum_abs_drift,
            max_abs_drift: s.max_abs_drift,
            passed: s.passed,
        }
    }

    fn of_counter(c: &CounterSummary) -> DriftNumbers<'_> {
        DriftNumbers {
            rows_checked: c.rows_checked,
            drifting_rows: c.drifting_rows,
            by_class: &c.by_class,
            sum_abs_drift: c.sum_abs_drift,
            max_abs_drift: c.max_abs_drift,
            passed: c.passed,
        }
    }
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

/// The empty per-counter summaries of a mapping of several counters (issue 22), every class
/// listed; none for one counter.
pub(super) fn counter_summaries(mapping: &Mapping) -> Vec<CounterSummary> {
    if !mapping.several_counters() {
        return Vec::new();
    }
    mapping
        .counters
        .iter()
        .map(|c| CounterSummary {
            name: c.name.clone().unwrap_or_default(),
            value: c.value.clone().unwrap_or_else(|| c.column.clone()),
            mentions: c.mentions.is_some(),
            by_class: crate::drift::DriftClass::ALL
                .iter()
                .map(|k| (k.as_str().to_string(), 0))
                .collect(),
            ..Default::default()
        })
        .collect()
}

/// The tolerance limits crossed: the run's ([`crossed`]) for one counter; with several
/// (issue 22), each counter's against the same limits (recorded in its summary, its
/// `passed` set), the run's list being theirs prefixed `counter NAME: `.
pub(super) fn crossed_per_counter(s: &mut AuditSummary, opts: &AuditOptions) -> Vec<String> {
    if s.counters.is_empty() {
        return crossed(s, opts);
    }
    let mut out = Vec::new();
    for c in &mut s.counters {
        let numbers = AuditSummary {
            rows_checked: c.rows_checked,
            drifting_rows: c.drifting_rows,
            max_abs_drift: c.max_abs_drift,
            ..Default::default()
        };
        c.crossed = crossed(&numbers, opts);
        c.passed = c.crossed.is_empty();
        out.extend(c.crossed.iter().map(|x| format!("counter {}: {x}", c.name)));
    }
    out
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
