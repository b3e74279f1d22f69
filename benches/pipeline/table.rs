//! The bench's figures and the table it prints: one per backend (issue 11).

use serde_json::Value;

use super::large::ClientRun;

/// KiB as MiB.
pub fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// What one workload on one backend measured.
#[derive(Default)]
pub struct Figures {
    // Which run, what it held, each phase's result line, the check against the injected drift.
    pub backend: &'static str,
    pub workload: &'static str,
    /// 1 at N, 4 at 4N (`--growth`).
    pub factor: u64,
    /// The naive loops' results (`loop_secs`, `extrapolated`, …).
    pub loop_backfill: Option<Value>,
    pub loop_audit: Option<Value>,
    /// The reference statements' median runs (`stopped`: a lower bound).
    pub ref_backfill: Option<ClientRun>,
    pub ref_audit: Option<ClientRun>,
    pub ref_audit_message: Option<ClientRun>,
    pub members: u64,
    pub messages: u64,
    pub counter_rows: u64,
    pub generate: Option<Value>,
    /// The backfill with position evidence only (the reference's job).
    pub backfill_position: Option<Value>,
    /// The backfill with position and counter evidence.
    pub backfill: Option<Value>,
    pub audit: Option<Value>,
    pub audit_cap: Option<Value>,
    /// The per-message shape's audits (uncapped, `--cap 99`).
    pub audit_message: Option<Value>,
    pub audit_message_cap: Option<Value>,
    pub check: String,
    /// What the per-message audit found (and whether the reference listed the same rows).
    pub check_message: String,
    pub cap_note: String,
    pub error: Option<String>,
}

/// A phase's measured seconds.
pub fn secs(v: &Option<Value>) -> Option<f64> {
    v.as_ref()?.get("secs")?.as_f64()
}

/// A phase's peak RSS (VmHWM), MiB.
pub fn peak_mib(v: &Option<Value>) -> Option<f64> {
    Some(mib(v.as_ref()?.get("hwm_kib")?.as_u64()?))
}

/// A count the phase reported under `key`.
pub fn count(v: &Option<Value>, key: &str) -> Option<u64> {
    v.as_ref()?.get(key)?.as_u64()
}

/// One job's row: its name, tidemark's result, the reference time, the naive loop's result,
/// and the count its rows per second are of.
type Job<'a> = (
    &'a str,
    &'a Option<Value>,
    Option<ClientRun>,
    &'a Option<Value>,
    &'a str,
);

/// A naive loop's time and whether it was extrapolated from a sample (marked `*`).
fn loop_secs(v: &Option<Value>) -> Option<(f64, bool)> {
    let v = v.as_ref()?;
    Some((
        v.get("loop_secs")?.as_f64()?,
        v.get("extrapolated")?.as_bool().unwrap_or(false),
    ))
}

/// One table per backend: for each workload and job, tidemark's time, the reference's, their
/// ratio, the naive loop's time and its ratio to tidemark's, rows per second and tidemark's
/// peak RSS; with several sizes (`--growth`), a table of time(4N) / time(N) per job.
pub fn print_table(rows: &[Figures]) {
    let opt = |v: Option<f64>, prec: usize| match v {
        Some(x) => format!("{x:.prec$}"),
        None => "-".to_string(),
    };
    let rate = |n: Option<u64>, s: Option<f64>| match (n, s) {
        (Some(n), Some(s)) if s > 0.0 => format!("{:.0}", n as f64 / s),
        _ => "-".to_string(),
    };
    let mut backends: Vec<&str> = rows.iter().map(|f| f.backend).collect();
    backends.dedup();
    let mut sampled = false;
    let mut stopped = false;
    for backend in &backends {
        println!();
        println!("### {backend}");
        println!();
        println!(
            "| workload | job | tidemark s | reference s | tidemark / reference | loop s | loop / tidemark | rows/s | peak MiB | drifting | check |"
        );
        println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
        for f in rows.iter().filter(|f| f.backend == *backend) {
            let workload = format!(
                "{}{} ({} members, {} messages)",
                f.workload,
                if f.factor > 1 {
                    format!(" ×{}", f.factor)
                } else {
                    String::new()
                },
                f.members,
                f.messages
            );
            let jobs: [Job; 6] = [
                (
                    "backfill (position)",
                    &f.backfill_position,
                    f.ref_backfill,
                    &f.loop_backfill,
                    "members",
                ),
                (
                    "backfill (position, counter)",
                    &f.backfill,
                    None,
                    &None,
                    "members",
                ),
                (
                    "audit",
                    &f.audit,
                    f.ref_audit,
                    &f.loop_audit,
                    "rows_checked",
                ),
                ("audit --cap 99", &f.audit_cap, None, &None, "rows_checked"),
                (
                    "audit per message",
                    &f.audit_message,
                    f.ref_audit_message,
                    &None,
                    "rows_checked",
                ),
                (
                    "audit per message --cap 99",
                    &f.audit_message_cap,
                    None,
                    &None,
                    "rows_checked",
                ),
            ];
            for (job, v, reference, lp, unit) in jobs {
                let t = secs(v);
                if t.is_none() && reference.is_none() {
                    continue;
                }
                // A stopped reference is a lower bound: its ratio an upper one.
                let (ref_cell, ratio) = match (t, reference) {
                    (Some(t), Some(r)) if r.secs > 0.0 => {
                        stopped |= r.stopped;
                        let mark = if r.stopped { "<" } else { "" };
                        (
                            format!("{}{:.2}", if r.stopped { ">" } else { "" }, r.secs),
                            format!("{mark}{:.3}×", t / r.secs),
                        )
                    }
                    _ => ("-".to_string(), "-".to_string()),
                };
                let (loop_cell, loop_ratio) = match (loop_secs(lp), t) {
                    (Some((l, extra)), Some(t)) if t > 0.0 => {
                        sampled |= extra;
                        (
                            format!("{l:.2}{}", if extra { "*" } else { "" }),
                            format!("{:.1}×", l / t),
                        )
                    }
                    _ => ("-".to_string(), "-".to_string()),
                };
                println!(
                    "| {workload} | {job} | {} | {ref_cell} | {ratio} | {loop_cell} | {loop_ratio} | {} | {} | {} | {} |",
                    opt(t, 2),
                    rate(count(v, unit), t),
                    opt(peak_mib(v), 1),
                    count(v, "drifting_rows")
                        .map(|n| n.to_string())
                        .unwrap_or_else(|| "-".into()),
                    match &f.error {
                        Some(e) => format!("ERROR: {e}"),
                        None if job == "audit" => f.check.clone(),
                        None if job == "audit per message" => f.check_message.clone(),
                        None => String::new(),
                    }
                );
            }
        }
    }
    if sampled {
        println!();
        println!(
            "`*`: the naive loop would have taken over a minute: it ran on a sample of members spread over the table for about 15 s and the time is extrapolated to all of them."
        );
    }
    if stopped {
        println!();
        println!(
            "`>`: the reference statement was stopped at the bench's time limit; its time is a lower bound and the ratio an upper one (`<`)."
        );
    }
    if rows.iter().any(|f| f.factor > 1) {
        println!();
        println!("### growth: time(4N) / time(N)");
        println!();
        println!("| backend | workload | backfill (position) | backfill (position, counter) | audit | audit --cap 99 | audit per message | reference backfill | reference audit | reference audit per message |");
        println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for small in rows.iter().filter(|f| f.factor == 1) {
            let Some(big) = rows.iter().find(|f| {
                f.factor == 4 && f.backend == small.backend && f.workload == small.workload
            }) else {
                continue;
            };
            let g = |a: Option<f64>, b: Option<f64>| match (a, b) {
                (Some(a), Some(b)) if a > 0.0 => format!("{:.2}", b / a),
                _ => "-".to_string(),
            };
            // A stopped reference has no growth figure.
            let r = |c: Option<ClientRun>| c.filter(|c| !c.stopped).map(|c| c.secs);
            println!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                small.backend,
                small.workload,
                g(secs(&small.backfill_position), secs(&big.backfill_position)),
                g(secs(&small.backfill), secs(&big.backfill)),
                g(secs(&small.audit), secs(&big.audit)),
                g(secs(&small.audit_cap), secs(&big.audit_cap)),
                g(secs(&small.audit_message), secs(&big.audit_message)),
                g(r(small.ref_backfill), r(big.ref_backfill)),
                g(r(small.ref_audit), r(big.ref_audit)),
                g(r(small.ref_audit_message), r(big.ref_audit_message)),
            );
        }
    }
}
