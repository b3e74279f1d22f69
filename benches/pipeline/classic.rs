//! The classic suite (issue 11, `--suite classic`): the standard and large workloads with the
//! naive loops, both counter shapes and the check against the injected drift; one table per
//! backend ([`super::table::print_table`]).

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Result;
use serde_json::Value;

use tidemark::db::Dsn;

use super::args::MainArgs;
use super::large;
use super::table::{print_table, Figures};
use super::{median_phase, reference, rows_differ, spawn_phase, BenchDb, Run};

fn classes(v: &Value, key: &str) -> BTreeMap<String, u64> {
    v.get(key)
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, n)| (k.clone(), n.as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default()
}

/// Differences between two per-class maps, as `class: got G, want W`.
fn diff(got: &BTreeMap<String, u64>, want: &BTreeMap<String, u64>) -> Vec<String> {
    let mut keys: Vec<&String> = got.keys().chain(want.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter_map(|k| {
            let (g, w) = (
                got.get(k).copied().unwrap_or(0),
                want.get(k).copied().unwrap_or(0),
            );
            (g != w).then(|| format!("{k}: audit {g}, injected {w}"))
        })
        .collect()
}

async fn bench_backend(run: Run, f: &mut Figures) -> Result<()> {
    let db = BenchDb::create(run.backend).await?;
    eprintln!(
        "== {} ({}), workload {}, {} members, seed {}, large-scale {}",
        run.backend.name(),
        Dsn::parse(&db.url)?,
        run.workload,
        run.members,
        run.seed,
        run.scale
    );
    let result = run_phases(&db.url, run, f);
    let dropped = db.drop_db().await;
    result?;
    dropped
}

/// Runs the naive loop of `job` in a child and reports its (maybe extrapolated) time.
fn naive_loop(url: &str, job: &str) -> Result<Value> {
    let v = spawn_phase(
        "naive",
        &format!("loop {job}"),
        url,
        &["--job".into(), job.into()],
    )?;
    eprintln!(
        "  {:<12} {:>9.2} s   ({} of {} members{})",
        format!("loop {job}"),
        v["loop_secs"].as_f64().unwrap_or(0.0),
        v["sampled"],
        v["members"],
        if v["extrapolated"].as_bool().unwrap_or(false) {
            format!(
                " in {:.1} s, extrapolated",
                v["measured_secs"].as_f64().unwrap_or(0.0)
            )
        } else {
            String::new()
        }
    );
    Ok(v)
}

fn run_phases(url: &str, run: Run, f: &mut Figures) -> Result<()> {
    let gen = if run.workload == "large" {
        spawn_phase(
            "large",
            "generate",
            url,
            &["--large-scale".into(), run.scale.to_string()],
        )?
    } else {
        spawn_phase(
            "generate",
            "generate",
            url,
            &[
                "--members".into(),
                run.members.to_string(),
                "--seed".into(),
                run.seed.to_string(),
            ],
        )?
    };
    f.members = gen["members"].as_u64().unwrap_or(0);
    f.messages = gen["messages"].as_u64().unwrap_or(0);
    f.counter_rows = gen["counter_rows"].as_u64().unwrap_or(0);
    let injected = (run.workload != "large").then(|| classes(&gen, "injected"));
    f.generate = Some(gen);
    if run.analyze {
        spawn_phase("analyze", "analyze", url, &[])?;
    }
    spawn_phase("expand", "expand", url, &[])?;
    let mut problems = Vec::new();
    let dir = tempfile::tempdir()?;
    let audit_args = |shape: &str, cap: Option<i64>| {
        let mut a = vec![
            "--shape".to_string(),
            shape.to_string(),
            "--report".to_string(),
            dir.path()
                .join(match cap {
                    None => format!("drift-{shape}.csv"),
                    Some(c) => format!("drift-{shape}-cap{c}.csv"),
                })
                .display()
                .to_string(),
        ];
        if let Some(c) = cap {
            a.push("--cap".into());
            a.push(c.to_string());
        }
        a
    };
    if run.shapes.member {
        f.ref_backfill = reference(
            run,
            url,
            "ref backfill",
            &large::reference_backfill(run.backend),
            true,
            None,
        )?;
        f.backfill_position = Some(median_phase(
            run,
            url,
            "backfill_position",
            "backfill pos",
            &[],
            true,
        )?);
        if run.naive {
            spawn_phase("clear", "clear", url, &[])?;
            f.loop_backfill = Some(naive_loop(url, "backfill")?);
        }
        let filled = median_phase(run, url, "backfill", "backfill", &[], true)?;
        if injected.is_some() {
            for key in ["no_evidence", "unrepresentable_counters"] {
                let n = filled[key].as_u64().unwrap_or(0);
                if n != 0 {
                    problems.push(format!("backfill {key} = {n} (want 0)"));
                }
            }
        }
        f.backfill = Some(filled);
    } else {
        // The watermarks the per-message audit reads, written once.
        spawn_phase("clear", "clear", url, &[])?;
        spawn_phase("backfill", "backfill", url, &[])?;
    }
    if run.analyze {
        spawn_phase("analyze", "analyze", url, &[])?;
    }
    if run.shapes.member {
        f.ref_audit = reference(
            run,
            url,
            "ref audit",
            &large::reference_audit(),
            false,
            Some(run.reference_limit),
        )?;
        if run.naive {
            f.loop_audit = Some(naive_loop(url, "audit")?);
        }
        let full = median_phase(
            run,
            url,
            "audit",
            "audit",
            &audit_args("member", None),
            false,
        )?;
        let got = classes(&full, "by_class");
        if let Some(injected) = &injected {
            problems.extend(diff(&got, injected));
        }
        problems.extend(rows_differ(&f.ref_audit, &full, "per member"));
        let checked = full["rows_checked"].as_u64().unwrap_or(0);
        if checked != f.counter_rows {
            problems.push(format!(
                "rows checked {checked}, counter rows {}",
                f.counter_rows
            ));
        }
        f.audit = Some(full);
        let capped = median_phase(
            run,
            url,
            "audit",
            "audit cap99",
            &audit_args("member", Some(99)),
            false,
        )?;
        // Under a cap, counts above it compare as "99+", so rows whose stored and recomputed
        // values both exceed the cap no longer drift: fewer rows than injected is expected there.
        if let Some(injected) = &injected {
            let cap_diff = diff(&classes(&capped, "by_class"), injected);
            f.cap_note = if cap_diff.is_empty() {
                "same classes as uncapped".to_string()
            } else {
                cap_diff.join("; ")
            };
            eprintln!("  cap99 vs injected: {}", f.cap_note);
        }
        f.audit_cap = Some(capped);
    }
    if run.shapes.message {
        spawn_phase("message_counters", "msg counters", url, &[])?;
        f.ref_audit_message = reference(
            run,
            url,
            "ref audit msg",
            &large::reference_audit_per_message(),
            false,
            Some(run.reference_limit),
        )?;
        let full = median_phase(
            run,
            url,
            "audit",
            "audit msg",
            &audit_args("message", None),
            false,
        )?;
        problems.extend(rows_differ(&f.ref_audit_message, &full, "per message"));
        f.audit_message = Some(full);
        f.audit_message_cap = Some(median_phase(
            run,
            url,
            "audit",
            "audit msg cap99",
            &audit_args("message", Some(99)),
            false,
        )?);
    }
    let drifting = |v: &Option<Value>| {
        v.as_ref()
            .and_then(|v| v["drifting_rows"].as_u64())
            .unwrap_or(0)
    };
    f.check = if !problems.is_empty() {
        format!("MISMATCH: {}", problems.join("; "))
    } else if let Some(injected) = injected.filter(|_| run.shapes.member) {
        format!(
            "ok ({} drifting rows = injected)",
            injected.values().sum::<u64>()
        )
    } else if run.shapes.member {
        // Nothing injected to compare with: the drift found, equal to the reference's rows.
        format!("{} drifting rows", drifting(&f.audit))
    } else {
        String::new()
    };
    if f.ref_audit.is_some_and(|r| !r.stopped) && problems.is_empty() {
        f.check.push_str(" = reference");
    }
    if run.shapes.message {
        f.check_message = format!("{} drifting messages", drifting(&f.audit_message));
        if f.ref_audit_message.is_some_and(|r| !r.stopped) && problems.is_empty() {
            f.check_message.push_str(" = reference");
        }
    }
    eprintln!("  check: {} {}", f.check, f.check_message);
    Ok(())
}

/// Runs the classic suite (issue 11's tables) and prints its table.
pub fn run(args: MainArgs) -> ExitCode {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut rows = Vec::new();
    let mut failed = false;
    let factors: &[u64] = if args.growth { &[1, 4] } else { &[1] };
    for backend in args.backends.iter().copied() {
        for &workload in &args.workloads {
            for &factor in factors {
                let mut f = Figures {
                    backend: backend.name(),
                    workload,
                    factor,
                    ..Default::default()
                };
                let run = Run {
                    backend,
                    workload,
                    members: args.members * factor,
                    seed: args.seed,
                    analyze: args.analyze,
                    scale: args.scale * factor as f64,
                    reference: args.reference,
                    naive: args.naive,
                    repeat: args.repeat,
                    shapes: args.shapes,
                    reference_limit: args.reference_limit,
                };
                let started = Instant::now();
                if let Err(e) = runtime.block_on(bench_backend(run, &mut f)) {
                    eprintln!("  {}: error: {e:#}", backend.name());
                    f.error = Some(format!("{e:#}").lines().next().unwrap_or("").to_string());
                    failed = true;
                }
                if f.check.starts_with("MISMATCH") {
                    failed = true;
                }
                eprintln!(
                    "  {} {workload} done in {:.1} s",
                    backend.name(),
                    started.elapsed().as_secs_f64()
                );
                rows.push(f);
            }
        }
    }
    print_table(&rows);
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
