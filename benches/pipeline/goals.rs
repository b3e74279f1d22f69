//! Issue 30's benchmark (the default suite): per engine, per workload (*default*, *large
//! channels*) and per size (N and 4N), tidemark's jobs beside the hand-written references, with
//! medians of [`Settings::repeat`] runs, each goal said met or not ([`super::goal_table`]).
//!
//! Jobs: the backfill (mapping: position evidence, then the counter; with and without the
//! change count), the audit, the per-message audit (the *readers* shape, beside its correlated
//! count), `--jobs 1/2/4` of the binary when it has the option, and the application latency
//! row ([`super::app`], at N only). References through the engine's own client: the upsert
//! ([`super::large::reference_backfill`]), the correlated count per member
//! ([`super::large::reference_audit`]), the full scan of messages + members ([`full_scan_sql`]).
//!
//! Environment: `TIDEMARK_BENCH_SCALE` (N, default [`DEFAULT_SCALE`]; 1 is issue 30's size),
//! `TIDEMARK_BENCH_REPEAT` (default 3), `TIDEMARK_BENCH_APP_RATE` (transactions per second of
//! the 4 writers together, default 960), `TIDEMARK_BENCH_APP_SECS` (the "alone" window,
//! default 3), `TIDEMARK_BENCH_REFERENCE_LIMIT` (seconds after which a reference audit is
//! stopped and shown as a lower bound, default 120).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};

use super::args::Shapes;
use super::cli::{self, CliRun};
use super::large::{self, ClientRun};
use super::{median, median_phase, reference, rows_differ, spawn_phase, Backend, BenchDb, Run};

/// N when `TIDEMARK_BENCH_SCALE` is unset: a quick run (about 1 000 conversations).
pub const DEFAULT_SCALE: f64 = 0.02;

/// The bench's settings, from the environment.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub scale: f64,
    pub repeat: usize,
    pub app_rate: f64,
    pub app_secs: f64,
    pub reference_limit: f64,
}

fn env_f64(name: &str, default: f64) -> Result<f64> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => {
            let x: f64 = v
                .trim()
                .parse()
                .with_context(|| format!("{name}={v:?} is not a number"))?;
            if !(x > 0.0 && x.is_finite()) {
                bail!("{name}={v:?}: want a number above 0");
            }
            Ok(x)
        }
        _ => Ok(default),
    }
}

impl Settings {
    /// Reads the `TIDEMARK_BENCH_*` variables. Errors: a value that is not a number above 0.
    pub fn from_env() -> Result<Settings> {
        Ok(Settings {
            scale: env_f64("TIDEMARK_BENCH_SCALE", DEFAULT_SCALE)?,
            repeat: env_f64("TIDEMARK_BENCH_REPEAT", 3.0)?.round().max(1.0) as usize,
            app_rate: env_f64("TIDEMARK_BENCH_APP_RATE", 960.0)?,
            app_secs: env_f64("TIDEMARK_BENCH_APP_SECS", 3.0)?,
            reference_limit: env_f64("TIDEMARK_BENCH_REFERENCE_LIMIT", 120.0)?,
        })
    }
}

/// The full-scan floor: every row of messages and members read once.
pub fn full_scan_sql() -> &'static str {
    "SELECT (SELECT SUM(is_deleted + is_system) FROM messages), (SELECT SUM(active) FROM members)"
}

/// The `--jobs` cells when the binary has no such option.
pub const NO_JOBS: &str = "n/a (no --jobs)";

/// `--jobs N` runs of the binary: per N, the median run, or why there is none.
#[derive(Default)]
pub struct JobsRow {
    pub runs: Vec<(u32, CliRun)>,
    pub note: Option<String>,
}

/// What one workload at one size measured on one engine.
#[derive(Default)]
pub struct SizeFigures {
    pub backend: &'static str,
    pub workload: &'static str,
    /// 1 at N, 4 at 4N.
    pub factor: u64,
    pub members: u64,
    pub messages: u64,
    pub upsert: Option<ClientRun>,
    pub correlated: Option<ClientRun>,
    pub full_scan: Option<ClientRun>,
    pub readers_ref: Option<ClientRun>,
    pub backfill: Option<Value>,
    pub backfill_skip: Option<Value>,
    pub audit: Option<Value>,
    pub readers: Option<Value>,
    pub jobs_backfill: JobsRow,
    pub jobs_audit: JobsRow,
    /// The application's latencies: alone, during a backfill, during an audit (N only).
    pub app: [Option<Value>; 3],
    /// Why the latency row is missing.
    pub app_error: Option<String>,
    pub check: String,
    pub error: Option<String>,
}

/// Runs every engine, workload and size and returns the figures (errors kept per row).
pub fn run_all(backends: &[Backend], settings: Settings) -> Vec<SizeFigures> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut rows = Vec::new();
    for &backend in backends {
        for workload in ["default", "large"] {
            for factor in [1u64, 4] {
                let mut f = SizeFigures {
                    backend: backend.name(),
                    workload,
                    factor,
                    ..Default::default()
                };
                let started = Instant::now();
                let result = runtime.block_on(async {
                    let db = BenchDb::create(backend).await?;
                    eprintln!(
                        "== {} {workload} ×{factor} (scale {})",
                        backend.name(),
                        settings.scale
                    );
                    let r = run_size(&db.url, backend, settings, &mut f);
                    let dropped = db.drop_db().await;
                    r.and(dropped)
                });
                if let Err(e) = result {
                    eprintln!("  error: {e:#}");
                    f.error = Some(first_line(&e));
                }
                eprintln!("  done in {:.1} s", started.elapsed().as_secs_f64());
                rows.push(f);
            }
        }
    }
    rows
}

/// The first line of an error with its causes.
fn first_line(e: &anyhow::Error) -> String {
    format!("{e:#}").lines().next().unwrap_or("").to_string()
}

fn run_size(url: &str, backend: Backend, s: Settings, f: &mut SizeFigures) -> Result<()> {
    let run = Run {
        backend,
        workload: f.workload,
        members: 0,
        seed: 0,
        analyze: true,
        scale: s.scale * f.factor as f64,
        reference: true,
        naive: false,
        repeat: s.repeat,
        shapes: Shapes {
            member: true,
            message: true,
        },
        reference_limit: s.reference_limit,
    };
    let (phase, scale) = match f.workload {
        "default" => ("default", run.scale),
        _ => ("large", 2.0 * run.scale),
    };
    let gen = spawn_phase(
        phase,
        "generate",
        url,
        &["--large-scale".into(), scale.to_string()],
    )?;
    f.members = gen["members"].as_u64().unwrap_or(0);
    f.messages = gen["messages"].as_u64().unwrap_or(0);
    spawn_phase("analyze", "analyze", url, &[])?;
    spawn_phase("expand", "expand", url, &[])?;
    let upsert = large::reference_backfill(backend);
    f.upsert = reference(run, url, "upsert", &upsert, true, None)?;
    f.backfill_skip = Some(median_phase(
        run,
        url,
        "backfill_skip",
        "skip count",
        &[],
        true,
    )?);
    f.backfill = Some(median_phase(run, url, "backfill", "backfill", &[], true)?);
    spawn_phase("analyze", "analyze", url, &[])?;
    let limit = Some(s.reference_limit);
    f.correlated = reference(
        run,
        url,
        "correlated",
        &large::reference_audit(),
        false,
        limit,
    )?;
    f.full_scan = reference(run, url, "full scan", full_scan_sql(), false, None)?;
    let dir = tempfile::tempdir()?;
    let report = |name: &str| dir.path().join(name).display().to_string();
    let audit_args = |shape: &str| {
        let r = report(&format!("drift-{shape}.csv"));
        vec!["--shape".into(), shape.into(), "--report".into(), r]
    };
    let audit = median_phase(run, url, "audit", "audit", &audit_args("member"), false)?;
    let mut problems: Vec<String> = rows_differ(&f.correlated, &audit, "audit")
        .into_iter()
        .collect();
    f.audit = Some(audit);
    if let Err(e) = jobs_rows(run, url, dir.path(), f) {
        let note = Some(format!("error: {}", first_line(&e)));
        f.jobs_backfill.note = note.clone();
        f.jobs_audit.note = note;
    }
    spawn_phase("message_counters", "msg counters", url, &[])?;
    let per_message = large::reference_audit_per_message();
    f.readers_ref = reference(run, url, "readers ref", &per_message, false, limit)?;
    let readers = median_phase(run, url, "audit", "readers", &audit_args("message"), false)?;
    problems.extend(rows_differ(&f.readers_ref, &readers, "readers"));
    f.readers = Some(readers);
    f.check = if problems.is_empty() {
        "report rows = reference rows".into()
    } else {
        format!("MISMATCH: {}", problems.join("; "))
    };
    if f.factor == 1 {
        // A failure here (a lock wait the writers or the job gave up on) leaves the other
        // figures standing.
        match app_rows(url, s, dir.path()) {
            Ok(app) => f.app = app,
            Err(e) => f.app_error = Some(first_line(&e)),
        }
    }
    Ok(())
}

/// The `--jobs 1/2/4` rows through the binary (backfill: `--restart` after emptying the
/// watermarks; audit: `--no-ledger`), or "n/a (no --jobs)" when the binary lacks the option.
fn jobs_rows(run: Run, url: &str, dir: &Path, f: &mut SizeFigures) -> Result<()> {
    let mapping = dir.join("tidemark.toml");
    std::fs::write(
        &mapping,
        tidemark::legacy_schema::mapping_toml(tidemark::mapping::Shape::PerMember, false),
    )?;
    let base = |command: &str| {
        vec![
            command.to_string(),
            "--database".into(),
            url.to_string(),
            "--mapping".into(),
            mapping.display().to_string(),
        ]
    };
    for (command, row) in [
        ("backfill", &mut f.jobs_backfill),
        ("audit", &mut f.jobs_audit),
    ] {
        if !cli::has_jobs(command) {
            row.note = Some(NO_JOBS.into());
            continue;
        }
        for jobs in [1u32, 2, 4] {
            let mut args = base(command);
            args.extend(["--jobs".into(), jobs.to_string()]);
            let ok: &[i32] = if command == "backfill" {
                args.push("--restart".into());
                &[0]
            } else {
                let report = dir.join("drift-jobs.csv").display().to_string();
                args.extend(["--no-ledger".into(), "--report".into(), report]);
                &[0, 1]
            };
            let mut runs = Vec::new();
            for _ in 0..run.repeat {
                if command == "backfill" {
                    spawn_phase("clear", "clear", url, &[])?;
                }
                let r = cli::run(&args, ok, dir)?;
                eprintln!("  {command} --jobs {jobs} {:>9.2} s", r.secs);
                runs.push(r);
            }
            let mid = median(runs.iter().map(|r| r.secs).collect());
            if let Some(r) = runs.into_iter().find(|r| r.secs == mid) {
                row.runs.push((jobs, r));
            }
        }
    }
    Ok(())
}

/// Starts a phase child without waiting for it.
fn start_phase(phase: &str, url: &str, extra: &[String]) -> Result<std::process::Child> {
    Command::new(std::env::current_exe()?)
        .args(["--phase", phase, "--url", url])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting the {phase} phase"))
}

/// Waits for a phase child started by [`start_phase`] and parses its result line.
fn finish_phase(child: std::process::Child, phase: &str) -> Result<Value> {
    let out = child.wait_with_output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("phase {phase} failed ({}): {stdout}", out.status);
    }
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix(super::RESULT_TAG))
        .ok_or_else(|| anyhow!("phase {phase} printed no result: {stdout}"))?;
    Ok(serde_json::from_str(line)?)
}

/// The application latency: alone for `s.app_secs`, during a backfill (after emptying the
/// watermarks), during an audit.
fn app_rows(url: &str, s: Settings, dir: &Path) -> Result<[Option<Value>; 3]> {
    let rate = vec!["--app-rate".to_string(), s.app_rate.to_string()];
    let mut alone_args = rate.clone();
    alone_args.extend(["--app-secs".into(), s.app_secs.to_string()]);
    let alone = spawn_phase("app", "app alone", url, &alone_args)?;
    let during = |phase: &str, extra: Vec<String>, clear: bool| -> Result<Value> {
        if clear {
            spawn_phase("clear", "clear", url, &[])?;
        }
        let stop = dir.join(format!("stop-{phase}"));
        let _ = std::fs::remove_file(&stop);
        let mut args = rate.clone();
        args.extend(["--stop-file".into(), stop.display().to_string()]);
        let app = start_phase("app", url, &args)?;
        std::thread::sleep(Duration::from_millis(500));
        let job = spawn_phase(phase, &format!("{phase} + app"), url, &extra);
        std::fs::write(&stop, b"stop")?;
        let mut v = finish_phase(app, "app")?;
        v["job_secs"] = json!(job?["secs"]);
        Ok(v)
    };
    let backfill = during("backfill", Vec::new(), true)?;
    let report = dir.join("drift-app.csv").display().to_string();
    let audit_args = vec!["--shape".into(), "member".into(), "--report".into(), report];
    let audit = during("audit", audit_args, false)?;
    for (what, v) in [
        ("alone", &alone),
        ("backfill", &backfill),
        ("audit", &audit),
    ] {
        eprintln!(
            "  app {what:<9} p50 {:.2} ms, p99 {:.2} ms, {} transactions, {} errors {}",
            v["p50_ms"].as_f64().unwrap_or(f64::NAN),
            v["p99_ms"].as_f64().unwrap_or(f64::NAN),
            v["transactions"],
            v["errors"],
            v["first_error"].as_str().unwrap_or("")
        );
    }
    Ok([Some(alone), Some(backfill), Some(audit)])
}
