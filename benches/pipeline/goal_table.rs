//! The tables of issue 30's benchmark, in markdown: per engine every tidemark job beside the
//! hand-written form its goal names (ratio, goal, met), then time(4N) / time(N), `--jobs 1/2/4`,
//! the application latency and a summary of the goals per engine.

use std::collections::BTreeMap;

use serde_json::Value;

use super::goals::{JobsRow, Settings, SizeFigures, NO_JOBS};
use super::large::ClientRun;
use super::table::{peak_mib, secs};

/// The goals of issue 30, in the summary's order: (name, bound).
const GOALS: [(&str, f64); 6] = [
    ("audit ≤ 1.0× the better hand form", 1.0),
    ("audit ≤ 5× the full scan", 5.0),
    ("backfill --skip-change-count ≤ 1.25× upsert", 1.25),
    ("backfill ≤ 1.25× (upsert + faster audit)", 1.25),
    ("time(4N) / time(N) ≤ 4.4", 4.4),
    ("peak RSS ≤ 64 MiB", 64.0),
];

/// One check of a goal: the measured value, and whether it is only an upper bound (the
/// reference was stopped at the time limit, so the true ratio is lower).
#[derive(Clone, Copy)]
struct Check {
    value: f64,
    upper_bound: bool,
}

/// ✔ met, ✘ not met, ? unknown (an upper bound above the goal).
fn mark(c: Option<Check>, goal: f64) -> &'static str {
    match c {
        None => "-",
        Some(c) if c.value <= goal => "✔",
        Some(c) if c.upper_bound => "?",
        Some(_) => "✘",
    }
}

fn cell(v: Option<f64>, prec: usize) -> String {
    v.map_or("-".into(), |x| format!("{x:.prec$}"))
}

/// Checks collected for the summary: engine → goal index → checks.
type Summary = BTreeMap<&'static str, BTreeMap<usize, Vec<Check>>>;

fn size_label(f: &SizeFigures) -> String {
    format!(
        "{}N ({} members, {} messages)",
        if f.factor == 1 {
            String::new()
        } else {
            f.factor.to_string()
        },
        f.members,
        f.messages
    )
}

/// One row of a workload at one size: (job, tidemark result, hand form, hand seconds, hand
/// stopped, goal index into [`GOALS`]).
type JobRow<'a> = (
    &'static str,
    &'a Option<Value>,
    String,
    Option<f64>,
    bool,
    usize,
);

/// The rows of one workload at one size.
fn job_rows(f: &SizeFigures) -> Vec<JobRow<'_>> {
    let upsert = f.upsert.map(|r| r.secs);
    let faster_audit = match (secs(&f.audit), f.correlated) {
        (Some(a), Some(c)) => Some(a.min(c.secs)),
        (a, c) => a.or(c.map(|c| c.secs)),
    };
    let both = upsert.zip(faster_audit).map(|(u, a)| u + a);
    let stopped = |r: Option<ClientRun>| r.is_some_and(|r| r.stopped);
    vec![
        (
            "backfill",
            &f.backfill,
            "upsert + faster audit".into(),
            both,
            false,
            3,
        ),
        (
            "backfill --skip-change-count",
            &f.backfill_skip,
            "upsert".into(),
            upsert,
            false,
            2,
        ),
        (
            "audit",
            &f.audit,
            "correlated count".into(),
            f.correlated.map(|r| r.secs),
            stopped(f.correlated),
            0,
        ),
        (
            "audit",
            &f.audit,
            "full scan".into(),
            f.full_scan.map(|r| r.secs),
            false,
            1,
        ),
        (
            "readers (per-message audit)",
            &f.readers,
            "correlated count per message".into(),
            f.readers_ref.map(|r| r.secs),
            stopped(f.readers_ref),
            0,
        ),
    ]
}

/// Prints one engine's table; adds its checks to `summary`.
fn engine_table(engine: &'static str, rows: &[&SizeFigures], summary: &mut Summary) {
    println!();
    println!("### {engine}");
    println!();
    println!("| workload | size | job | tidemark s | hand form | hand s | tidemark / hand | goal | met | peak MiB (≤ 64) |");
    println!("|---|---|---|---:|---|---:|---:|---:|:-:|---:|");
    for f in rows {
        if let Some(e) = &f.error {
            println!(
                "| {} | {} | ERROR: {e} | | | | | | | |",
                f.workload,
                size_label(f)
            );
        }
        for (job, v, hand, hand_secs, stopped, goal) in job_rows(f) {
            let t = secs(v);
            let check = t
                .zip(hand_secs)
                .filter(|(_, h)| *h > 0.0)
                .map(|(t, h)| Check {
                    value: t / h,
                    upper_bound: stopped,
                });
            let bound = GOALS[goal].1;
            let peak = peak_mib(v);
            let entry = summary.entry(engine).or_default();
            if let Some(c) = check {
                entry.entry(goal).or_default().push(c);
            }
            if let Some(p) = peak {
                entry.entry(5).or_default().push(Check {
                    value: p,
                    upper_bound: false,
                });
            }
            println!(
                "| {} | {} | {job} | {} | {hand} | {} | {}{} | ≤ {bound}× | {} | {} {} |",
                f.workload,
                size_label(f),
                cell(t, 2),
                match hand_secs {
                    Some(h) if stopped => format!(">{h:.2}"),
                    h => cell(h, 2),
                },
                if stopped { "<" } else { "" },
                check.map_or("-".into(), |c| format!("{:.2}×", c.value)),
                mark(check, bound),
                cell(peak, 1),
                mark(
                    peak.map(|p| Check {
                        value: p,
                        upper_bound: false
                    }),
                    64.0
                ),
            );
        }
        println!(
            "| {} | {} | check | | | | | | | {} |",
            f.workload,
            size_label(f),
            f.check
        );
    }
}

/// time(4N) / time(N) of every job, tidemark's checked against 4.4.
fn growth_table(rows: &[SizeFigures], summary: &mut Summary) {
    println!();
    println!("### time(4N) / time(N)");
    println!();
    println!("| engine | workload | backfill | backfill --skip-change-count | audit | readers | upsert | correlated count | full scan | met (≤ 4.4) |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|:-:|");
    for small in rows.iter().filter(|f| f.factor == 1) {
        let Some(big) = rows
            .iter()
            .find(|f| f.factor == 4 && f.backend == small.backend && f.workload == small.workload)
        else {
            continue;
        };
        let ratio =
            |a: Option<f64>, b: Option<f64>| a.zip(b).filter(|(a, _)| *a > 0.0).map(|(a, b)| b / a);
        let r = |c: Option<ClientRun>| c.filter(|c| !c.stopped).map(|c| c.secs);
        let ours = [
            ratio(secs(&small.backfill), secs(&big.backfill)),
            ratio(secs(&small.backfill_skip), secs(&big.backfill_skip)),
            ratio(secs(&small.audit), secs(&big.audit)),
            ratio(secs(&small.readers), secs(&big.readers)),
        ];
        let entry = summary
            .entry(small.backend)
            .or_default()
            .entry(4)
            .or_default();
        let mut met = true;
        for g in ours.iter().flatten() {
            entry.push(Check {
                value: *g,
                upper_bound: false,
            });
            met &= *g <= 4.4;
        }
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            small.backend,
            small.workload,
            cell(ours[0], 2),
            cell(ours[1], 2),
            cell(ours[2], 2),
            cell(ours[3], 2),
            cell(ratio(r(small.upsert), r(big.upsert)), 2),
            cell(ratio(r(small.correlated), r(big.correlated)), 2),
            cell(ratio(r(small.full_scan), r(big.full_scan)), 2),
            if ours.iter().all(Option::is_none) {
                "-"
            } else if met {
                "✔"
            } else {
                "✘"
            }
        );
    }
}

fn jobs_cells(row: &JobsRow) -> [String; 3] {
    [1u32, 2, 4].map(
        |j| match (&row.note, row.runs.iter().find(|(n, _)| *n == j)) {
            (Some(note), _) => note.clone(),
            (None, Some((_, r))) => format!(
                "{:.2} s, {} MiB",
                r.secs,
                r.peak_kib
                    .map_or("-".into(), |k| format!("{:.1}", k as f64 / 1024.0))
            ),
            (None, None) => "-".into(),
        },
    )
}

/// `--jobs 1/2/4` of the binary.
fn jobs_table(rows: &[SizeFigures]) {
    println!();
    println!("### `--jobs` (the tidemark binary, wall time and peak RSS)");
    println!();
    let absent = |r: &JobsRow| r.note.as_deref() == Some(NO_JOBS);
    if rows
        .iter()
        .all(|f| absent(&f.jobs_backfill) && absent(&f.jobs_audit))
    {
        println!(
            "{NO_JOBS}: this tidemark binary has no `--jobs` option (`tidemark backfill --help`)."
        );
        return;
    }
    println!("| engine | workload | size | command | --jobs 1 | --jobs 2 | --jobs 4 |");
    println!("|---|---|---|---|---:|---:|---:|");
    for f in rows.iter().filter(|f| f.error.is_none()) {
        for (command, row) in [("backfill", &f.jobs_backfill), ("audit", &f.jobs_audit)] {
            let [a, b, c] = jobs_cells(row);
            println!(
                "| {} | {} | {} | {command} | {a} | {b} | {c} |",
                f.backend,
                f.workload,
                size_label(f)
            );
        }
    }
}

/// The application's p50/p99 alone, during a backfill, during an audit.
fn app_table(rows: &[SizeFigures], s: Settings) {
    println!();
    println!(
        "### application latency (4 writers, {} transactions/s in all offered, ms per transaction)",
        s.app_rate
    );
    println!();
    println!("| engine | workload | alone p50 / p99 | during backfill p50 / p99 | during audit p50 / p99 | transactions/s reached (alone, backfill, audit) | errors |");
    println!("|---|---|---:|---:|---:|---:|---:|");
    for f in rows.iter().filter(|f| f.app_error.is_some()) {
        let e = f.app_error.as_deref().unwrap_or_default();
        println!("| {} | {} | ERROR: {e} | | | | |", f.backend, f.workload);
    }
    for f in rows.iter().filter(|f| f.app.iter().any(Option::is_some)) {
        let lat = |v: &Option<Value>| match v {
            Some(v) => format!(
                "{} / {}",
                cell(v["p50_ms"].as_f64(), 2),
                cell(v["p99_ms"].as_f64(), 2)
            ),
            None => "-".into(),
        };
        let rate = |v: &Option<Value>| {
            v.as_ref()
                .map_or("-".into(), |v| cell(v["rate"].as_f64(), 0))
        };
        let errors: u64 = f
            .app
            .iter()
            .flatten()
            .map(|v| v["errors"].as_u64().unwrap_or(0))
            .sum();
        println!(
            "| {} | {} | {} | {} | {} | {}, {}, {} | {errors} |",
            f.backend,
            f.workload,
            lat(&f.app[0]),
            lat(&f.app[1]),
            lat(&f.app[2]),
            rate(&f.app[0]),
            rate(&f.app[1]),
            rate(&f.app[2]),
        );
    }
}

/// Every table of the run.
pub fn print(rows: &[SizeFigures], s: Settings) {
    println!();
    println!(
        "## tidemark vs hand-written SQL (issue 30): scale {} (TIDEMARK_BENCH_SCALE), medians of {}",
        s.scale, s.repeat
    );
    let mut summary = Summary::new();
    let mut engines: Vec<&'static str> = rows.iter().map(|f| f.backend).collect();
    engines.dedup();
    for engine in &engines {
        let mine: Vec<&SizeFigures> = rows.iter().filter(|f| f.backend == *engine).collect();
        engine_table(engine, &mine, &mut summary);
    }
    println!();
    println!("Mentions and read flags have no workload in this bench yet (their forms are checked against a model in tests/integration/mention_readers.rs and read_flags.rs), so no row.");
    growth_table(rows, &mut summary);
    jobs_table(rows);
    app_table(rows, s);
    println!();
    println!("### goals");
    println!();
    println!("| goal | {} |", engines.join(" | "));
    println!("|---|{}", ":-:|".repeat(engines.len()));
    for (i, (name, bound)) in GOALS.iter().enumerate() {
        let cells: Vec<String> = engines
            .iter()
            .map(|e| {
                let checks = summary.get(e).and_then(|m| m.get(&i));
                let Some(checks) = checks.filter(|c| !c.is_empty()) else {
                    return "-".into();
                };
                let worst = checks.iter().map(|c| c.value).fold(f64::MIN, f64::max);
                let marks: Vec<&str> = checks.iter().map(|c| mark(Some(*c), *bound)).collect();
                let verdict = if marks.contains(&"✘") {
                    "✘"
                } else if marks.contains(&"?") {
                    "?"
                } else {
                    "✔"
                };
                format!("{verdict} (worst {worst:.2})")
            })
            .collect();
        println!("| {name} | {} |", cells.join(" | "));
    }
    println!();
    println!("`>`: a reference stopped at TIDEMARK_BENCH_REFERENCE_LIMIT ({} s), a lower bound; its ratio (`<`) an upper one (`?`: above the goal, so unknown).", s.reference_limit);
}
