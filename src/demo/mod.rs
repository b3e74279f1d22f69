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
use sqlx::{AnyConnection, Executor};
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
    let demo = Demo::new(opts)?;
    let mut conn = demo.dsn.connect().await?;
    if !demo.dsn.dialect.admin().demo_database_is_file() {
        reset_server_database(&mut conn, demo.dsn.dialect).await?;
    }
    let (truth, mapping) = demo.legacy_database(out, &mut conn).await?;
    demo.expand(out, &mut conn, &mapping).await?;
    demo.backfill(out, &mut conn, &mapping).await?;
    let expected = demo
        .dual_write_period(out, &mut conn, &mapping, &truth)
        .await?;
    let found = demo.audit(out, &mut conn, &mapping).await?;
    demo.status(out, &mut conn, &mapping).await?;
    demo.contract_dry_run(out, &mut conn, &mapping).await?;
    let copy_passed = demo.on_own_copy(out, &mut conn, &mapping).await?;
    verdict(out, &expected, &found)?;
    if !copy_passed {
        bail!("the repaired copy did not pass its audit or the contract did not run");
    }
    demo.what_next(out, started)
}

/// The files a run writes, in one folder and named alike (`<stem>.toml`, `<stem>-report.csv`, …),
/// so that demos on two databases run from one folder do not replace each other's.
struct Files {
    /// The folder: the SQLite file's own, or the current folder for a server database.
    dir: PathBuf,
    /// What their names start with: the SQLite file's stem, or `tidemark-demo-<database>`.
    stem: String,
    /// The mapping file (`<stem>.toml`).
    mapping: PathBuf,
    /// The audit's report on the demo's database (`<stem>-report.csv`).
    report: PathBuf,
    /// The audit's report on the repaired copy (`<stem>-copy-report.csv`).
    copy_report: PathBuf,
    /// The contract's archive of the dropped counter (`<stem>-archive.csv`).
    archive: PathBuf,
    /// The contract's final audit (`<stem>-final-audit.csv`).
    final_audit: PathBuf,
}

impl Files {
    /// The files named `stem…` in `dir`.
    fn new(dir: PathBuf, stem: String) -> Files {
        let name = |suffix: &str| dir.join(format!("{stem}{suffix}"));
        Files {
            mapping: name(".toml"),
            report: name("-report.csv"),
            copy_report: name("-copy-report.csv"),
            archive: name("-archive.csv"),
            final_audit: name("-final-audit.csv"),
            dir,
            stem,
        }
    }
}

/// One run of the demo: its options, its database and its files.
struct Demo<'a> {
    opts: &'a DemoOptions,
    dsn: Dsn,
    files: Files,
}

impl<'a> Demo<'a> {
    /// The database the demo runs on and the files it writes. With no `--database`, the SQLite
    /// file of `--path` (the old one removed, with its `-wal`, `-shm` and `-journal` files) and
    /// files beside it; with one, files in the current folder named for the database.
    ///
    /// Errors: exit 2 for a database URL that does not parse; exit 3 when an old file cannot
    /// be removed.
    fn new(opts: &'a DemoOptions) -> Result<Demo<'a>> {
        let (dsn, dir, stem) = match &opts.database {
            Some(url) => {
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
        Ok(Demo {
            opts,
            dsn,
            files: Files::new(dir, stem),
        })
    }

    /// Step 0: generates the legacy database (and the `tidemark_demo` table that marks it as
    /// the demo's), says what it holds and which faults were injected, writes the mapping file
    /// and lists the files the run writes. Returns the ground truth and the mapping.
    async fn legacy_database(
        &self,
        out: &mut dyn Write,
        conn: &mut AnyConnection,
    ) -> Result<(GroundTruth, Mapping)> {
        step(out, "0. the legacy database")?;
        let truth = generate(
            conn,
            self.dsn.dialect,
            &GenerateOptions {
                members: self.opts.scale,
                seed: self.opts.seed,
            },
        )
        .await?;
        conn.execute("CREATE TABLE tidemark_demo (created_ms BIGINT NOT NULL)")
            .await?;
        conn.execute(
            format!(
                "INSERT INTO tidemark_demo (created_ms) VALUES ({})",
                crate::values::now_ms()
            )
            .as_str(),
        )
        .await?;
        writeln!(out,
            "{}: a chat schema that keeps unread_counters.unread_count up to date by events, with read receipts.\n\
             Generated (seed {}): {} conversations (mostly direct messages, small groups, a few large ones),\n\
             {} members, {} messages (some deleted or system), {} read receipts, {} counters.",
            self.dsn, self.opts.seed, truth.conversations, truth.members, truth.messages, truth.receipt_rows, truth.counter_rows
        )?;
        writeln!(
            out,
            "Faults injected into the counters (duplicate delivery, a clear racing a new message, a lost update,\n\
             members who left still counted, own and deleted messages counted), by the drift class each leaves\n\
             (the ground truth):"
        )?;
        for (class, n) in truth.injected.iter().filter(|(_, n)| **n > 0) {
            writeln!(out, "  {class:<22} {n:>6}")?;
        }
        let mapping = self.write_mapping(out)?;
        self.list_files(out)?;
        Ok((truth, mapping))
    }

    /// Writes the scenario's mapping file (per-member counters) and says where it is.
    ///
    /// Errors: exit 3 when the file cannot be written.
    fn write_mapping(&self, out: &mut dyn Write) -> Result<Mapping> {
        let path = &self.files.mapping;
        let mapping_text = scenario::mapping_toml(crate::mapping::Shape::PerMember, false);
        std::fs::write(path, &mapping_text)
            .with_context(|| format!("writing {}", path.display()))?;
        let mapping = Mapping::parse(&mapping_text, &path.display().to_string())?;
        writeln!(
            out,
            "The mapping file that says which tables and columns mean what: {}",
            path.display()
        )?;
        Ok(mapping)
    }

    /// Lists the files the run writes (on SQLite, the database and its copy too).
    fn list_files(&self, out: &mut dyn Write) -> Result<()> {
        let files = &self.files;
        let mut paths = vec![
            &files.mapping,
            &files.report,
            &files.copy_report,
            &files.archive,
            &files.final_audit,
        ];
        let copy_db = files.dir.join(format!("{}-copy.db", files.stem));
        if self.dsn.dialect.admin().demo_database_is_file() {
            paths.insert(0, &self.opts.path);
            paths.push(&copy_db);
        }
        writeln!(
            out,
            "This run writes, replacing them if a run {} left them: {}",
            if self.dsn.dialect.admin().demo_database_is_file() {
                "with the same --path"
            } else {
                "on a database of the same name"
            },
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )?;
        Ok(())
    }

    /// Step 1: `expand`, the watermark table and tidemark's ledger.
    async fn expand(
        &self,
        out: &mut dyn Write,
        conn: &mut AnyConnection,
        mapping: &Mapping,
    ) -> Result<()> {
        step(
            out,
            "1. expand: versioned migrations create the watermark table and tidemark's ledger",
        )?;
        let report = expand::run(conn, mapping, self.dsn.dialect, false).await?;
        text::expand(out, &report, &self.dsn)?;
        Ok(())
    }

    /// Step 2: `backfill`, each watermark from the best evidence.
    async fn backfill(
        &self,
        out: &mut dyn Write,
        conn: &mut AnyConnection,
        mapping: &Mapping,
    ) -> Result<()> {
        step(
            out,
            "2. backfill: each last_read_id from the best evidence (receipts first, then the counter)",
        )?;
        let options = backfill::BackfillOptions {
            quiet: self.opts.quiet,
            progress: self.opts.progress.clone(),
            ..Default::default()
        };
        let summary = backfill::run(conn, mapping, self.dsn.dialect, &options).await?;
        text::backfill(out, &summary, false)?;
        Ok(())
    }

    /// Step 3: the dual-write period, the application's own writes with the legacy counters'
    /// faults. Returns the drift an audit must find now: the injected truth plus these faults,
    /// per class name.
    async fn dual_write_period(
        &self,
        out: &mut dyn Write,
        conn: &mut AnyConnection,
        mapping: &Mapping,
        truth: &GroundTruth,
    ) -> Result<BTreeMap<String, u64>> {
        step(
            out,
            "3. dual-write period: the application writes counters and watermarks both",
        )?;
        let mut expected = truth.injected.clone();
        let dual = dual_write(conn, mapping, self.dsn.dialect).await?;
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
        Ok(expected)
    }

    /// Step 4: `audit`, the report written to [`Files::report`]. Returns the drifting rows it
    /// found per class name (the demo's verdict, taken before anything else touches the
    /// database).
    async fn audit(
        &self,
        out: &mut dyn Write,
        conn: &mut AnyConnection,
        mapping: &Mapping,
    ) -> Result<BTreeMap<String, u64>> {
        step(
            out,
            "4. audit: recompute unread from the watermarks, compare, classify, write the report",
        )?;
        let audit_opts = audit::AuditOptions {
            report: self.files.report.clone(),
            quiet: self.opts.quiet,
            progress: self.opts.progress.clone(),
            ..Default::default()
        };
        let outcome = audit::run(conn, mapping, self.dsn.dialect, &audit_opts).await?;
        text::audit(out, &outcome.summary)?;
        Ok(outcome.summary.by_class)
    }

    /// Step 5: `status`.
    async fn status(
        &self,
        out: &mut dyn Write,
        conn: &mut AnyConnection,
        mapping: &Mapping,
    ) -> Result<()> {
        step(out, "5. status")?;
        let st = status::run(conn, mapping, self.dsn.dialect).await?;
        text::status(out, &st, &self.dsn, mapping)?;
        Ok(())
    }

    /// Step 6: `contract` without `--execute`: the gate stays closed (there is drift).
    async fn contract_dry_run(
        &self,
        out: &mut dyn Write,
        conn: &mut AnyConnection,
        mapping: &Mapping,
    ) -> Result<()> {
        step(
            out,
            "6. contract, dry run: the gate stays closed while the counters drift",
        )?;
        let dry = contract::ContractOptions {
            quiet: true,
            ..Default::default()
        };
        let o = contract::run(conn, mapping, self.dsn.dialect, &dry).await?;
        text::contract(out, &o, &self.dsn, &dry)?;
        Ok(())
    }

    /// Step 7, on the demo's own copy: the counters repaired from the report, a clean audit
    /// (to [`Files::copy_report`]) and `contract --execute` (archive, verify, drop). Returns
    /// whether the audit passed and the contract ran.
    async fn on_own_copy(
        &self,
        out: &mut dyn Write,
        conn: &mut AnyConnection,
        mapping: &Mapping,
    ) -> Result<bool> {
        let files = &self.files;
        step(out, "7. on the demo's own copy: repair the counters from the report, audit again, contract --execute")?;
        let (mut copy, copy_dsn) = own_copy(out, conn, &self.dsn, &files.dir, &files.stem).await?;
        let repaired = repair_from_report(&mut copy, &files.report).await?;
        writeln!(out, "repaired {repaired} counters to their recomputed value (what a DBA does once the drift is understood)")?;
        let clean = audit::run(
            &mut copy,
            mapping,
            copy_dsn.dialect,
            &audit::AuditOptions {
                report: files.copy_report.clone(),
                quiet: self.opts.quiet,
                progress: self.opts.progress.clone(),
                ..Default::default()
            },
        )
        .await?;
        text::audit(out, &clean.summary)?;
        let execute = contract::ContractOptions {
            execute: true,
            archive_csv: Some(files.archive.clone()),
            audit_report: Some(files.final_audit.clone()),
            quiet: true,
            ..Default::default()
        };
        let done = contract::run(&mut copy, mapping, copy_dsn.dialect, &execute).await?;
        text::contract(out, &done, &copy_dsn, &execute)?;
        Ok(clean.summary.passed && done.executed)
    }

    /// The closing words: how long it took, where the report is, and the command to try next
    /// (on SQLite an audit of the demo's database, which keeps its counter; on a server, where
    /// the contract dropped it, `status`).
    fn what_next(&self, out: &mut dyn Write, started: Instant) -> Result<()> {
        let files = &self.files;
        writeln!(
            out,
            "\nEvery injected fault was found with its class, and nothing else drifts ({:.1} s).\n\
             Read the report: {}",
            started.elapsed().as_secs_f64(),
            files.report.display(),
        )?;
        if self.dsn.dialect.admin().demo_database_is_file() {
            // The contract ran on the copy: the demo's own database keeps its counter.
            writeln!(
                out,
                "Try: tidemark audit --database {} --mapping {}",
                self.dsn,
                files.mapping.display()
            )?;
            writeln!(out, "(The audit exits 1 on drift; the demo exits 0 because it found exactly the drift it injected.)")?;
        } else {
            // On a server the contract ran on the demo's database itself: its counter is gone, so an
            // audit there has nothing to compare (exit 2); status shows what the stages did.
            writeln!(
                out,
                "Try: tidemark status --database {} --mapping {}",
                self.dsn,
                files.mapping.display()
            )?;
            writeln!(
                out,
                "(The contract dropped this database's counter, archived in {}: `tidemark audit` has nothing\n\
                 left to compare here. Run the demo again to start over; the SQLite demo keeps its original's counter.)",
                files.archive.display()
            )?;
        }
        Ok(())
    }
}

/// What the audit found beside the injected truth, per class (every class of
/// [`DriftClass::ALL`](crate::drift::DriftClass::ALL), in its order).
///
/// Errors (exit 3): a class whose count differs.
fn verdict(
    out: &mut dyn Write,
    expected: &BTreeMap<String, u64>,
    found: &BTreeMap<String, u64>,
) -> Result<()> {
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
    Ok(())
}

/// The title of a step of the runbook.
fn step(out: &mut dyn Write, title: &str) -> std::io::Result<()> {
    writeln!(out, "\n== {title} ==")
}
