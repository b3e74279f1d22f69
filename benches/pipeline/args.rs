//! The bench's command line: the driver's options and a phase child's hidden ones.

use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};

use super::{Backend, DEFAULT_MEMBERS, DEFAULT_SEED, REFERENCE_LIMIT_SECS};

/// What a phase child is told to do (the hidden `--phase NAME --url URL` arguments).
pub struct PhaseArgs {
    pub phase: String,
    pub job: String,
    pub url: String,
    pub members: u64,
    pub seed: u64,
    pub cap: Option<i64>,
    pub report: Option<PathBuf>,
    pub scale: f64,
    /// `member` or `message`: the counter shape the audit phase reads (`--shape`).
    pub shape: String,
    /// The application writers' transactions per second, all 4 together (`--app-rate`).
    pub app_rate: f64,
    /// How long the writers run, seconds; 0: until `stop_file` exists (`--app-secs`).
    pub app_secs: f64,
    /// The file whose creation stops the writers (`--stop-file`).
    pub stop_file: Option<PathBuf>,
}

/// The counter shapes the bench audits: per member (with the backfill jobs, the naive loops
/// and the injected-drift check) and per message (seed 003).
#[derive(Clone, Copy)]
pub struct Shapes {
    pub member: bool,
    pub message: bool,
}

/// Which tables one run prints.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Suite {
    /// Issue 30's goals (the default): see `goals.rs`.
    Goals,
    /// Issue 11's tables (times, references, naive loops): the options below.
    Classic,
}

/// The driver's options (`--help`).
pub struct MainArgs {
    pub suite: Suite,
    pub members: u64,
    pub analyze: bool,
    pub seed: u64,
    pub backends: Vec<Backend>,
    pub workloads: Vec<&'static str>,
    pub scale: f64,
    pub reference: bool,
    pub naive: bool,
    pub growth: bool,
    pub repeat: usize,
    pub shapes: Shapes,
    pub reference_limit: f64,
}

/// A driver run, or one phase in a child process.
pub enum Mode {
    Driver(MainArgs),
    Phase(PhaseArgs),
}

/// Reads the command line; `TIDEMARK_BENCH_BACKENDS` is the default of `--backends`.
pub fn parse_args() -> Result<Mode> {
    let mut suite = Suite::Goals;
    let mut app_rate = 960.0f64;
    let mut app_secs = 0.0f64;
    let mut stop_file: Option<PathBuf> = None;
    let mut members = DEFAULT_MEMBERS;
    let mut seed = DEFAULT_SEED;
    let mut backends = match std::env::var("TIDEMARK_BENCH_BACKENDS") {
        Ok(list) if !list.trim().is_empty() => parse_backends(&list)?,
        _ => Backend::ALL.to_vec(),
    };
    let mut analyze = true;
    let mut phase: Option<String> = None;
    let mut url: Option<String> = None;
    let mut cap: Option<i64> = None;
    let mut report: Option<PathBuf> = None;
    let mut workloads = vec!["standard", "large"];
    let mut scale = 1.0f64;
    let mut reference = true;
    let mut naive = true;
    let mut growth = false;
    let mut repeat = 1usize;
    let mut reference_limit = REFERENCE_LIMIT_SECS;
    let mut job = String::new();
    let mut shape = "member".to_string();
    let mut shapes = Shapes {
        member: true,
        message: true,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let (key, inline) = match arg.split_once('=') {
            Some((k, v)) if k.starts_with("--") => (k.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |what: &str| -> Result<String> {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| anyhow!("{what} needs a value"))
        };
        match key.as_str() {
            // cargo bench passes --bench to harness = false targets.
            "--bench" => {}
            "--members" => {
                members = value("--members")?
                    .replace('_', "")
                    .parse()
                    .context("--members")?
            }
            "--seed" => seed = value("--seed")?.parse().context("--seed")?,
            "--backends" => backends = parse_backends(&value("--backends")?)?,
            "--suite" => {
                suite = match value("--suite")?.as_str() {
                    "goals" => Suite::Goals,
                    "classic" => Suite::Classic,
                    other => bail!("--suite: unknown suite {other:?} (goals, classic)"),
                }
            }
            "--app-rate" => app_rate = value("--app-rate")?.parse().context("--app-rate")?,
            "--app-secs" => app_secs = value("--app-secs")?.parse().context("--app-secs")?,
            "--stop-file" => stop_file = Some(PathBuf::from(value("--stop-file")?)),
            "--no-analyze" => analyze = false,
            "--no-reference" => reference = false,
            "--no-loop" => naive = false,
            "--growth" => growth = true,
            "--repeat" => {
                repeat = value("--repeat")?.parse().context("--repeat")?;
                if repeat == 0 {
                    bail!("--repeat must be at least 1");
                }
            }
            "--reference-limit" => {
                reference_limit = value("--reference-limit")?
                    .parse()
                    .context("--reference-limit")?;
                if reference_limit.is_nan() || reference_limit <= 0.0 {
                    bail!("--reference-limit must be a number of seconds above 0");
                }
            }
            "--job" => job = value("--job")?,
            "--shape" => shape = value("--shape")?,
            "--shapes" => {
                let list = value("--shapes")?;
                shapes = Shapes {
                    member: false,
                    message: false,
                };
                for s in list.split(',') {
                    match s.trim() {
                        "member" => shapes.member = true,
                        "message" => shapes.message = true,
                        other => bail!("--shapes: unknown shape {other:?} (member, message)"),
                    }
                }
            }
            "--large-scale" => scale = value("--large-scale")?.parse().context("--large-scale")?,
            "--workloads" => {
                workloads = value("--workloads")?
                    .split(',')
                    .filter(|s| !s.trim().is_empty())
                    .map(|w| match w.trim() {
                        "standard" => Ok("standard"),
                        "large" => Ok("large"),
                        other => Err(anyhow!("unknown workload {other:?}: standard or large")),
                    })
                    .collect::<Result<_>>()?
            }
            "--phase" => phase = Some(value("--phase")?),
            "--url" => url = Some(value("--url")?),
            "--cap" => cap = Some(value("--cap")?.parse().context("--cap")?),
            "--report" => report = Some(PathBuf::from(value("--report")?)),
            "-h" | "--help" => {
                println!(
                    "cargo bench --bench pipeline [-- --backends sqlite,postgres,mysql]  (issue 30's goal tables; env TIDEMARK_BENCH_SCALE, TIDEMARK_BENCH_REPEAT, TIDEMARK_BENCH_APP_RATE, TIDEMARK_BENCH_BACKENDS)\ncargo bench --bench pipeline -- --suite classic [--members N] [--backends sqlite,postgres,mysql] [--seed S] [--no-analyze] [--workloads standard,large] [--large-scale F] [--no-reference] [--no-loop] [--growth] [--repeat K] [--shapes member,message] [--reference-limit SECS]"
                );
                std::process::exit(0);
            }
            // Filters cargo may pass through (e.g. a bench name): ignored.
            other if !other.starts_with('-') => {}
            other => bail!("unknown argument {other:?}"),
        }
    }
    Ok(match phase {
        Some(phase) => Mode::Phase(PhaseArgs {
            phase,
            job,
            url: url.ok_or_else(|| anyhow!("--phase needs --url"))?,
            members,
            seed,
            cap,
            report,
            scale,
            shape,
            app_rate,
            app_secs,
            stop_file,
        }),
        None => Mode::Driver(MainArgs {
            suite,
            members,
            analyze,
            seed,
            backends,
            workloads,
            scale,
            reference,
            naive,
            growth,
            repeat,
            shapes,
            reference_limit,
        }),
    })
}

/// A comma-separated list of backends.
fn parse_backends(list: &str) -> Result<Vec<Backend>> {
    list.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(Backend::parse)
        .collect()
}
