//! `tidemark inspect`: its arguments, where the proposed mapping goes, and the exit code. The
//! work ([`crate::inspect`]) returns a typed outcome and never prints.

use anyhow::{Context, Result};
use std::io::Write;
use std::path::PathBuf;

use super::outcome::Outcome;
use super::values::{database_dsn, Format};
use crate::db::Dsn;
use crate::error::input_error;
use crate::inspect::{self, InspectOutcome};

/// `tidemark inspect` options.
#[derive(Debug, Clone, clap::Args)]
pub struct InspectArgs {
    /// Database URL: postgres://, mysql:// / mariadb://, or sqlite:PATH.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, value_name = "URL")]
    pub database: Option<String>,
    /// Read the database URL from the first line of this file instead (keeps the password
    /// out of `ps` and the environment); not together with --database / DATABASE_URL.
    #[arg(long, value_name = "PATH")]
    pub database_file: Option<PathBuf>,
    /// Write the proposed mapping to this file instead of standard output (never over an
    /// existing file without --force).
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Overwrite the --output file if it exists.
    #[arg(long, requires = "output")]
    pub force: bool,
    /// Output format: with json, one object on stdout holding the warnings, what is missing
    /// and (without --output) the proposed mapping.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Write the full reasoning into the proposal's header: every candidate table and column
    /// seen, why it won or lost, and the figures measured on the data.
    #[arg(long)]
    pub explain: bool,
}

/// Runs `inspect`: exit 0 with a complete mapping, 1 when something is missing (named on
/// standard error), 2 when --output exists without --force or the URL is bad, 3 when the
/// database fails.
pub async fn run_cli(args: InspectArgs) -> Result<Outcome> {
    let dsn = database_dsn(args.database.as_deref(), args.database_file.as_deref())?;
    if let Some(path) = &args.output {
        if path.exists() && !args.force {
            return Err(refuse(path));
        }
    }
    let mut conn = dsn.connect().await?;
    let outcome = inspect::run(&mut conn, dsn.dialect, args.explain).await?;
    match &args.output {
        Some(path) => {
            let mut open = std::fs::OpenOptions::new();
            open.write(true);
            if args.force {
                open.create(true).truncate(true);
            } else {
                open.create_new(true);
            }
            let mut file = match open.open(path) {
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    return Err(refuse(path))
                }
                other => other.with_context(|| format!("cannot write {}", path.display()))?,
            };
            file.write_all(outcome.text.as_bytes())
                .with_context(|| format!("cannot write {}", path.display()))?;
            if args.format == Format::Json {
                crate::render::json::inspect(&mut std::io::stdout().lock(), &outcome, Some(path))?;
            } else {
                print_summary(&outcome, &dsn, Some(path));
            }
        }
        None if args.format == Format::Json => {
            crate::render::json::inspect(&mut std::io::stdout().lock(), &outcome, None)?;
        }
        None => {
            print!("{}", outcome.text);
            print_summary(&outcome, &dsn, None);
        }
    }
    Ok(if outcome.complete() {
        Outcome::Done
    } else {
        Outcome::MappingIncomplete
    })
}

fn refuse(path: &std::path::Path) -> anyhow::Error {
    input_error(format!(
        "{} exists: inspect does not overwrite it without --force",
        path.display()
    ))
}

/// The summary: on standard output after writing a file, on standard error when the mapping
/// itself went to standard output (so that it can be redirected as it is).
fn print_summary(outcome: &InspectOutcome, dsn: &Dsn, path: Option<&std::path::Path>) {
    let mut lines = Vec::new();
    if let Some(path) = path {
        lines.push(format!(
            "inspect: {} tables and views of {dsn} read; proposed mapping written to {}",
            outcome.tables,
            path.display()
        ));
    }
    if let Some(system) = outcome.known {
        lines.push(format!(
            "inspect: recognised as {system}: its mapping from contrib/mappings/ proposed as it is"
        ));
    }
    for w in &outcome.warnings {
        lines.push(format!("warning: {}", w.message));
        if let Some(fix) = &w.fix {
            lines.push(format!("  fix: {fix}"));
        }
    }
    if !outcome.complete() {
        lines.push("inspect: no complete mapping; missing:".to_string());
        for m in &outcome.missing {
            lines.push(format!("  - {m}"));
        }
    }
    for line in lines {
        if path.is_some() {
            println!("{line}");
        } else {
            eprintln!("{line}");
        }
    }
}
