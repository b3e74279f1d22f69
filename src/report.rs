//! The CSV drift report (`shared/spec/interface.md`, "The CSV drift report"): a header row, one
//! row per drifting row, stable column order, RFC 4180 quoting, an empty cell for SQL NULL.
//!
//! The report is written to a temporary file in the destination's folder, fsync'd, then renamed
//! into place, so a crash never leaves a half report under the final name. Its SHA-256 is
//! computed while writing and goes into the ledger.
//!
//! Its mode (issue 25, row 12): a report that replaces a file keeps that file's permission bits,
//! and its owner and group where the process may set them (root; the group for a member of it),
//! as `sed -i` does; a new one is created 0600 (it names users), or with `--report-mode`. The
//! temporary file is 0600 until then. Text cells a spreadsheet would run as a formula are
//! written as they are, or escaped on request ([`text_cell`], row 13).

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::mapping::{hex, Shape};

/// Header of a per_member report.
pub const PER_MEMBER_HEADER: [&str; 8] = [
    "conversation_id",
    "user_id",
    "stored_unread",
    "recomputed_unread",
    "drift",
    "class",
    "last_read_id",
    "watermark_source",
];

/// Header of a read_flags report (semantics.md "Shape C"): the per_member columns, then
/// `read_after_watermark` (flag rows saying read on countable messages of others after the
/// watermark: unread now) and `unread_at_or_before_watermark` (flag rows saying unread at or
/// before it: read now), the facts of the class `read_out_of_order`.
pub const READ_FLAGS_HEADER: [&str; 10] = [
    "conversation_id",
    "user_id",
    "stored_unread",
    "recomputed_unread",
    "drift",
    "class",
    "last_read_id",
    "watermark_source",
    "read_after_watermark",
    "unread_at_or_before_watermark",
];

/// Header of a per_message report.
pub const PER_MESSAGE_HEADER: [&str; 6] = [
    "conversation_id",
    "message_id",
    "stored_unread",
    "recomputed_unread",
    "drift",
    "class",
];

/// Where a report's bytes go: its temporary file, or memory (a batch of a parallel audit,
/// [`ReportWriter::in_memory`]).
enum Out {
    File(BufWriter<File>),
    Memory(Vec<u8>),
}

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Out::File(f) => f.write(buf),
            Out::Memory(m) => m.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Out::File(f) => f.flush(),
            Out::Memory(_) => Ok(()),
        }
    }
}

/// Writes bytes through to a file while hashing them.
struct HashingWriter {
    inner: Out,
    hash: Sha256,
}

impl Write for HashingWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A report being written; nothing appears under the final name until [`ReportWriter::finish`].
/// Dropped unfinished (an error anywhere in the run that writes it), it removes its temporary
/// file: nothing half-written is left beside the destination.
pub struct ReportWriter {
    /// The writer; None once [`ReportWriter::finish`] took it.
    csv: Option<csv::Writer<HashingWriter>>,
    tmp: PathBuf,
    dest: PathBuf,
    /// The finished file's permission bits (None: the replaced file's, or 0600).
    mode: Option<u32>,
}

impl Drop for ReportWriter {
    fn drop(&mut self) {
        if let Some(csv) = self.csv.take() {
            drop(csv);
            if !self.tmp.as_os_str().is_empty() {
                let _ = std::fs::remove_file(&self.tmp);
            }
        }
    }
}

impl ReportWriter {
    /// Creates `<dest>.<pid>.tmp` beside `dest` and writes the header for `shape`; `mode`:
    /// the finished report's permission bits (None: the replaced file's, or 0600).
    ///
    /// Errors (exit 3): the folder does not exist or is not writable.
    pub fn create(dest: &Path, shape: Shape, mode: Option<u32>) -> Result<ReportWriter> {
        match shape {
            Shape::PerMember => ReportWriter::with_header(dest, &PER_MEMBER_HEADER, mode),
            Shape::PerMessage => ReportWriter::with_header(dest, &PER_MESSAGE_HEADER, mode),
            Shape::ReadFlags => ReportWriter::with_header(dest, &READ_FLAGS_HEADER, mode),
        }
    }

    /// Creates `<dest>.<pid>.tmp` beside `dest` (mode 0600) and writes `header`: any CSV that
    /// must appear whole or not at all (the drift report, the contract's archive). `mode`: the
    /// finished file's permission bits (None: those of the file it replaces, or 0600).
    ///
    /// Errors: exit 2 when `dest` exists and is not a regular file; exit 3 when the folder
    /// does not exist or is not writable.
    pub fn with_header(dest: &Path, header: &[&str], mode: Option<u32>) -> Result<ReportWriter> {
        check_destination(dest)?;
        let name = dest
            .file_name()
            .with_context(|| format!("report path {} names no file", dest.display()))?;
        let tmp = dest.with_file_name(format!(
            "{}.{}.tmp",
            name.to_string_lossy(),
            std::process::id()
        ));
        let file = create_private(&tmp)
            .with_context(|| format!("creating the report {}", tmp.display()))?;
        let mut csv = csv::WriterBuilder::new().from_writer(HashingWriter {
            inner: Out::File(BufWriter::new(file)),
            hash: Sha256::new(),
        });
        csv.write_record(header)?;
        Ok(ReportWriter {
            csv: Some(csv),
            tmp,
            dest: dest.to_path_buf(),
            mode,
        })
    }

    /// A report held in memory, without a header: the rows of one batch of a parallel audit
    /// (`--jobs`, [`crate::stages::parallel`]), which [`ReportWriter::append_rows`] copies into
    /// the run's report once every earlier batch is written. Formatted by the same CSV writer,
    /// so the report is byte for byte that of `--jobs 1`.
    pub fn in_memory() -> ReportWriter {
        ReportWriter {
            csv: Some(csv::WriterBuilder::new().from_writer(HashingWriter {
                inner: Out::Memory(Vec::new()),
                hash: Sha256::new(),
            })),
            tmp: PathBuf::new(),
            dest: PathBuf::new(),
            mode: None,
        }
    }

    /// The rows an [`ReportWriter::in_memory`] report holds, as CSV bytes (empty for a report
    /// on file).
    ///
    /// Errors: the rows cannot be flushed (never for memory).
    pub fn into_rows(mut self) -> Result<Vec<u8>> {
        let csv = self.csv.take().context("the report was already finished")?;
        let writer = csv
            .into_inner()
            .map_err(|e| anyhow::anyhow!("writing the report: {}", e.error()))?;
        Ok(match writer.inner {
            Out::Memory(bytes) => bytes,
            Out::File(_) => Vec::new(),
        })
    }

    /// Appends rows formatted by an [`ReportWriter::in_memory`] report ([`Self::into_rows`]).
    ///
    /// Errors (exit 3): the report cannot be written.
    pub fn append_rows(&mut self, rows: &[u8]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let csv = self.csv.take().context("the report was already finished")?;
        // The CSV writer holds no state between records: a new one over the same file (and
        // hash) goes on exactly where this one stopped.
        let mut writer = csv
            .into_inner()
            .map_err(|e| anyhow::anyhow!("writing the report: {}", e.error()))?;
        let written = writer.write_all(rows).context("writing the report");
        self.csv = Some(csv::WriterBuilder::new().from_writer(writer));
        written
    }

    /// Appends one row (cells already formatted; "" for NULL).
    pub fn row(&mut self, cells: &[String]) -> Result<()> {
        self.writer()?
            .write_record(cells)
            .context("writing the report")?;
        Ok(())
    }

    /// Copies the data rows (not the header) of an earlier part's report, written by
    /// [`ReportWriter::finish_as`], so a resumed run's report covers all its parts.
    ///
    /// Errors (exit 2): the part report is missing (it was moved or deleted).
    pub fn append_rows_from(&mut self, part: &Path) -> Result<()> {
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(true)
            .from_path(part)
            .map_err(|e| {
                crate::error::input_error(format!(
                    "the report of the earlier part, {}, cannot be read ({e}): run the audit again without --resume",
                    part.display()
                ))
            })?;
        for record in reader.records() {
            let record = record.context("reading the earlier part's report")?;
            self.writer()?
                .write_record(&record)
                .context("writing the report")?;
        }
        Ok(())
    }

    /// Like [`ReportWriter::finish`], but into `path` (an incomplete run's part report).
    pub fn finish_as(mut self, path: &Path) -> Result<String> {
        self.dest = path.to_path_buf();
        self.finish()
    }

    /// The CSV writer (an error once the report was finished).
    fn writer(&mut self) -> Result<&mut csv::Writer<HashingWriter>> {
        self.csv.as_mut().context("the report was already finished")
    }

    /// Flushes, fsyncs and renames the report into place; returns its SHA-256 (hex).
    ///
    /// Errors (exit 3): disk full, rename across file systems refused. The temporary file is
    /// removed then (nothing half-written is left beside the destination either).
    pub fn finish(mut self) -> Result<String> {
        let result = self.write_out();
        if result.is_err() {
            let _ = std::fs::remove_file(&self.tmp);
        }
        result
    }

    /// [`ReportWriter::finish`] without the clean-up of the temporary file on failure (the
    /// writer is taken, so `Drop` no longer removes it).
    fn write_out(&mut self) -> Result<String> {
        let writer = self
            .csv
            .take()
            .context("the report was already finished")?
            .into_inner()
            .map_err(|e| anyhow::anyhow!("writing the report: {}", e.error()))?;
        let HashingWriter { inner, hash } = writer;
        let Out::File(inner) = inner else {
            anyhow::bail!("a report in memory has no file");
        };
        let file = inner
            .into_inner()
            .map_err(|e| anyhow::anyhow!("writing the report: {}", e.error()))?;
        take_place_of(&file, &self.dest, self.mode, Some(0o600))
            .with_context(|| format!("setting the mode of the report {}", self.tmp.display()))?;
        file.sync_all().context("fsync of the report")?;
        drop(file);
        std::fs::rename(&self.tmp, &self.dest)
            .with_context(|| format!("moving the report into place at {}", self.dest.display()))?;
        if let Some(dir) = self.dest.parent().filter(|d| !d.as_os_str().is_empty()) {
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(hex(&hash.finalize()))
    }

    /// Removes the temporary file (after a failure; dropping the writer does the same).
    pub fn abandon(self) {
        drop(self);
    }
}

/// A report or metrics file replaces its destination by a rename: refuse anything but a
/// regular file (or nothing) there, so `--report /dev/null` or a symlink is never replaced.
///
/// Errors: exit 2 when the path is a directory, a device, a FIFO, a socket or a symlink;
/// exit 3 (an I/O failure, as when the file cannot be created) when its folder does not
/// exist, named in the message, so this is caught before any work is done.
pub fn check_destination(dest: &Path) -> Result<()> {
    if let Some(folder) = dest.parent().filter(|p| !p.as_os_str().is_empty()) {
        if !folder.is_dir() {
            anyhow::bail!(
                "cannot write {}: the folder {} does not exist (create it first)",
                dest.display(),
                folder.display()
            );
        }
    }
    match std::fs::symlink_metadata(dest) {
        Ok(meta) if !meta.file_type().is_file() => Err(crate::error::input_error(format!(
            "{} exists and is not a regular file (a directory, link, device or pipe): give a file path for the output",
            dest.display()
        ))),
        _ => Ok(()),
    }
}

/// Creates `path` readable and writable by its owner only: a temporary file whose final mode
/// [`take_place_of`] sets. Created new (`O_CREAT|O_EXCL`, and `O_NOFOLLOW`: issue 29, row 7),
/// so nothing another user put there (a file, a symbolic link) is ever written through; a
/// leftover of a killed run under the same name (the name holds the process id) is removed
/// first, which the folder's sticky bit refuses for another user's file (an error, exit 3).
pub fn create_private(path: &Path) -> std::io::Result<File> {
    let open = || {
        let mut open = std::fs::OpenOptions::new();
        open.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            open.mode(0o600).custom_flags(libc::O_NOFOLLOW);
        }
        open.open(path)
    };
    match open() {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::remove_file(path)?;
            open()
        }
        other => other,
    }
}

/// Refuses a destination that exists and belongs to another user (issue 29, row 7): a file
/// someone else created where tidemark is about to write (a report) would keep that user's
/// ownership, so that they could read or change what tidemark wrote.
///
/// Errors: exit 2 naming the file and its owner's uid.
pub fn check_own(dest: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if let Ok(meta) = std::fs::symlink_metadata(dest) {
            let me = rustix::process::geteuid().as_raw();
            if meta.uid() != me {
                return Err(crate::error::input_error(format!(
                    "{} exists and belongs to another user (uid {}, tidemark runs as uid {me}): tidemark does not write through it; remove it or name another file",
                    dest.display(),
                    meta.uid()
                )));
            }
        }
    }
    #[cfg(not(unix))]
    let _ = dest;
    Ok(())
}

/// Readies `file`, about to be renamed onto `dest`, to take its place: the owner and group of
/// the file at `dest` where the process may set them (root may set both, a member of the
/// group the group; otherwise they stay the process's), then the permission bits `mode`, or
/// else the replaced file's, or else `fresh` (None: as the file was created).
///
/// Errors: the mode cannot be set (an I/O failure, exit 3). A refused owner or group is not an
/// error: the file keeps the process's.
pub fn take_place_of(
    file: &File,
    dest: &Path,
    mode: Option<u32>,
    fresh: Option<u32>,
) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let old = std::fs::metadata(dest).ok().filter(|m| m.is_file());
        if let Some(old) = &old {
            if std::os::unix::fs::fchown(file, Some(old.uid()), Some(old.gid())).is_err() {
                let _ = std::os::unix::fs::fchown(file, None, Some(old.gid()));
            }
        }
        // Set after the owner: a change of owner clears the set-id bits.
        if let Some(bits) = mode.or(old.map(|m| m.mode() & 0o777)).or(fresh) {
            file.set_permissions(std::fs::Permissions::from_mode(bits))?;
        }
    }
    #[cfg(not(unix))]
    let _ = (file, dest, mode, fresh);
    Ok(())
}

/// A text cell (a key a user typed: a conversation or user id) as written to a CSV file: as it
/// is by default, so scripts read the exact key back; with `spreadsheet_safe`, a cell that a
/// spreadsheet would run as a formula (it begins with `=`, `+`, `-`, `@`, a tab or a carriage
/// return: OWASP, "CSV Injection") gets a leading `'`, which spreadsheets show as text.
/// Numbers are never passed here (a negative drift stays a number).
pub fn text_cell(text: &str, spreadsheet_safe: bool) -> String {
    if spreadsheet_safe && text.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{text}")
    } else {
        text.to_string()
    }
}

/// A NULL-able integer (of any width: a drift is 128 bits) as a CSV cell: its decimal
/// digits, empty for NULL.
pub fn cell<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}
