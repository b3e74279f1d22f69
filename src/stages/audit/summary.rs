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
            mentions: c.mentions.is_some() || c.mentioned.is_some(),
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

/// The note an audit adds when its drift looks like a mapping error rather than counter
/// drift (issue 24, "Two position spaces mixed, silently"): at least half of at least 20 rows
/// checked drift, and two in three drifting rows say the watermarks are all behind (`cleared`,
/// `undercount`) or all ahead (`overcount`, `exceeds_history`) of the counters. Counters drift
/// here and there; a mapping whose evidence is in another position space than the messages'
/// (a global id beside a per-conversation number), or a wrong `countable`, moves nearly every
/// member the same way. None otherwise.
pub(super) fn mapping_error_hint(s: &AuditSummary) -> Option<String> {
    let class = |names: &[&str]| -> u64 {
        names
            .iter()
            .map(|n| s.by_class.get(*n).copied().unwrap_or(0))
            .sum()
    };
    if s.rows_checked < 20 || s.drifting_rows * 2 < s.rows_checked {
        return None;
    }
    for (names, way) in [
        (&["cleared", "undercount"][..], "behind"),
        (&["overcount", "exceeds_history"][..], "ahead of"),
    ] {
        let n = class(names);
        if n * 3 >= s.drifting_rows * 2 {
            return Some(format!(
                "{} of {} rows drift, {} of them {}: the watermarks are {} the counters almost everywhere, which a mapping error gives more often than counters do (evidence in another position space than messages.id, such as a per-conversation number beside a global id, or a wrong countable); compare the evidence shares `tidemark backfill --dry-run` prints before trusting this report",
                s.drifting_rows,
                s.rows_checked,
                n,
                names.join(" or "),
                way
            ));
        }
    }
    None
}

#[cfg(test)]
mod hint_tests {
    use super::*;

    fn summary(checked: u64, classes: &[(&str, u64)]) -> AuditSummary {
        let mut s = AuditSummary {
            rows_checked: checked,
            ..Default::default()
        };
        for (c, n) in classes {
            s.by_class.insert(c.to_string(), *n);
            s.drifting_rows += n;
        }
        s
    }

    #[test]
    fn widespread_one_way_drift_gets_the_hint() {
        // The renamed forum: 111 drifting rows of 120, cleared 43 + undercount 41 + …
        let s = summary(
            120,
            &[
                ("cleared", 43),
                ("undercount", 41),
                ("orphan", 7),
                ("overcount", 3),
            ],
        );
        let hint = mapping_error_hint(&s).expect("hint");
        assert!(
            hint.starts_with(
                "94 of 120 rows drift, 84 of them cleared or undercount: the watermarks are behind"
            ),
            "{hint}"
        );
        let ahead = summary(40, &[("overcount", 20), ("exceeds_history", 5)]);
        assert!(mapping_error_hint(&ahead)
            .unwrap()
            .contains("overcount or exceeds_history: the watermarks are ahead of"));
    }

    #[test]
    fn ordinary_drift_gets_none() {
        // Few drifting rows, however one-sided.
        assert_eq!(mapping_error_hint(&summary(120, &[("cleared", 30)])), None);
        // Many, but of every kind.
        let mixed = summary(100, &[("cleared", 20), ("overcount", 20), ("orphan", 20)]);
        assert_eq!(mapping_error_hint(&mixed), None);
        // Too few rows to judge.
        assert_eq!(mapping_error_hint(&summary(10, &[("cleared", 10)])), None);
    }
}
