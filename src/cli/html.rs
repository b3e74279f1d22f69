//! `audit --html FILE` and `status --html FILE`: the page ([`crate::render::html`]) written
//! as the drift report is: into a temporary file beside `FILE`, then renamed into place (a
//! crash never leaves half a page); a new page is created 0600 (it names conversations and
//! users), a replaced one keeps the replaced file's mode, owner and group where permitted.

use anyhow::{Context, Result};
use std::io::Write;
use std::path::Path;

use crate::db::Dsn;
use crate::mapping::Mapping;
use crate::render::html::{page, Page};
use crate::stages::audit::AuditSummary;
use crate::stages::status::{self, Status};

/// The page of an audit just run: its summary, then the ledger's trend and the gate as
/// `status` reads them after it (the audit's own run included). When the ledger cannot be
/// read (`--no-ledger` as a user without the right), the page says why instead of failing
/// the audit.
///
/// Errors (exit 3): the page cannot be written.
pub async fn audit_page(
    path: &Path,
    conn: &mut sqlx::AnyConnection,
    mapping: &Mapping,
    dsn: &Dsn,
    audit: (Option<i64>, &AuditSummary),
    quiet: bool,
) -> Result<()> {
    let read = status::run(conn, mapping, dsn.dialect).await;
    let status = match &read {
        Ok(s) => Ok(s),
        Err(e) => Err(crate::error::describe(e)),
    };
    write(
        path,
        &Page {
            command: "audit",
            database: dsn.to_string(),
            mapping,
            audit: Some(audit),
            status,
            generated_ms: crate::values::now_ms(),
        },
        quiet,
    )
}

/// The page of `status`: the newest finished audit of the mapping in force (its summary as
/// the ledger recorded it), the trend and the gate.
///
/// Errors (exit 3): the page cannot be written.
pub fn status_page(
    path: &Path,
    s: &Status,
    mapping: &Mapping,
    dsn: &Dsn,
    quiet: bool,
) -> Result<()> {
    write(
        path,
        &Page {
            command: "status",
            database: dsn.to_string(),
            mapping,
            audit: s.latest.as_ref().map(|(id, summary)| (Some(*id), summary)),
            status: Ok(s),
            generated_ms: crate::values::now_ms(),
        },
        quiet,
    )
}

/// Renders `p` and moves it into place at `path` (see the module's comment); names the file
/// on stderr unless `quiet`.
fn write(path: &Path, p: &Page<'_>, quiet: bool) -> Result<()> {
    let mut text = Vec::new();
    page(&mut text, p).context("rendering the HTML page")?;
    crate::report::check_destination(path)?;
    let name = path
        .file_name()
        .with_context(|| format!("--html {} names no file", path.display()))?;
    let tmp = path.with_file_name(format!(
        "{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let written = (|| -> Result<()> {
        let mut file = crate::report::create_private(&tmp)?;
        file.write_all(&text)?;
        crate::report::take_place_of(&file, path, None, Some(0o600))?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        Ok(())
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("writing the HTML page {}", path.display()));
    }
    if !quiet {
        eprintln!("tidemark: the HTML page is in {}", path.display());
    }
    Ok(())
}
