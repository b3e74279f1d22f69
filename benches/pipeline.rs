//! Pipeline benchmark. By default (`--suite goals`) issue 30's tables: see [`goals`] (what runs,
//! the `TIDEMARK_BENCH_*` variables) and [`goal_table`] (what prints). With `--suite classic`
//! issue 11's tables, described below.
//!
//! Classic: generate → expand → backfill → audit → audit --cap 99 on every backend,
//! with wall time, throughput and the peak memory of each phase, and a correctness check (the
//! audit must find exactly the drift the generator injected).
//!
//! ```text
//! cargo bench --bench pipeline -- --suite classic [--members N] [--backends sqlite,postgres,mysql] [--seed S]
//!     [--workloads standard,large] [--large-scale F] [--no-reference] [--no-loop] [--growth]
//!     [--repeat K] [--shapes member,message] [--reference-limit SECS]
//! ```
//!
//! Two workloads (issue 11): *standard* (the generator's data: mostly direct messages and
//! small groups, mostly caught-up members) and *large channels* ([`large`]: 20 channels of
//! 2 000 × F members and 10 000 × F messages, half the members never having read). Beside each
//! tidemark job the bench times the reference statement a DBA would write (one upsert for the
//! backfill, a correlated `COUNT(*)` per member for the audit) through the database's own
//! client, and the naive loop ([`naive`]: one query per member from a client program, sampled
//! and extrapolated when it would take over a minute; `--no-loop` skips it), and prints one
//! table per backend: times, tidemark / reference, loop / tidemark, rows per second and peak
//! RSS. With `--growth` every workload also runs at 4× its size (4N members, large-scale 4F)
//! and a second table gives time(4N) / time(N) per job. With `--repeat K` every tidemark job
//! and reference statement runs K times and the median is kept (the naive loop runs once, and a
//! reference statement that takes over 30 s runs once).
//!
//! Both counter shapes are audited (`--shapes`, default both): per member (the generators'
//! `unread_counters`, with the backfill jobs, the naive loops and the check against the
//! injected drift) and per message (seed 003: `messages.unread_count`, all reset to 0 before
//! its audits, so every message some member has not read drifts). Each uncapped audit must
//! find exactly the rows its reference statement lists. A reference audit is stopped after
//! [`REFERENCE_LIMIT_SECS`] (`--reference-limit SECS`) and its time shown as a lower bound (`>`).
//!
//! The backfill runs twice: with position evidence only (the read receipts), the job the
//! reference upsert does, and with the bench mapping's position and counter evidence (whose
//! watermarks the audits then read). Both count the unread numbers that change (on by
//! default). Before each backfill the watermark table is emptied with `TRUNCATE` (SQLite:
//! `DELETE`), as `expand` leaves it.
//!
//! Defaults: 1 000 000 member rows, all three backends, seed 2024, both workloads, scale 1. After generating and after
//! the backfill the bench refreshes the planner statistics (`ANALYZE`; `ANALYZE TABLE` on
//! MariaDB), as autovacuum or InnoDB's persistent statistics would on a live database; with
//! `--no-analyze` a fresh bulk load is planned without statistics (PostgreSQL with autovacuum
//! off then picks nested loops over the counter-rank CTE, several times slower). PostgreSQL and MariaDB are
//! reached through their admin URLs (`TIDEMARK_TEST_POSTGRES_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`; `TIDEMARK_TEST_MYSQL_URL`, default
//! `mysql://root@127.0.0.1:3306/test`); the bench creates `tm_bench_<pid>` there and drops it at
//! the end. SQLite uses a file in a temporary directory.
//!
//! Each measured phase runs in a child process (this binary re-executed with a hidden
//! `--phase NAME --url URL` argument), so the peak RSS (`VmHWM`) it reports is that phase's own:
//! the kernel cannot reset the high-water mark of a running process.

use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use sqlx::Connection;

use tidemark::db::{testing, Dsn};
use tidemark::generate::{generate, GenerateOptions};
use tidemark::legacy_schema as scenario;
use tidemark::mapping::Mapping;
use tidemark::stages::{audit, backfill, expand};

#[path = "pipeline/app.rs"]
mod app;
#[path = "pipeline/args.rs"]
mod args;
#[path = "pipeline/classic.rs"]
mod classic;
#[path = "pipeline/cli.rs"]
mod cli;
#[path = "pipeline/goal_table.rs"]
mod goal_table;
#[path = "pipeline/goals.rs"]
mod goals;
#[path = "pipeline/large.rs"]
mod large;
#[path = "pipeline/naive.rs"]
mod naive;
#[path = "pipeline/table.rs"]
mod table;
#[path = "pipeline/workload.rs"]
mod workload;

use args::{parse_args, Mode, PhaseArgs, Shapes, Suite};

use large::ClientRun;
use table::mib;

/// The prefix of the one result line a phase child prints on stdout.
const RESULT_TAG: &str = "TIDEMARK_BENCH_RESULT ";

const DEFAULT_MEMBERS: u64 = 1_000_000;
const DEFAULT_SEED: u64 = 2024;

/// The backends the bench runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
    Mysql,
}

impl Backend {
    const ALL: [Backend; 3] = [Backend::Sqlite, Backend::Postgres, Backend::Mysql];

    /// `sqlite`, `postgres` or `mysql`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
            Backend::Mysql => "mysql",
        }
    }

    fn parse(text: &str) -> Result<Backend> {
        match text.trim().to_ascii_lowercase().as_str() {
            "sqlite" => Ok(Backend::Sqlite),
            "postgres" | "postgresql" | "pg" => Ok(Backend::Postgres),
            "mysql" | "mariadb" => Ok(Backend::Mysql),
            other => bail!("unknown backend {other:?}: use sqlite, postgres or mysql"),
        }
    }

    fn admin_url(self) -> Option<String> {
        tidemark::db::testing::admin_url(match self {
            Backend::Sqlite => tidemark::dialect::Dialect::Sqlite,
            Backend::Postgres => tidemark::dialect::Dialect::Postgres,
            Backend::Mysql => tidemark::dialect::Dialect::Mysql,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Memory readings (Linux /proc).

/// A field of /proc/self/status in KiB (`VmRSS`, `VmHWM`), 0 when unavailable.
fn proc_status_kib(field: &str) -> u64 {
    let Ok(text) = std::fs::read_to_string("/proc/self/status") else {
        return 0;
    };
    text.lines()
        .find_map(|line| {
            let rest = line.strip_prefix(field)?.strip_prefix(':')?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Phase children.

/// The backend a URL names (its scheme).
fn backend_of(url: &str) -> Backend {
    match url.split(':').next().unwrap_or_default() {
        "postgres" | "postgresql" => Backend::Postgres,
        "mysql" | "mariadb" => Backend::Mysql,
        _ => Backend::Sqlite,
    }
}

fn mapping() -> Result<Mapping> {
    Mapping::parse(
        &scenario::mapping_toml(tidemark::mapping::Shape::PerMember, false),
        "<bench>",
    )
}

/// The per-message shape's mapping (seed 003: `messages.unread_count`, receipts as evidence).
fn message_mapping() -> Result<Mapping> {
    Mapping::parse(
        &scenario::mapping_toml(tidemark::mapping::Shape::PerMessage, false),
        "<bench, per message>",
    )
}

/// The same mapping with position evidence only (the read receipts): the job the reference
/// upsert does, so the two compare like for like.
fn position_mapping() -> Result<Mapping> {
    let text = scenario::mapping_toml(tidemark::mapping::Shape::PerMember, false)
        .replace("\n[[evidence]]\nkind = \"counter\"\n", "");
    let mapping = Mapping::parse(&text, "<bench, position evidence>")?;
    if mapping.evidence.len() != 1 {
        bail!(
            "the position-only bench mapping still has {} evidence sources",
            mapping.evidence.len()
        );
    }
    Ok(mapping)
}

/// Runs one phase in this (child) process and prints its result line.
fn run_phase(args: PhaseArgs) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut out = runtime.block_on(async {
        let dsn = Dsn::parse(&args.url)?;
        let dialect = dsn.dialect;
        let mut conn = dsn.connect().await?;
        let rss_before = proc_status_kib("VmRSS");
        let hwm_before = proc_status_kib("VmHWM");
        let started = Instant::now();
        let mut out = match args.phase.as_str() {
            "generate" => {
                let truth = generate(
                    &mut conn,
                    dialect,
                    &GenerateOptions {
                        members: args.members,
                        seed: args.seed,
                    },
                )
                .await?;
                json!({
                    "members": truth.members,
                    "messages": truth.messages,
                    "conversations": truth.conversations,
                    "counter_rows": truth.counter_rows,
                    "receipt_rows": truth.receipt_rows,
                    "injected": truth.injected,
                    "drifting_rows": truth.drifting_rows(),
                })
            }
            "default" => {
                let (members, messages, conversations) =
                    workload::generate(&mut conn, backend_of(&args.url), args.scale).await?;
                json!({ "members": members, "messages": messages, "conversations": conversations })
            }
            "app" => {
                app::run(
                    &args.url,
                    args.app_rate,
                    args.app_secs,
                    args.stop_file.as_deref(),
                )
                .await?
            }
            "large" => {
                let (members, messages) =
                    large::generate(&mut conn, backend_of(&args.url), args.scale).await?;
                json!({ "members": members, "messages": messages, "counter_rows": members })
            }
            "naive" => naive::run(&mut conn, dialect, &args.job).await?,
            "clear" => {
                // Empty as `expand` leaves it: a DELETE would leave dead rows that the next
                // backfill's index reads wade through until a vacuum.
                let sql = match dialect {
                    tidemark::dialect::Dialect::Sqlite => "DELETE FROM read_watermarks",
                    _ => "TRUNCATE TABLE read_watermarks",
                };
                sqlx::raw_sql(sql).execute(&mut conn).await?;
                json!({})
            }
            "message_counters" => {
                // The per-message counters, all reset to 0 (the generators leave them NULL):
                // the audit then reports every message some member has not read.
                sqlx::raw_sql("UPDATE messages SET unread_count = 0")
                    .execute(&mut conn)
                    .await?;
                if dialect == tidemark::dialect::Dialect::Postgres {
                    // What autovacuum would do: the update left a dead version of every row.
                    sqlx::raw_sql("VACUUM (ANALYZE) messages")
                        .execute(&mut conn)
                        .await?;
                }
                json!({})
            }
            "analyze" => {
                // Planner statistics, as autovacuum / InnoDB's persistent statistics would have
                // them on a live database (a fresh bulk load has none until then).
                let sql = match dialect {
                    tidemark::dialect::Dialect::Mysql => {
                        "ANALYZE TABLE messages, members, unread_counters, read_receipts, read_watermarks"
                    }
                    _ => "ANALYZE",
                };
                sqlx::raw_sql(sql).execute(&mut conn).await?;
                json!({})
            }
            "expand" => {
                let report = expand::run(&mut conn, &mapping()?, dialect, false).await?;
                json!({ "applied": report.pending.len() })
            }
            "backfill" | "backfill_position" | "backfill_skip" => {
                let mapping = if args.phase == "backfill_position" {
                    position_mapping()?
                } else {
                    mapping()?
                };
                let s = backfill::run(
                    &mut conn,
                    &mapping,
                    dialect,
                    &backfill::BackfillOptions {
                        quiet: true,
                        count_changes: args.phase != "backfill_skip",
                        ..Default::default()
                    },
                )
                .await?;
                json!({
                    "members": s.members,
                    "batches": s.batches,
                    "written": s.written,
                    "no_evidence": s.no_evidence,
                    "unrepresentable_counters": s.unrepresentable_counters,
                    "unread_changes": s.unread_changes,
                    "by_source": s.by_source,
                })
            }
            "audit" => {
                let report = args
                    .report
                    .clone()
                    .ok_or_else(|| anyhow!("--phase audit needs --report"))?;
                let mapping = if args.shape == "message" {
                    message_mapping()?
                } else {
                    mapping()?
                };
                let s = audit::run(
                    &mut conn,
                    &mapping,
                    dialect,
                    &audit::AuditOptions {
                        cap: args.cap,
                        report,
                        quiet: true,
                        ..Default::default()
                    },
                )
                .await?
                .summary;
                json!({
                    "rows_checked": s.rows_checked,
                    "drifting_rows": s.drifting_rows,
                    "by_class": s.by_class,
                    "batches": s.batches,
                })
            }
            other => bail!("unknown phase {other:?}"),
        };
        let secs = started.elapsed().as_secs_f64();
        let _ = conn.close().await;
        out["secs"] = json!(secs);
        out["rss_before_kib"] = json!(rss_before);
        out["hwm_before_kib"] = json!(hwm_before);
        Ok::<Value, anyhow::Error>(out)
    })?;
    drop(runtime);
    out["rss_after_kib"] = json!(proc_status_kib("VmRSS"));
    out["hwm_kib"] = json!(proc_status_kib("VmHWM"));
    println!("{RESULT_TAG}{out}");
    Ok(())
}

/// Re-executes this binary for one phase and parses its result line. The child's stderr goes
/// straight to ours.
fn spawn_phase(phase: &str, label: &str, url: &str, extra: &[String]) -> Result<Value> {
    let exe = std::env::current_exe().context("locating the bench binary")?;
    let wall = Instant::now();
    let output = Command::new(exe)
        .arg("--phase")
        .arg(phase)
        .arg("--url")
        .arg(url)
        .args(extra)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("starting the {phase} phase"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!("phase {phase} failed ({}): {stdout}", output.status);
    }
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix(RESULT_TAG))
        .ok_or_else(|| anyhow!("phase {phase} printed no result: {stdout}"))?;
    let mut v: Value = serde_json::from_str(line)?;
    v["wall_secs"] = json!(wall.elapsed().as_secs_f64());
    eprintln!(
        "  {label:<12} {:>9.2} s   RSS {:>7.1} → {:>7.1} MiB, peak {:>7.1} MiB",
        v["secs"].as_f64().unwrap_or(0.0),
        mib(v["rss_before_kib"].as_u64().unwrap_or(0)),
        mib(v["rss_after_kib"].as_u64().unwrap_or(0)),
        mib(v["hwm_kib"].as_u64().unwrap_or(0)),
    );
    Ok(v)
}

// ---------------------------------------------------------------------------------------------
// Databases.

/// A fresh database for one backend: the URL, and what dropping it needs.
struct BenchDb {
    url: String,
    name: String,
    admin_url: Option<String>,
    _dir: Option<tempfile::TempDir>,
}

impl BenchDb {
    async fn create(backend: Backend) -> Result<BenchDb> {
        let name = format!("tm_bench_{}", std::process::id());
        let Some(admin_url) = backend.admin_url() else {
            let dir = tempfile::tempdir()?;
            let path = dir.path().join(format!("{name}.db"));
            return Ok(BenchDb {
                url: format!("sqlite:{}?mode=rwc", path.display()),
                name,
                admin_url: None,
                _dir: Some(dir),
            });
        };
        let admin = Dsn::parse(&admin_url)?;
        let mut conn = admin.connect().await?;
        let url = testing::recreate_database(&mut conn, &admin, &name)
            .await?
            .expose()
            .to_string();
        let _ = conn.close().await;
        Ok(BenchDb {
            url,
            name,
            admin_url: Some(admin_url),
            _dir: None,
        })
    }

    async fn drop_db(self) -> Result<()> {
        if let Some(admin_url) = &self.admin_url {
            let admin = Dsn::parse(admin_url)?;
            let mut conn = admin.connect().await?;
            testing::drop_database(&mut conn, &admin, &self.name).await?;
            let _ = conn.close().await;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The driver.

/// One run of one workload on one backend.
#[derive(Clone, Copy)]
struct Run {
    backend: Backend,
    workload: &'static str,
    members: u64,
    seed: u64,
    analyze: bool,
    scale: f64,
    reference: bool,
    naive: bool,
    /// Runs of each timed job; the median is kept (`--repeat`).
    repeat: usize,
    /// The counter shapes whose audits run (`--shapes`).
    shapes: Shapes,
    /// Seconds after which a reference audit is stopped (`--reference-limit`).
    reference_limit: f64,
}

/// A reference statement that takes longer than this (seconds) runs once, not `--repeat`
/// times: the quadratic correlated count on large channels would take most of the bench.
const REPEAT_LIMIT_SECS: f64 = 30.0;

/// A reference audit is stopped after this long (seconds, `--reference-limit`) and its time
/// reported as a lower bound: the correlated counts on the ×4 large channels would otherwise
/// run for many minutes.
const REFERENCE_LIMIT_SECS: f64 = 180.0;

/// The median of `secs` (the lower middle one of an even count).
fn median(mut secs: Vec<f64>) -> f64 {
    secs.sort_by(f64::total_cmp);
    secs[(secs.len() - 1) / 2]
}

/// Times a reference statement through the backend's client, `run.repeat` times (each after
/// emptying the watermarks when `clear`), stopped after `limit` seconds, and returns the median
/// run (None with `--no-reference`).
fn reference(
    run: Run,
    url: &str,
    label: &str,
    sql: &str,
    clear: bool,
    limit: Option<f64>,
) -> Result<Option<ClientRun>> {
    if !run.reference {
        return Ok(None);
    }
    let mut runs = Vec::new();
    for _ in 0..run.repeat {
        if clear {
            spawn_phase("clear", "clear", url, &[])?;
        }
        let r = large::run_client(run.backend, url, sql, limit)?;
        eprintln!(
            "  {label:<12} {}{:>9.2} s   (reference, the database's own client; {} rows)",
            if r.stopped { ">" } else { " " },
            r.secs,
            r.rows
        );
        runs.push(r);
        if r.stopped || r.secs > REPEAT_LIMIT_SECS {
            eprintln!("  {label:<12} over {REPEAT_LIMIT_SECS} s: run once");
            break;
        }
    }
    let mid = median(runs.iter().map(|r| r.secs).collect());
    Ok(runs.into_iter().find(|r| r.secs == mid))
}

/// Runs `phase` `run.repeat` times (each after emptying the watermarks when `clear`) and
/// returns the result of the median run, with every run's seconds under `runs`.
fn median_phase(
    run: Run,
    url: &str,
    phase: &str,
    label: &str,
    extra: &[String],
    clear: bool,
) -> Result<Value> {
    let mut results = Vec::new();
    for _ in 0..run.repeat {
        if clear {
            spawn_phase("clear", "clear", url, &[])?;
        }
        results.push(spawn_phase(phase, label, url, extra)?);
    }
    let times: Vec<f64> = results
        .iter()
        .map(|v| v["secs"].as_f64().unwrap_or(0.0))
        .collect();
    let mid = median(times.clone());
    let mut chosen = results
        .into_iter()
        .find(|v| v["secs"].as_f64().unwrap_or(0.0) == mid)
        .ok_or_else(|| anyhow!("phase {phase}: no run"))?;
    chosen["runs"] = json!(times);
    Ok(chosen)
}

/// Drift rows the reference statement listed and tidemark's uncapped audit counted, when they
/// differ (the one-pass form must find exactly the correlated form's rows).
fn rows_differ(reference: &Option<ClientRun>, audit: &Value, what: &str) -> Option<String> {
    let r = reference.as_ref().filter(|r| !r.stopped)?;
    let got = audit["drifting_rows"].as_u64().unwrap_or(0);
    (got != r.rows).then(|| format!("{what}: audit {got} drifting rows, reference {}", r.rows))
}

fn main() -> ExitCode {
    let mode = match parse_args() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("pipeline bench: {e:#}");
            return ExitCode::from(2);
        }
    };
    match mode {
        Mode::Phase(args) => match run_phase(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("pipeline bench phase: error: {e:#}");
                ExitCode::FAILURE
            }
        },
        Mode::Driver(args) if args.suite == Suite::Goals => {
            let settings = match goals::Settings::from_env() {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("pipeline bench: {e:#}");
                    return ExitCode::from(2);
                }
            };
            let rows = goals::run_all(&args.backends, settings);
            goal_table::print(&rows, settings);
            let failed = rows
                .iter()
                .any(|f| f.error.is_some() || f.check.starts_with("MISMATCH"));
            if failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Mode::Driver(args) => classic::run(args),
    }
}
