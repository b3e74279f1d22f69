//! Several databases as shards (issue 31): `--database` given several times or
//! `--databases FILE` ([`crate::db::shard_list`]). `expand`, `backfill`, `audit`, `status` and
//! `contract` run on every shard at once, one tokio task and one connection set each, each
//! shard with its own checkpoint, runner lock and ledger (its database's, as on a single
//! database). Progress goes to one display ([`ShardsDisplay`]); the output is each shard's, in
//! the order given, under a heading naming it, then one summary that names each shard with its
//! exit code and adds their figures up ([`Ran::totals`]); the exit code is the worst shard's
//! ([`Outcome::worst`]). `--format json` prints one object: `shards` (each with `name`,
//! `database`, `exit_code`, `error` when it failed, and `output`, its own JSON), `totals` and
//! `exit_code`.
//!
//! The audit writes each shard's report beside `--report` (`drift.NAME.csv` for `drift.csv`)
//! and then `--report` itself with a leading `shard` column ([`super::shard_report`]). The
//! contract opens its gate only when every shard's gate is open; with `--execute` it first
//! asks every shard (as without it), and drops nothing anywhere unless all are open; then each
//! shard drops its own, so one that fails leaves the others' drops recorded and itself
//! resumable (run the contract again: the others have nothing left to drop).

use anyhow::Result;
use std::future::Future;
use std::io::Write;
use std::sync::Arc;

use super::args::{AuditArgs, BackfillArgs, ExpandArgs, StatusArgs};
use super::contract::{contract_on, ContractArgs};
use super::outcome::Outcome;
use super::progress::ShardsDisplay;
use super::shard_report::{self, ShardEnd};
use super::stage_runs::{self, Ran, RunWith};
use super::values::Format;
use crate::db::shard_list::Shard;
use crate::mapping::Mapping;

/// Runs `run` on every shard at once, each in a tokio task of its own with its own
/// single-threaded runtime (so one connection set per shard; the stages' futures are not
/// `Send`, rustc cannot prove it through sqlx's executors, so each runs where it starts), and
/// returns their endings in the shards' order. A task that panics is a failure of its shard
/// (exit 3), not of the others.
pub async fn on_every_shard<F, Fut>(shards: &[Shard], run: F) -> Vec<ShardEnd>
where
    F: Fn(Shard) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = (Vec<u8>, Result<Ran>)>,
{
    let tasks: Vec<_> = shards
        .iter()
        .map(|s| {
            let (shard, run) = (s.clone(), run.clone());
            let task = tokio::task::spawn_blocking(move || {
                match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime.block_on(run(shard)),
                    Err(e) => (
                        Vec::new(),
                        Err(anyhow::anyhow!("cannot start its runtime: {e}")),
                    ),
                }
            });
            (s.clone(), task)
        })
        .collect();
    let mut ends = Vec::with_capacity(tasks.len());
    for (shard, task) in tasks {
        let (output, result) = match task.await {
            Ok(done) => done,
            Err(e) => (
                Vec::new(),
                Err(anyhow::anyhow!("the shard's task ended: {e}")),
            ),
        };
        ends.push(ShardEnd {
            shard,
            output,
            result,
        });
    }
    ends
}

/// What each shard's stage gets: its progress in the shared display (none when `quiet`) and
/// the one stop flag of the command.
fn run_with(
    display: &ShardsDisplay,
    stop: &Arc<std::sync::atomic::AtomicBool>,
    name: &str,
    quiet: bool,
) -> RunWith {
    RunWith {
        progress: if quiet {
            crate::progress::Reporter::none()
        } else {
            display.reporter(name)
        },
        stop: stop.clone(),
    }
}

/// `tidemark expand` on every shard.
pub async fn expand(shards: Vec<Shard>, mapping: Mapping, args: ExpandArgs) -> Result<Outcome> {
    let ends = on_every_shard(&shards, move |shard| {
        let (mapping, args) = (mapping.clone(), args.clone());
        async move {
            let mut out = Vec::new();
            let result = stage_runs::expand(&shard.dsn, &mapping, &args, &mut out).await;
            (out, result)
        }
    })
    .await;
    finish(&ends, Format::Text, "expand", &[])
}

/// `tidemark backfill` on every shard (each resumes its own unfinished run).
pub async fn backfill(shards: Vec<Shard>, mapping: Mapping, args: BackfillArgs) -> Result<Outcome> {
    let display = ShardsDisplay::new();
    let stop = stage_runs::stop_on_signal();
    let format = args.format;
    let ends = on_every_shard(&shards, move |shard| {
        let (mapping, args) = (mapping.clone(), args.clone());
        let with = run_with(&display, &stop, &shard.name, args.quiet);
        async move {
            let mut out = Vec::new();
            let result = stage_runs::backfill(&shard.dsn, &mapping, &args, &with, &mut out).await;
            (out, result)
        }
    })
    .await;
    finish(&ends, format, "backfill", &[])
}

/// `tidemark audit` on every shard, each writing its own report beside `--report` (and its own
/// `--html` page and `--metrics-file`), then the combined report with the `shard` column.
pub async fn audit(shards: Vec<Shard>, mapping: Mapping, args: AuditArgs) -> Result<Outcome> {
    let display = ShardsDisplay::new();
    let stop = stage_runs::stop_on_signal();
    let quiet = args.quiet || args.format == Format::Json;
    let shard_args = args.clone();
    let ends = on_every_shard(&shards, move |shard| {
        let mapping = mapping.clone();
        let mut args = shard_args.clone();
        args.report = shard_report::per_shard(&args.report, &shard.name);
        args.html = args.html.map(|p| shard_report::per_shard(&p, &shard.name));
        args.metrics_file = args
            .metrics_file
            .map(|p| shard_report::per_shard(&p, &shard.name));
        let with = run_with(&display, &stop, &shard.name, quiet);
        async move {
            let mut out = Vec::new();
            let result = stage_runs::audit(&shard.dsn, &mapping, &args, &with, &mut out).await;
            (out, result)
        }
    })
    .await;
    let notes = shard_report::combine(&ends, &args.report, args.report_mode)?;
    finish(&ends, args.format, "audit", &notes)
}

/// `tidemark status` on every shard.
pub async fn status(shards: Vec<Shard>, mapping: Mapping, args: StatusArgs) -> Result<Outcome> {
    let format = args.read.format;
    let ends = on_every_shard(&shards, move |shard| {
        let mapping = mapping.clone();
        let mut args = args.clone();
        args.html = args.html.map(|p| shard_report::per_shard(&p, &shard.name));
        async move {
            let mut out = Vec::new();
            let result = stage_runs::status(&shard.dsn, &mapping, &args, &mut out).await;
            (out, result)
        }
    })
    .await;
    finish(&ends, format, "status", &[])
}

/// `tidemark contract` on every shard: the gate across the shards opens only when every
/// shard's does. Without `--execute`, each shard's verdict. With it, every shard's verdict
/// first (nothing changes), and only when all are open (or `--force`) each shard's drop.
pub async fn contract(shards: Vec<Shard>, mapping: Mapping, args: ContractArgs) -> Result<Outcome> {
    let opts = args.options();
    crate::stages::contract::check_options(&opts)?;
    let run = |execute: bool| {
        let (mapping, opts) = (mapping.clone(), opts.clone());
        let format = args.format;
        on_every_shard(&shards, move |shard| {
            let mapping = mapping.clone();
            let mut opts = opts.clone();
            opts.execute = execute;
            // Each shard's final audit report of its own (the default one too: two shards
            // writing the same file would race), named before the archive's is.
            let report = crate::stages::contract::audit_report_path(&opts);
            opts.audit_report = Some(shard_report::per_shard(&report, &shard.name));
            opts.archive_csv = opts
                .archive_csv
                .map(|p| shard_report::per_shard(&p, &shard.name));
            async move {
                let mut out = Vec::new();
                let result = contract_on(&shard.dsn, &mapping, &opts, format, &mut out)
                    .await
                    .map(|outcome| Ran {
                        outcome,
                        totals: vec![(
                            if execute { "shards done" } else { "gates open" }.to_string(),
                            u64::from(outcome == Outcome::Done),
                        )],
                    });
                (out, result)
            }
        })
    };
    let verdicts = run(false).await;
    let closed: Vec<&str> = verdicts
        .iter()
        .filter(|e| e.outcome() != Outcome::Done)
        .map(|e| e.shard.name.as_str())
        .collect();
    if !args.execute || (!closed.is_empty() && !args.force) {
        let note = match (closed.is_empty(), args.execute) {
            (true, _) => {
                "the gate across the shards is open: every shard's gate is open".to_string()
            }
            (false, execute) => format!(
                "the gate across the shards is closed: not open on {}{}",
                closed.join(", "),
                if execute {
                    "; nothing was dropped on any shard"
                } else {
                    ""
                }
            ),
        };
        return finish(&verdicts, args.format, "contract", &[note]);
    }
    let drops = run(true).await;
    let failed: Vec<&str> = drops
        .iter()
        .filter(|e| e.result.is_err())
        .map(|e| e.shard.name.as_str())
        .collect();
    let note = if failed.is_empty() {
        "every shard's gate was open: each shard's contract ran".to_string()
    } else {
        format!(
            "the contract failed on {}: the other shards' drops are done and recorded; run the same contract again to resume (shards with nothing left to drop say so)",
            failed.join(", ")
        )
    };
    finish(&drops, args.format, "contract", &[note])
}

/// Prints every shard's output under a heading naming it (errors on stderr), then the summary
/// (each shard's exit code, the totals, `notes`), or with `--format json` one object; returns
/// the worst ending.
fn finish(ends: &[ShardEnd], format: Format, stage: &str, notes: &[String]) -> Result<Outcome> {
    let worst = Outcome::worst(ends.iter().map(ShardEnd::outcome));
    for end in ends {
        if let Err(e) = &end.result {
            eprintln!(
                "tidemark: shard {}: error: {}",
                end.shard.name,
                crate::error::describe(e)
            );
        }
    }
    let totals = add_up(ends);
    let mut stdout = std::io::stdout().lock();
    let written = match format {
        Format::Json => shard_report::json(&mut stdout, ends, &totals, notes, worst),
        Format::Text => text(&mut stdout, ends, stage, &totals, notes, worst),
    };
    match written {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(worst),
        Err(e) => Err(e.into()),
        Ok(()) => Ok(worst),
    }
}

/// The shards' figures added up by name, in the order first seen.
fn add_up(ends: &[ShardEnd]) -> Vec<(String, u64)> {
    let mut totals: Vec<(String, u64)> = Vec::new();
    for ran in ends.iter().filter_map(|e| e.result.as_ref().ok()) {
        for (name, n) in &ran.totals {
            match totals.iter_mut().find(|(k, _)| k == name) {
                Some((_, sum)) => *sum = sum.saturating_add(*n),
                None => totals.push((name.clone(), *n)),
            }
        }
    }
    totals
}

/// The text output of a sharded run (see [`finish`]).
fn text(
    out: &mut dyn Write,
    ends: &[ShardEnd],
    stage: &str,
    totals: &[(String, u64)],
    notes: &[String],
    worst: Outcome,
) -> std::io::Result<()> {
    for end in ends {
        writeln!(out, "== shard {} ({}) ==", end.shard.name, end.shard.dsn)?;
        out.write_all(&end.output)?;
        if let Err(e) = &end.result {
            writeln!(out, "error: {}", crate::error::describe(e))?;
        }
        writeln!(out)?;
    }
    writeln!(out, "{stage} on {} shards:", ends.len())?;
    let width = ends.iter().map(|e| e.shard.name.len()).max().unwrap_or(0);
    for end in ends {
        let how = match &end.result {
            Ok(_) => "",
            Err(_) => " (failed: see its error above)",
        };
        writeln!(
            out,
            "  {:width$}  exit {}{how}",
            end.shard.name,
            end.outcome().code()
        )?;
    }
    if !totals.is_empty() {
        let sums: Vec<String> = totals.iter().map(|(k, n)| format!("{k} {n}")).collect();
        writeln!(out, "  total: {}", sums.join(", "))?;
    }
    for note in notes {
        writeln!(out, "  {note}")?;
    }
    writeln!(
        out,
        "  exit {} (the worst shard's: 3 over 2 over 1 over 4 over 0)",
        worst.code()
    )
}
