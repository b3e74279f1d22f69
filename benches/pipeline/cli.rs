//! Runs of the `tidemark` binary itself (the `--jobs 1/2/4` rows): wall time and the peak RSS
//! of the process, read with GNU time's `%M` (the child's `getrusage` maximum resident set,
//! KiB) when `/usr/bin/time` is there.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};

/// The `tidemark` binary cargo built beside this bench.
pub fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tidemark"))
}

/// Whether `tidemark COMMAND --help` lists `--jobs` (another change adds it to backfill and
/// audit; without it the rows print "n/a (no --jobs)").
pub fn has_jobs(command: &str) -> bool {
    Command::new(exe())
        .args([command, "--help"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("--jobs"))
        .unwrap_or(false)
}

/// One run of the binary.
#[derive(Debug, Clone, Copy)]
pub struct CliRun {
    /// Wall time, seconds.
    pub secs: f64,
    /// Peak RSS, KiB (None without `/usr/bin/time`).
    pub peak_kib: Option<u64>,
}

/// Runs `tidemark ARGS`; an exit code outside `ok_codes` is an error naming the code and the
/// last lines of stderr.
pub fn run(args: &[String], ok_codes: &[i32], scratch: &Path) -> Result<CliRun> {
    let time = Path::new("/usr/bin/time");
    let rss_file = scratch.join("tidemark-maxrss.txt");
    let _ = std::fs::remove_file(&rss_file);
    let mut cmd = if time.exists() {
        let mut c = Command::new(time);
        c.arg("-f").arg("%M").arg("-o").arg(&rss_file).arg(exe());
        c
    } else {
        Command::new(exe())
    };
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::null());
    let started = Instant::now();
    let out = cmd.output().context("running tidemark")?;
    let secs = started.elapsed().as_secs_f64();
    let code = out.status.code().unwrap_or(-1);
    if !ok_codes.contains(&code) {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(3).collect();
        bail!("tidemark {} exited {code}: {}", args[0], tail.join(" / "));
    }
    let peak_kib = std::fs::read_to_string(&rss_file)
        .ok()
        .and_then(|t| t.lines().rev().find_map(|l| l.trim().parse::<u64>().ok()));
    Ok(CliRun { secs, peak_kib })
}
