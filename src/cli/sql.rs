//! `tidemark sql app`: prints the statements the application should use (see
//! [`crate::app_sql`]). Reads the mapping and the URL's dialect; connects to nothing.

use anyhow::Result;
use std::io::Write;

use super::values::{database_dsn, whole_number, Common, Format};
use crate::mapping::Mapping;

/// `tidemark sql` options.
#[derive(Debug, Clone, clap::Args)]
pub struct SqlArgs {
    /// Which statements.
    #[command(subcommand)]
    pub what: SqlWhat,
}

/// What `tidemark sql` prints.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum SqlWhat {
    /// The statements the application should switch to for the dual-write period and after:
    /// forward-only mark-read, the sender's own watermark, capped unread counts, per-message
    /// unread counts of a page, the per-conversation sequence. Each says which bug it prevents.
    App(AppArgs),
}

/// `tidemark sql app` options.
#[derive(Debug, Clone, clap::Args)]
pub struct AppArgs {
    /// `--database` (only its dialect is used: nothing connects) and `--mapping`.
    #[command(flatten)]
    pub common: Common,
    /// Conversations (or messages) per page in the page queries.
    #[arg(long, default_value_t = 3, value_parser = whole_number::<u64>(1, Some(1000)))]
    pub page: u64,
    /// Output format: json prints one object with a `statements` list.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// Runs `tidemark sql app`.
pub fn run(args: &SqlArgs, out: &mut dyn Write) -> Result<()> {
    let SqlWhat::App(args) = &args.what;
    if args.common.database.len() > 1 || args.common.databases.is_some() {
        return Err(crate::error::input_error(
            "sql app prints the statements for one database: give --database once",
        ));
    }
    let dsn = database_dsn(
        args.common.database.first().map(String::as_str),
        args.common.database_file.as_deref(),
    )?;
    let mapping = Mapping::load(&args.common.mapping)?;
    let statements = crate::app_sql::statements(&mapping, dsn.dialect, args.page as usize)?;
    match args.format {
        Format::Text => crate::render::text::app_sql(out, &dsn, &mapping, &statements)?,
        Format::Json => crate::render::json::app_sql(out, &dsn, &statements)?,
    }
    Ok(())
}
