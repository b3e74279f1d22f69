//! `tidemark demo`: the whole staged migration on a generated legacy chat database that looks
//! like production (see [`generate`]), written like a DBA's runbook (to any `Write`: the
//! command line passes stdout), with the injected
//! faults as ground truth: the demo ends by setting the audit's classes beside the truth and
//! fails when they differ, so it is also a self-test.
//!
//! Stages: generate → expand → backfill → a dual-write period (the application's own writes:
//! new messages, reads advancing watermarks forward-only, counters kept the legacy way with its
//! faults) → audit → status → contract dry run (the gate is closed: there is drift) → on the
//! demo's own copy, the counters repaired from the report, a clean audit and `contract
//! --execute` (archive, verify, drop).

use anyhow::{bail, Context, Result};
use sqlx::Executor;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::db::Dsn;
use crate::legacy_schema as scenario;
use crate::mapping::Mapping;
use crate::progress::Reporter;
use crate::render::text;
use crate::stages::{audit, backfill, contract, expand, status};

mod application;
mod database;
pub mod generate;

pub use generate::{generate, GenerateOptions, GroundTruth};

use application::dual_write;
use database::{own_copy, repair_from_report, reset_server_database};

/// Options of the demo.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// SQLite file to create (when no database URL is given).
    pub path: PathBuf,
    /// A PostgreSQL or MariaDB database to run on instead (it must be empty, or a demo's).
    pub database: Option<String>,
    /// Members to generate (rows of the members table).
    pub scale: u64,
    /// Generator seed: the same seed gives the same database.
    pub seed: u64,
    /// No progress bars.
    pub quiet: bool,
    /// Where the stages' progress goes (the command line: stderr).
    pub progress: Reporter,
}

/// Runs the demo, writing its runbook to `out`. Returns `Ok` when the audit found exactly the
/// injected drift.
///
/// Errors: exit 2 when `--database` names a database that holds tables the demo did not create;
/// exit 3 on database failure, or when the audit and the ground truth differ.
pub async fn run(opts: &DemoOptions, out: &mut dyn Write) -> Result<()> {
    let started = Instant::now();
    let (dsn, dir, stem) = match &opts.database {
        Some(url) => {
            // The files are named for the database, so demos on two databases run from one
            // folder do not replace each other's.
            let dsn = Dsn::parse(url)?;
            let stem = match dsn.database_name() {
                Some(name) if !name.is_empty() => format!(
                    "tidemark-demo-{}",
                    name.replace(
                        |c: char| !c.is_ascii_alphanumeric() && c != '_' && c != '-',
                        "_"
                    )
                ),
                _ => "tidemark-demo".to_string(),
            };
            (dsn, PathBuf::from("."), stem)
        }
        None => {
            let dir = opts
                .path
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
                .to_path_buf();
            let stem = opts
                .path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("tidemark-demo")
                .to_string();
            for suffix in ["", "-wal", "-shm", "-journal"] {
                let p = PathBuf::from(format!("{}{suffix}", opts.path.display()));
                if p.exists() {
                    std::fs::remove_file(&p).with_context(|| {
                        format!("removing the old demo database {}", p.display())
                    })?;
                }
            }
            (Dsn::sqlite_file(&opts.path, true), dir, stem)
        }
    };
    let mapping_path = dir.join(format!("{stem}.toml"));
    let report_path = dir.join(format!("{stem}-report.csv"));
    let copy_report = dir.join(format!("{stem}-copy-report.csv"));
    let archive = dir.join(format!("{stem}-archive.csv"));
    let final_audit = dir.join(format!("{stem}-final-audit.csv"));
    let mut conn = dsn.connect().await?;
    if !dsn.dialect.admin().demo_database_is_file() {
        reset_server_database(&mut conn, dsn.dialect).await?;
    }

    step(out, "0. the legacy database")?;
    let truth = generate(
        &mut conn,
        dsn.dialect,
        &GenerateOptions {
            members: opts.scale,
            seed: opts.seed,
        },
    )
    .await?;
    conn.execute("CREATE TABLE tidemark_demo (created_ms BIGINT NOT NULL)")
        .await?;
    conn.execute(
        format!(
            "INSERT INTO tidemark_demo (created_ms) VALUES ({})",
            crate::stages::now_ms()
        )
        .as_str(),
    )
    .await?;
    writeln!(out,
        "{dsn}: a chat schema that keeps unread_counters.unread_count up to date by events, with read receipts.\n\
         Generated (seed {}): {} conversations (mostly direct messages, small groups, a few large ones),\n\
         {} members, {} messages (some deleted or system), {} read receipts, {} counters.",
        opts.seed, truth.conversations, truth.members, truth.messages, truth.receipt_rows, truth.counter_rows
    )?;
    writeln!(
        out,
        "Faults injected into the counters, as the seed articles describe them (the ground truth):"
    )?;
    for (class, n) in truth.injected.iter().filter(|(_, n)| **n > 0) {
        writeln!(out, "  {class:<22} {n:>6}")?;
    }
    let mapping_text = scenario::mapping_toml(scenario::SHAPE_PER_MEMBER, false);
    std::fs::write(&mapping_path, &mapping_text)
        .with_context(|| format!("writing {}", mapping_path.display()))?;
    let mapping = Mapping::parse(&mapping_text, &mapping_path.display().to_string())?;
    writeln!(
        out,
        "The mapping file that says which tables and columns mean what: {}",
        mapping_path.display()
    )?;
    let mut files = vec![
        &mapping_path,
        &report_path,
        &copy_report,
        &archive,
        &final_audit,
    ];
    let copy_db = dir.join(format!("{stem}-copy.db"));
    if dsn.dialect.admin().demo_database_is_file() {
        files.insert(0, &opts.path);
        files.push(&copy_db);
    }
    writeln!(
        out,
        "This run writes, replacing them if a run {} left them: {}",
        if dsn.dialect.admin().demo_database_is_file() {
            "with the same --path"
        } else {
            "on a database of the same name"
        },
        files
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )?;

    step(
        out,
        "1. expand: versioned migrations create the watermark table and tidemark's ledger",
    )?;
    let report = expand::run(&mut conn, &mapping, dsn.dialect, false).await?;
    text::expand(out, &report, &dsn)?;

    step(
        out,
        "2. backfill: each last_read_id from the best evidence (receipts first, then the counter)",
    )?;
    let options = backfill::BackfillOptions {
        quiet: opts.quiet,
        progress: opts.progress.clone(),
        ..Default::default()
    };
    let summary = backfill::run(&mut conn, &mapping, dsn.dialect, &options).await?;
    text::backfill(out, &summary, false)?;

    step(
        out,
        "3. dual-write period: the application writes counters and watermarks both",
    )?;
    let mut expected = truth.injected.clone();
    let dual = dual_write(&mut conn, dsn.dialect).await?;
    for (class, n) in &dual.faults {
        *expected.entry(class.clone()).or_default() += n;
    }
    writeln!(out,
        "The application sent {} messages in {} new conversations, advanced {} watermarks forward-only,\n\
         and kept the legacy counters with their faults: {}.",
        dual.messages,
        dual.conversations,
        dual.reads,
        dual.faults.iter().map(|(c, n)| format!("{n} {c}")).collect::<Vec<_>>().join(", ")
    )?;

    step(
        out,
        "4. audit: recompute unread from the watermarks, compare, classify, write the report",
    )?;
    let audit_opts = audit::AuditOptions {
        report: report_path.clone(),
        quiet: opts.quiet,
        progress: opts.progress.clone(),
        ..Default::default()
    };
    let outcome = audit::run(&mut conn, &mapping, dsn.dialect, &audit_opts).await?;
    text::audit(out, &outcome.summary)?;

    step(out, "5. status")?;
    let st = status::run(&mut conn, &mapping, dsn.dialect).await?;
    text::status(out, &st, &dsn, &mapping)?;

    step(
        out,
        "6. contract, dry run: the gate stays closed while the counters drift",
    )?;
    let dry = contract::ContractOptions {
        quiet: true,
        ..Default::default()
    };
    let o = contract::run(&mut conn, &mapping, dsn.dialect, &dry).await?;
    text::contract(out, &o, &dsn, &dry)?;

    // The verdict on the demo itself, before anything else touches the database.
    let found: BTreeMap<String, u64> = outcome.summary.by_class.clone();

    step(out, "7. on the demo's own copy: repair the counters from the report, audit again, contract --execute")?;
    let (mut copy, copy_dsn) = own_copy(out, &mut conn, &dsn, &dir, &stem).await?;
    let repaired = repair_from_report(&mut copy, &report_path).await?;
    writeln!(out, "repaired {repaired} counters to their recomputed value (what a DBA does once the drift is understood)")?;
    let clean = audit::run(
        &mut copy,
        &mapping,
        copy_dsn.dialect,
        &audit::AuditOptions {
            report: copy_report.clone(),
            quiet: opts.quiet,
            progress: opts.progress.clone(),
            ..Default::default()
        },
    )
    .await?;
    text::audit(out, &clean.summary)?;
    let execute = contract::ContractOptions {
        execute: true,
        archive_csv: Some(archive.clone()),
        audit_report: Some(final_audit.clone()),
        quiet: true,
        ..Default::default()
    };
    let done = contract::run(&mut copy, &mapping, copy_dsn.dialect, &execute).await?;
    text::contract(out, &done, &copy_dsn, &execute)?;

    step(out, "what the audit found, beside the injected truth")?;
    writeln!(out, "  {:<22} {:>9} {:>9}", "class", "injected", "found")?;
    let mut differ = false;
    for class in crate::drift::DriftClass::ALL {
        let e = expected.get(class.as_str()).copied().unwrap_or(0);
        let f = found.get(class.as_str()).copied().unwrap_or(0);
        let mark = if e == f { "" } else { "  <- differs" };
        differ |= e != f;
        writeln!(out, "  {:<22} {e:>9} {f:>9}{mark}", class.as_str())?;
    }
    if differ {
        bail!("the audit's classes differ from the injected truth (see above)");
    }
    if !clean.summary.passed || !done.executed {
        bail!("the repaired copy did not pass its audit or the contract did not run");
    }
    writeln!(
        out,
        "\nEvery injected fault was found with its class, and nothing else drifts ({:.1} s).\n\
         Read the report: {}",
        started.elapsed().as_secs_f64(),
        report_path.display(),
    )?;
    if dsn.dialect.admin().demo_database_is_file() {
        // The contract ran on the copy: the demo's own database keeps its counter.
        writeln!(
            out,
            "Try: tidemark audit --database {} --mapping {}",
            dsn,
            mapping_path.display()
        )?;
        writeln!(out, "(The audit exits 1 on drift; the demo exits 0 because it found exactly the drift it injected.)")?;
    } else {
        // On a server the contract ran on the demo's database itself: its counter is gone, so an
        // audit there has nothing to compare (exit 2); status shows what the stages did.
        writeln!(
            out,
            "Try: tidemark status --database {} --mapping {}",
            dsn,
            mapping_path.display()
        )?;
        writeln!(
            out,
            "(The contract dropped this database's counter, archived in {}: `tidemark audit` has nothing\n\
             left to compare here. Run the demo again to start over; the SQLite demo keeps its original's counter.)",
            archive.display()
        )?;
    }
    Ok(())
}

/// The title of a step of the runbook.
fn step(out: &mut dyn Write, title: &str) -> std::io::Result<()> {
    writeln!(out, "\n== {title} ==")
}
