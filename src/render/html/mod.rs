//! The HTML page of `audit --html FILE` and `status --html FILE` (issue 24, "Pictures where a
//! person would rather look than read"): one self-contained page, inline CSS and SVG, no
//! script and nothing loaded from elsewhere (its Content-Security-Policy forbids both), with
//! the audit's summary, a bar per drift class with its example rows, the distribution of
//! |drift|, the conversations with the most drift, the trend of drifting rows over the
//! ledger's audits, and the contract gate's verdict with its reasons.
//!
//! Every number comes from the structures `--format json` prints: the audit's
//! [`AuditSummary`] (as `audit --format json`, or as the ledger recorded it for `status`), the
//! audits of [`Status`] and the gate as [`super::json::GateJson`]. The page is rendered by
//! minijinja from `page.html` beside this file, with HTML auto-escaping on (the template's
//! name ends in `.html`): every value, a conversation key or a gate reason included, is
//! escaped, and the template never marks a value `safe`. Each number a test compares carries
//! `data-v="KEY"` on the element that shows it.

use serde::Serialize;
use std::io::{self, Write};

use crate::drift::DriftClass;
use crate::mapping::Mapping;
use crate::stages::audit::{AuditSummary, DriftBucket};
use crate::stages::status::{AuditRun, Status};

/// The template, compiled into the binary.
const TEMPLATE: &str = include_str!("page.html");

/// What one page shows.
pub struct Page<'a> {
    /// `audit` or `status`: the command that wrote it.
    pub command: &'static str,
    /// The database URL as printed (password redacted).
    pub database: String,
    /// The mapping in force.
    pub mapping: &'a Mapping,
    /// The audit shown: its ledger id (None with `--no-ledger`) and summary; None when there
    /// is none (`status` before any audit).
    pub audit: Option<(Option<i64>, &'a AuditSummary)>,
    /// The ledger's trend and the gate; Err: why they could not be read (the page says so).
    pub status: Result<&'a Status, String>,
    /// When the page was written, milliseconds since the epoch.
    pub generated_ms: i64,
}

/// Writes the page.
///
/// Errors: `out` fails, or the template fails to render (a bug: an `io::Error` of kind
/// `Other` naming the template error).
pub fn page(out: &mut dyn Write, p: &Page<'_>) -> io::Result<()> {
    let mut env = minijinja::Environment::new();
    env.add_template("page.html", TEMPLATE)
        .map_err(io::Error::other)?;
    let view = PageView::of(p);
    let text = env
        .get_template("page.html")
        .and_then(|t| t.render(minijinja::context! { page => view }))
        .map_err(io::Error::other)?;
    out.write_all(text.as_bytes())
}

/// The page's data: the summary as `--format json` has it, plus the geometry of the pictures.
#[derive(Serialize)]
struct PageView<'a> {
    command: &'static str,
    database: &'a str,
    fingerprint: &'a str,
    generated: String,
    audit: Option<AuditView<'a>>,
    status_error: Option<&'a str>,
    trend: Vec<TrendPoint>,
    trend_chart: Option<TrendChart>,
    gate: Option<super::json::GateJson>,
    contract_done: Option<String>,
}

#[derive(Serialize)]
struct AuditView<'a> {
    id: Option<i64>,
    /// The summary, serialised as `audit --format json` prints it.
    s: &'a AuditSummary,
    verdict: &'static str,
    ratio: String,
    duration: String,
    classes: Vec<ClassView<'a>>,
    null_counters: u64,
    buckets: Vec<BucketView>,
    top: Vec<TopView<'a>>,
    backfill_warning: Option<String>,
}

#[derive(Serialize)]
struct ClassView<'a> {
    name: &'static str,
    rows: u64,
    width: String,
    share: String,
    cause: &'static str,
    examples: Vec<ExampleView<'a>>,
}

#[derive(Serialize)]
struct ExampleView<'a> {
    conversation: &'a str,
    subject: &'a str,
    stored: String,
    recomputed: i64,
}

#[derive(Serialize)]
struct BucketView {
    label: String,
    key: String,
    rows: u64,
    height: String,
}

#[derive(Serialize)]
struct TopView<'a> {
    rank: usize,
    conversation: &'a str,
    drifting_rows: u64,
    sum_abs_drift: i64,
    width: String,
}

#[derive(Serialize)]
struct TrendPoint {
    id: i64,
    started: String,
    drifting_rows: u64,
    rows_checked: u64,
    passed: Option<bool>,
    x: String,
    y: String,
}

#[derive(Serialize)]
struct TrendChart {
    points: String,
    max: u64,
    width: u32,
    height: u32,
    top: u32,
    bottom: u32,
}

/// A bar's length as a CSS percentage of the largest value (at least a sliver when not 0).
fn percent(n: u64, max: u64) -> String {
    if n == 0 || max == 0 {
        return "0%".to_string();
    }
    format!("{:.1}%", (n as f64 / max as f64 * 100.0).max(0.5))
}

/// The bug that usually causes a class (the book, docs/src/stages/audit.md: the class table).
fn cause(class: DriftClass) -> &'static str {
    match class {
        DriftClass::NullCounter => "row never initialised",
        DriftClass::Orphan => "counter kept after the member left",
        DriftClass::Negative => "unguarded decrement",
        DriftClass::OwnMessagesCounted => "the sender's own messages incremented",
        DriftClass::ExcludedCounted => "counted what the UI hides (deleted, system)",
        DriftClass::Cleared => "\"mark all read\" raced a new message",
        DriftClass::ExceedsHistory => "duplicate deliveries piled up",
        DriftClass::Overcount => "at-least-once delivery counted twice",
        DriftClass::Undercount => "lost update (read-modify-write)",
        DriftClass::ReadOutOfOrder => "messages read out of order above the watermark",
    }
}

/// A ledger time (ms since the epoch) as `YYYY-MM-DD HH:MM:SS UTC`.
fn when(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    let text = humantime::format_rfc3339_seconds(t).to_string();
    format!("{} UTC", text.replace('T', " ").trim_end_matches('Z'))
}

impl<'a> PageView<'a> {
    fn of(p: &'a Page<'a>) -> PageView<'a> {
        let (trend, trend_chart, gate, contract_done, status_error) = match &p.status {
            Ok(s) => {
                let (trend, chart) = trend(&s.trend);
                let gate = if s.contract_done.is_some() {
                    None
                } else {
                    s.gate.as_ref().map(super::json::gate)
                };
                let done = s
                    .contract_done
                    .map(|d| format!("{} by contract run #{}", d.as_str(), d.run()));
                (trend, chart, gate, done, None)
            }
            Err(e) => (Vec::new(), None, None, None, Some(e.as_str())),
        };
        PageView {
            command: p.command,
            database: &p.database,
            fingerprint: &p.mapping.fingerprint[..12.min(p.mapping.fingerprint.len())],
            generated: when(p.generated_ms),
            audit: p.audit.map(|(id, s)| AuditView::of(id, s)),
            status_error,
            trend,
            trend_chart,
            gate,
            contract_done,
        }
    }
}

impl<'a> AuditView<'a> {
    fn of(id: Option<i64>, s: &'a AuditSummary) -> AuditView<'a> {
        let max_class = s.by_class.values().copied().max().unwrap_or(0);
        let read_flags = s.shape == crate::mapping::Shape::ReadFlags;
        let classes = DriftClass::in_order(read_flags)
            .into_iter()
            .map(|class| {
                let rows = s.by_class.get(class.as_str()).copied().unwrap_or(0);
                let examples = s
                    .examples
                    .get(class.as_str())
                    .map(|list| {
                        list.iter()
                            .map(|e| ExampleView {
                                conversation: &e.conversation,
                                subject: &e.subject,
                                stored: e.stored.map_or("NULL".to_string(), |v| v.to_string()),
                                recomputed: e.recomputed,
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                ClassView {
                    name: class.as_str(),
                    rows,
                    width: percent(rows, max_class),
                    share: if s.drifting_rows == 0 {
                        String::new()
                    } else {
                        format!("{:.1}%", rows as f64 / s.drifting_rows as f64 * 100.0)
                    },
                    cause: cause(class),
                    examples,
                }
            })
            .collect();
        let max_top = s
            .top_conversations
            .iter()
            .map(|c| c.drifting_rows)
            .max()
            .unwrap_or(0);
        let verdict = if !s.complete {
            "incomplete"
        } else if s.passed {
            "passed"
        } else {
            "failed"
        };
        AuditView {
            id,
            s,
            verdict,
            ratio: if s.rows_checked == 0 {
                "0".to_string()
            } else {
                format!("{:.6}", s.drifting_rows as f64 / s.rows_checked as f64)
            },
            duration: format!("{:.1} s", s.duration_ms as f64 / 1000.0),
            classes,
            null_counters: s
                .by_class
                .get(DriftClass::NullCounter.as_str())
                .copied()
                .unwrap_or(0),
            buckets: buckets(&s.abs_drift_buckets),
            top: s
                .top_conversations
                .iter()
                .enumerate()
                .map(|(i, c)| TopView {
                    rank: i + 1,
                    conversation: &c.conversation,
                    drifting_rows: c.drifting_rows,
                    sum_abs_drift: c.sum_abs_drift,
                    width: percent(c.drifting_rows, max_top),
                })
                .collect(),
            backfill_warning: s.backfill_warning(None),
        }
    }
}

/// Every bucket from 1 up to the largest one holding rows (the empty ones too, so the
/// picture's axis is even), each with its bar height.
fn buckets(list: &[DriftBucket]) -> Vec<BucketView> {
    let Some(last) = list.last() else {
        return Vec::new();
    };
    let max = list.iter().map(|b| b.rows).max().unwrap_or(0);
    let mut out = Vec::new();
    let mut to: u64 = 1;
    loop {
        let bucket = DriftBucket::of(to);
        let rows = list
            .iter()
            .find(|b| b.to == bucket.to)
            .map_or(0, |b| b.rows);
        out.push(BucketView {
            label: if bucket.from == bucket.to {
                bucket.to.to_string()
            } else {
                format!("{}–{}", bucket.from, bucket.to)
            },
            key: format!("{}-{}", bucket.from, bucket.to),
            rows,
            height: percent(rows, max),
        });
        if bucket.to >= last.to {
            return out;
        }
        to = bucket.to * 2;
    }
}

/// The trend's points, oldest first, and the line through them (None with no audit).
fn trend(runs: &[AuditRun]) -> (Vec<TrendPoint>, Option<TrendChart>) {
    const WIDTH: u32 = 720;
    const HEIGHT: u32 = 200;
    const TOP: u32 = 16;
    const BOTTOM: u32 = 184;
    const LEFT: f64 = 48.0;
    const RIGHT: f64 = 704.0;
    let values: Vec<(&AuditRun, u64, u64)> = runs
        .iter()
        .filter_map(|a| {
            let s = a.summary.as_ref()?;
            Some((a, s.drifting_rows, s.rows_checked))
        })
        .collect();
    if values.is_empty() {
        return (Vec::new(), None);
    }
    let max = values.iter().map(|v| v.1).max().unwrap_or(0).max(1);
    let n = values.len();
    let points: Vec<TrendPoint> = values
        .iter()
        .enumerate()
        .map(|(i, (a, drifting, checked))| {
            let x = if n == 1 {
                (LEFT + RIGHT) / 2.0
            } else {
                LEFT + (RIGHT - LEFT) * i as f64 / (n - 1) as f64
            };
            let y = f64::from(BOTTOM) - f64::from(BOTTOM - TOP) * *drifting as f64 / max as f64;
            TrendPoint {
                id: a.id,
                started: when(a.started_ms),
                drifting_rows: *drifting,
                rows_checked: *checked,
                passed: a.passed,
                x: format!("{x:.1}"),
                y: format!("{y:.1}"),
            }
        })
        .collect();
    let line = points
        .iter()
        .map(|p| format!("{},{}", p.x, p.y))
        .collect::<Vec<_>>()
        .join(" ");
    (
        points,
        Some(TrendChart {
            points: line,
            max,
            width: WIDTH,
            height: HEIGHT,
            top: TOP,
            bottom: BOTTOM,
        }),
    )
}

#[cfg(test)]
mod tests;
