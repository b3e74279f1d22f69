//! One drifting row of the audit statement: decoded by the column aliases of
//! `sql/common/audit_per_member.sql` / `audit_per_message.sql`, classified
//! (`crate::drift`), counted in the summary and written to the report.

use anyhow::Result;
use sqlx::Row;

use super::tally::{add_to_buckets, BatchTally};
use super::types::{AuditSummary, BatchRun, Example};
use crate::drift::{classify, Facts, FlagFacts, Membership};
use crate::ledger;
use crate::mapping::Shape;
use crate::report::{cell, text_cell, ReportWriter};
use crate::stages::Key;

/// Decodes one row of the audit statement of counter `index` of the run, classifies it and
/// records it (summary, its counter's when the mapping has several, examples, the |drift|
/// distribution, the batch's tally per conversation `per_conv`, report; the report's
/// `counter` cell then names it); returns the row for `--store-rows`, or None when it does not drift after all
/// (the statement compares clamped values; classification has the last word).
///
/// Errors: a column missing or of another type than the template promises (a bug, exit 3),
/// or the report cannot be written.
pub(super) fn record_row(
    row: &sqlx::any::AnyRow,
    run: &BatchRun<'_>,
    index: usize,
    summary: &mut AuditSummary,
    report: &mut ReportWriter,
    per_conv: &mut BatchTally,
) -> Result<Option<ledger::DriftRow>> {
    let (shape, cap) = (run.shape, run.opts.cap);
    let conv = Key::read(row, "conv", run.conv_kind)?;
    let (subject, stored, recomputed): (Key, Option<i64>, i64) = match shape {
        Shape::PerMember | Shape::ReadFlags => (
            Key::read(row, "usr", run.user_kind)?,
            row.try_get("stored")?,
            row.try_get("recomputed")?,
        ),
        Shape::PerMessage => (
            Key::Int(row.try_get("pos")?),
            row.try_get("stored")?,
            row.try_get("recomputed")?,
        ),
    };
    // Shape C: the member's read flags beside the watermark (audit_per_member.sql).
    let flags = match shape {
        Shape::ReadFlags => Some(FlagFacts {
            read_after: row.try_get("read_after")?,
            unread_before: row.try_get("unread_before")?,
        }),
        _ => None,
    };
    let (facts, last_read, source) = match shape {
        Shape::PerMember | Shape::ReadFlags => {
            let last_read: Option<i64> = row.try_get("last_read_id")?;
            let source = crate::values::text(row, "source")?;
            let is_member: i64 = row.try_get("is_member")?;
            (
                Facts {
                    stored,
                    recomputed,
                    membership: Membership::PerMember {
                        is_member: is_member != 0,
                    },
                    own: row.try_get("own_after")?,
                    excluded: row.try_get("excluded_after")?,
                    total: row.try_get("total_countable")?,
                    flags,
                },
                last_read,
                source,
            )
        }
        Shape::PerMessage => (
            Facts {
                stored,
                recomputed,
                membership: Membership::PerMessage {
                    orphans: row.try_get("orphans")?,
                },
                own: row.try_get("own_after")?,
                excluded: row.try_get("excluded_after")?,
                total: row.try_get("total_countable")?,
                flags: None,
            },
            None,
            None,
        ),
    };
    let Some(d) = classify(&facts, cap) else {
        return Ok(None);
    };
    // |drift| can exceed i64 (a stored i64::MIN): the summary's sum and largest value
    // saturate at i64::MAX, never wrap (issue 25 row 2); the report keeps the exact drift.
    let abs = d.drift.map_or(0, |x| saturate(x.unsigned_abs()));
    let example = Example {
        conversation: conv.to_string(),
        subject: subject.to_string(),
        stored: d.stored,
        recomputed: d.recomputed,
    };
    let class = d.class.as_str();
    tally(
        (
            &mut summary.drifting_rows,
            &mut summary.sum_abs_drift,
            &mut summary.max_abs_drift,
        ),
        (&mut summary.by_class, &mut summary.examples),
        class,
        abs,
        &example,
    );
    if let Some(c) = summary.counters.get_mut(index) {
        tally(
            (
                &mut c.drifting_rows,
                &mut c.sum_abs_drift,
                &mut c.max_abs_drift,
            ),
            (&mut c.by_class, &mut c.examples),
            class,
            abs,
            &example,
        );
    }
    if d.drift.is_some() {
        add_to_buckets(&mut summary.abs_drift_buckets, abs as u64);
    }
    per_conv.add(&conv, abs);
    let key_cell = |key: &Key| match key {
        Key::Text(t) => text_cell(t, run.opts.spreadsheet_safe),
        Key::Int(_) => key.to_string(),
    };
    let mut cells = vec![
        key_cell(&conv),
        key_cell(&subject),
        cell(d.stored),
        d.recomputed.to_string(),
        cell(d.drift),
        d.class.as_str().to_string(),
    ];
    if shape != Shape::PerMessage {
        cells.push(cell(last_read));
        cells.push(source.unwrap_or_default());
    }
    if let Some(f) = flags {
        cells.push(f.read_after.to_string());
        cells.push(f.unread_before.to_string());
    }
    if run.counters.len() > 1 {
        cells.push(run.counters[index].name.clone());
    }
    report.row(&cells)?;
    Ok(Some(ledger::DriftRow {
        conversation: conv.to_string(),
        subject: subject.to_string(),
        stored: d.stored,
        recomputed: d.recomputed,
        drift: d.drift.map(saturate),
        class: d.class.as_str(),
    }))
}

/// The drifting-row numbers and the per-class tallies a drifting row adds to.
type Numbers<'a> = (&'a mut u64, &'a mut i64, &'a mut i64);
type Classes<'a> = (
    &'a mut std::collections::BTreeMap<String, u64>,
    &'a mut std::collections::BTreeMap<String, Vec<Example>>,
);

/// Adds one drifting row of `class` and |drift| `abs` (saturated) to a summary's numbers:
/// the run's, or one counter's (issue 22); the example kept while its class has fewer than 3.
fn tally(numbers: Numbers<'_>, classes: Classes<'_>, class: &str, abs: i64, example: &Example) {
    let (rows, sum, max) = numbers;
    *rows += 1;
    *sum = sum.saturating_add(abs);
    *max = (*max).max(abs);
    *classes.0.entry(class.to_string()).or_default() += 1;
    let examples = classes.1.entry(class.to_string()).or_default();
    if examples.len() < 3 {
        examples.push(example.clone());
    }
}

/// `x` as an i64, saturated at `i64::MIN` / `i64::MAX` (the summary's sums and the ledger's
/// BIGINT `drift` column; the CSV report writes the exact value).
fn saturate<T: TryInto<i64> + PartialOrd + Default>(x: T) -> i64 {
    let negative = x < T::default();
    x.try_into()
        .unwrap_or(if negative { i64::MIN } else { i64::MAX })
}
