//! tidemark's ledger (`tidemark_ledger`, created by `expand`): one row per stage run with the
//! mapping fingerprint, options, summary (JSON), pass/fail and the report's SHA-256, so a
//! later gate can prove which audit it relied on (semantics.md, "The drift report").

use anyhow::{Context, Result};
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};

use crate::dialect::Dialect;

pub mod records;

pub use records::{BackfillState, RunStatus, Stage, Tolerance};

use crate::tables::{ARCHIVE_TABLE, DRIFT_ROWS_TABLE, LEDGER_TABLE};
use crate::values::{now_ms, text};

/// One ledger row as `status` shows it.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Run id.
    pub id: i64,
    /// The stage.
    pub stage: Stage,
    /// Where the run stands.
    pub status: RunStatus,
    /// Start, milliseconds since the epoch.
    pub started_ms: i64,
    /// End, milliseconds since the epoch.
    pub finished_ms: Option<i64>,
    /// Mapping fingerprint (SHA-256 hex).
    pub fingerprint: String,
    /// Summary JSON.
    pub summary: Option<String>,
    /// For audits: whether it passed (stored as 1 or 0); None while running or for a run
    /// without a verdict.
    pub passed: Option<bool>,
    /// Report path, for audits.
    pub report_path: Option<String>,
    /// Report SHA-256, for audits.
    pub report_sha256: Option<String>,
    /// The tidemark version that ran it.
    pub tool_version: String,
    /// The checkpoint after the last finished batch (JSON), for resumable runs.
    pub checkpoint: Option<String>,
    /// The run's options (JSON).
    pub options: Option<String>,
}

/// Records the start of a run and returns its id.
pub async fn start(
    conn: &mut AnyConnection,
    dialect: Dialect,
    stage: Stage,
    fingerprint: &str,
    options: &serde_json::Value,
) -> Result<i64> {
    let mut attempt = 0;
    loop {
        match start_once(conn, dialect, stage, fingerprint, options).await {
            Err(e) if retry_lock_wait(&e, &mut attempt).await => continue,
            other => return other,
        }
    }
}

/// Tries a ledger write again after a lock wait (up to [`LEDGER_TRIES`] tries, 100 ms
/// doubling): the ledger row is tidemark's own, and a run must not fail at its first or last
/// statement because the application's short write transactions held the database a moment
/// (SQLite's busy handler is not fair under a steady writer). Returns whether to try again.
async fn retry_lock_wait(error: &anyhow::Error, attempt: &mut u32) -> bool {
    *attempt += 1;
    if *attempt >= LEDGER_TRIES || !crate::dialect::Dialect::error_is_lock_wait(error) {
        return false;
    }
    tokio::time::sleep(std::time::Duration::from_millis(100 << *attempt)).await;
    true
}

/// How many times a ledger write is tried when it meets a lock wait.
const LEDGER_TRIES: u32 = 5;

async fn start_once(
    conn: &mut AnyConnection,
    dialect: Dialect,
    stage: Stage,
    fingerprint: &str,
    options: &serde_json::Value,
) -> Result<i64> {
    let p = |n| dialect.placeholder(n);
    let insert = format!(
        "INSERT INTO {LEDGER_TABLE} (stage, status, started_ms, mapping_fingerprint, tool_version, options) VALUES ({}, '{}', {}, {}, {}, {})",
        p(1), RunStatus::Running, p(2), p(3), p(4), p(5)
    );
    let sql = match dialect.returning_id() {
        Some(returning) => format!("{insert} {returning}"),
        None => insert,
    };
    let q = sqlx::query(&sql)
        .bind(stage.as_str().to_string())
        .bind(now_ms())
        .bind(fingerprint.to_string())
        .bind(env!("CARGO_PKG_VERSION").to_string())
        .bind(options.to_string());
    let id: i64 = match dialect.last_insert_id() {
        Some(last) => {
            q.execute(&mut *conn).await.context("writing the ledger")?;
            sqlx::query_scalar(last).fetch_one(&mut *conn).await?
        }
        None => q
            .fetch_one(&mut *conn)
            .await
            .context("writing the ledger")?
            .try_get("id")?,
    };
    Ok(id)
}

/// Records the end of a run: status, summary, pass/fail and the report.
#[allow(clippy::too_many_arguments)] // one value per column of the row it updates (id, status, summary, passed, report path and hash)
pub async fn finish(
    conn: &mut AnyConnection,
    dialect: Dialect,
    id: i64,
    status: RunStatus,
    summary: &serde_json::Value,
    passed: Option<bool>,
    report_path: Option<&str>,
    report_sha256: Option<&str>,
) -> Result<()> {
    let mut attempt = 0;
    loop {
        let once = finish_once(
            conn,
            dialect,
            id,
            status,
            summary,
            passed,
            report_path,
            report_sha256,
        )
        .await;
        match once {
            Err(e) if retry_lock_wait(&e, &mut attempt).await => continue,
            other => return other,
        }
    }
}

#[allow(clippy::too_many_arguments)] // as `finish`
async fn finish_once(
    conn: &mut AnyConnection,
    dialect: Dialect,
    id: i64,
    status: RunStatus,
    summary: &serde_json::Value,
    passed: Option<bool>,
    report_path: Option<&str>,
    report_sha256: Option<&str>,
) -> Result<()> {
    let p = |n| dialect.placeholder(n);
    let sql = format!(
        "UPDATE {LEDGER_TABLE} SET status = {}, finished_ms = {}, summary = {}, passed = {}, report_path = {}, report_sha256 = {} WHERE id = {}",
        p(1), p(2), p(3), p(4), p(5), p(6), p(7)
    );
    sqlx::query(&sql)
        .bind(status.as_str().to_string())
        .bind(now_ms())
        .bind(summary.to_string())
        .bind(passed.map(i64::from))
        .bind(report_path.map(str::to_string))
        .bind(report_sha256.map(str::to_string))
        .bind(id)
        .execute(&mut *conn)
        .await
        .context("writing the ledger")?;
    Ok(())
}

/// The columns of a ledger row, as [`Entry::read`] decodes them (by name).
pub fn entry_columns(dialect: Dialect) -> String {
    format!(
        "id, stage, status, started_ms, finished_ms, mapping_fingerprint, summary, CAST(passed AS {int}) AS passed, report_path, report_sha256, tool_version, checkpoint, options",
        int = dialect.int_cast()
    )
}

impl Entry {
    /// Decodes a row selected with [`entry_columns`]. Errors on a stage or status this
    /// tidemark does not know.
    pub fn read(r: &AnyRow) -> Result<Entry> {
        let required = |c: &str| -> Result<String> {
            text(r, c)?.with_context(|| format!("the ledger row has no {c}"))
        };
        Ok(Entry {
            id: r.try_get("id")?,
            stage: Stage::parse(&required("stage")?)?,
            status: RunStatus::parse(&required("status")?)?,
            started_ms: r.try_get("started_ms")?,
            finished_ms: r.try_get("finished_ms")?,
            fingerprint: required("mapping_fingerprint")?,
            summary: text(r, "summary")?,
            passed: r.try_get::<Option<i64>, _>("passed")?.map(|p| p != 0),
            report_path: text(r, "report_path")?,
            report_sha256: text(r, "report_sha256")?,
            tool_version: required("tool_version")?,
            checkpoint: text(r, "checkpoint")?,
            options: text(r, "options")?,
        })
    }
}

/// The newest `limit` runs of `stage` ([`Stage`], or its stored text), newest first.
pub async fn recent(
    conn: &mut AnyConnection,
    stage: impl AsRef<str>,
    limit: i64,
    dialect: Dialect,
) -> Result<Vec<Entry>> {
    let sql = format!(
        "SELECT {} FROM {LEDGER_TABLE} WHERE stage = {} ORDER BY id DESC LIMIT {limit}",
        entry_columns(dialect),
        dialect.placeholder(1),
    );
    let rows = sqlx::query(&sql)
        .bind(stage.as_ref().to_string())
        .fetch_all(&mut *conn)
        .await?;
    rows.iter().map(Entry::read).collect()
}

/// The newest run of `stage` under the mapping with this fingerprint, if any (the audit asks
/// it of the backfill: issue 25, row 10).
///
/// Errors (exit 3): the ledger cannot be read, or holds a row this tidemark cannot decode.
pub async fn newest_of_mapping(
    conn: &mut AnyConnection,
    dialect: Dialect,
    stage: Stage,
    fingerprint: &str,
) -> Result<Option<Entry>> {
    let sql = format!(
        "SELECT {} FROM {LEDGER_TABLE} WHERE stage = {} AND mapping_fingerprint = {} ORDER BY id DESC LIMIT 1",
        entry_columns(dialect),
        dialect.placeholder(1),
        dialect.placeholder(2),
    );
    let row = sqlx::query(&sql)
        .bind(stage.as_str().to_string())
        .bind(fingerprint.to_string())
        .fetch_optional(&mut *conn)
        .await
        .context("reading the ledger")?;
    row.as_ref().map(Entry::read).transpose()
}

/// Stores a run's checkpoint (call it inside the transaction that writes the batch, so the
/// checkpoint and the batch commit together).
pub async fn set_checkpoint(
    conn: &mut AnyConnection,
    dialect: Dialect,
    id: i64,
    checkpoint: &serde_json::Value,
) -> Result<()> {
    let sql = format!(
        "UPDATE {LEDGER_TABLE} SET checkpoint = {} WHERE id = {}",
        dialect.placeholder(1),
        dialect.placeholder(2)
    );
    sqlx::query(&sql)
        .bind(checkpoint.to_string())
        .bind(id)
        .execute(&mut *conn)
        .await
        .context("writing the checkpoint")?;
    Ok(())
}

/// Stores a run's checkpoint on its own (autocommit), tried again after a lock wait like the
/// run's start and end: the contract's record before a DDL
/// ([`records::ContractCheckpointRecord`]).
///
/// Errors (exit 3): the ledger cannot be written.
pub async fn save_checkpoint(
    conn: &mut AnyConnection,
    dialect: Dialect,
    id: i64,
    checkpoint: &serde_json::Value,
) -> Result<()> {
    let mut attempt = 0;
    loop {
        match set_checkpoint(conn, dialect, id, checkpoint).await {
            Err(e) if retry_lock_wait(&e, &mut attempt).await => continue,
            other => return other,
        }
    }
}

/// Ledger run `id`, if the ledger has it.
///
/// Errors (exit 3): the ledger cannot be read, or the row not decoded ([`Entry::read`]).
pub async fn entry(conn: &mut AnyConnection, dialect: Dialect, id: i64) -> Result<Option<Entry>> {
    let sql = format!(
        "SELECT {} FROM {LEDGER_TABLE} WHERE id = {}",
        entry_columns(dialect),
        dialect.placeholder(1),
    );
    let row = sqlx::query(&sql)
        .bind(id)
        .fetch_optional(&mut *conn)
        .await
        .context("reading the ledger")?;
    row.as_ref().map(Entry::read).transpose()
}

/// Sets a run's status (`running` again when a run is resumed, `abandoned` on `--restart`).
pub async fn set_status(
    conn: &mut AnyConnection,
    dialect: Dialect,
    id: i64,
    status: RunStatus,
) -> Result<()> {
    let sql = format!(
        "UPDATE {LEDGER_TABLE} SET status = {} WHERE id = {}",
        dialect.placeholder(1),
        dialect.placeholder(2)
    );
    sqlx::query(&sql)
        .bind(status.as_str().to_string())
        .bind(id)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Marks `abandoned` every run of `stage` under this mapping (`fingerprint`) other than
/// `current` that the ledger still records as `running`, and returns their ids (oldest first).
///
/// Call it only while holding the runner lock of `stage` for this mapping
/// ([`crate::lock::RunnerLock`]), after the run `current` is chosen: the lock proves that no
/// other runner of this stage and mapping is alive, so such a row is a run whose process was
/// killed or whose server session was terminated before it could record its end. A backfill
/// chooses its run first (a killed run with a checkpoint is resumed as `current`, so its
/// checkpoint is never given up here); runs under another mapping hold another lock and are
/// left alone.
///
/// Errors (exit 3): the ledger cannot be read or written.
pub async fn abandon_stale(
    conn: &mut AnyConnection,
    dialect: Dialect,
    stage: Stage,
    fingerprint: &str,
    current: i64,
) -> Result<Vec<i64>> {
    let p = |n| dialect.placeholder(n);
    let select = format!(
        "SELECT id FROM {LEDGER_TABLE} WHERE stage = {} AND status = {} AND mapping_fingerprint = {} AND id <> {} ORDER BY id",
        p(1), p(2), p(3), p(4)
    );
    let stale: Vec<i64> = sqlx::query_scalar(&select)
        .bind(stage.as_str().to_string())
        .bind(RunStatus::Running.as_str().to_string())
        .bind(fingerprint.to_string())
        .bind(current)
        .fetch_all(&mut *conn)
        .await
        .context("reading the ledger")?;
    for id in &stale {
        let mut attempt = 0;
        loop {
            match set_status(conn, dialect, *id, RunStatus::Abandoned).await {
                Err(e) if retry_lock_wait(&e, &mut attempt).await => continue,
                other => break other.context("writing the ledger")?,
            }
        }
    }
    Ok(stale)
}

/// A drifting row as `--store-rows` keeps it in `tidemark_drift_rows`.
#[derive(Debug, Clone)]
pub struct DriftRow {
    /// Conversation key, as text.
    pub conversation: String,
    /// User key (per_member) or message position (per_message), as text.
    pub subject: String,
    /// Stored value (clamped under a cap); None for NULL.
    pub stored: Option<i64>,
    /// Recomputed value.
    pub recomputed: i64,
    /// stored - recomputed, saturated at the i64 range (the column is a BIGINT; only a
    /// stored value within `recomputed` of `i64::MIN` drifts beyond it: the CSV report has
    /// the exact value).
    pub drift: Option<i64>,
    /// The class.
    pub class: &'static str,
}

/// Inserts one batch's drifting rows for run `id` (multi-row statements of 1000 rows).
pub async fn store_rows(
    conn: &mut AnyConnection,
    dialect: Dialect,
    id: i64,
    rows: &[DriftRow],
) -> Result<()> {
    for chunk in rows.chunks(1000) {
        let mut n = 0;
        let values: Vec<String> = chunk
            .iter()
            .map(|_| {
                let p: Vec<String> = (0..7)
                    .map(|_| {
                        n += 1;
                        dialect.placeholder(n)
                    })
                    .collect();
                format!("({})", p.join(", "))
            })
            .collect();
        let sql = format!(
            "INSERT INTO {DRIFT_ROWS_TABLE} (run_id, conversation_id, subject, stored, recomputed, drift, class) VALUES {}",
            values.join(", ")
        );
        let mut q = sqlx::query(&sql);
        for r in chunk {
            q = q
                .bind(id)
                .bind(r.conversation.clone())
                .bind(r.subject.clone())
                .bind(r.stored)
                .bind(r.recomputed)
                .bind(r.drift)
                .bind(r.class.to_string());
        }
        q.execute(&mut *conn)
            .await
            .context("storing drifting rows")?;
    }
    Ok(())
}

/// What changed between two audits that stored their rows: (new rows, fixed rows).
pub async fn drift_changes(conn: &mut AnyConnection, newer: i64, older: i64) -> Result<(i64, i64)> {
    let count = |a: i64, b: i64| {
        format!(
            "SELECT COUNT(*) FROM {DRIFT_ROWS_TABLE} a WHERE a.run_id = {a} AND NOT EXISTS \
             (SELECT 1 FROM {DRIFT_ROWS_TABLE} b WHERE b.run_id = {b} AND b.conversation_id = a.conversation_id AND b.subject = a.subject)"
        )
    };
    let new: i64 = sqlx::query_scalar(&count(newer, older))
        .fetch_one(&mut *conn)
        .await?;
    let fixed: i64 = sqlx::query_scalar(&count(older, newer))
        .fetch_one(&mut *conn)
        .await?;
    Ok((new, fixed))
}

/// The contract run whose archive holds `table.column`, if any (the newest).
///
/// Errors (exit 3): the archive table cannot be read.
pub async fn archived_by(
    conn: &mut AnyConnection,
    dialect: Dialect,
    table: &str,
    column: &str,
) -> Result<Option<i64>> {
    if !crate::db::catalog::table_exists(conn, dialect, ARCHIVE_TABLE).await? {
        return Ok(None);
    }
    let sql = format!(
        "SELECT MAX(contract_id) AS id FROM {ARCHIVE_TABLE} WHERE counter_table = {} AND counter_column = {}",
        dialect.placeholder(1),
        dialect.placeholder(2)
    );
    let id: Option<i64> = sqlx::query_scalar(&sql)
        .bind(table.to_string())
        .bind(column.to_string())
        .fetch_one(&mut *conn)
        .await?;
    Ok(id)
}

/// The newest finished contract run that dropped `column` of `table` (as the mapping names
/// them), if any: `status` ("contract: done, run #N"), a second `contract`, and the preflight's
/// message for a counter that is gone all ask this.
///
/// Errors when a finished contract run's summary cannot be read: whether the counter was
/// dropped must not be guessed.
pub async fn contract_that_dropped(
    conn: &mut AnyConnection,
    dialect: Dialect,
    table: &str,
    column: &str,
) -> Result<Option<i64>> {
    for e in recent(conn, Stage::Contract, 100, dialect).await? {
        if e.status != RunStatus::Done {
            continue;
        }
        let summary: records::ContractSummaryRecord = e
            .summary
            .as_deref()
            .context("no summary")
            .and_then(|s| Ok(serde_json::from_str(s)?))
            .with_context(|| format!("reading contract run #{} of the ledger", e.id))?;
        if summary.target.table == table && summary.target.column == column {
            return Ok(Some(e.id));
        }
    }
    Ok(None)
}
