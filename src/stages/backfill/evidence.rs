//! One batch of the backfill inside the database (issue 11): each member's watermark chosen from
//! the evidence (semantics.md "Backfill: where each last_read_id comes from": the mapping's
//! evidence policy, members who left, the counter that only fills a missing watermark, the
//! settle time that keeps a derived watermark off a position whose transaction has not
//! committed) by `sql/common/backfill_plan.sql`, written forward-only by one INSERT … SELECT,
//! and tallied (`sql/common/backfill_tally.sql`): only the counts travel to tidemark.

use anyhow::{Context, Result};
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};
use std::time::Duration;

use super::binds::{markers, number, Numbered};
use super::summary::BackfillSummary;
use crate::db::tx::{begin_snapshot, commit, rollback};
use crate::dialect::{render, SqlContext};
use crate::mapping::{EvidenceKind, Mapping};
use crate::stages::batch::{Batch, Scope};

/// How the settle time applies to a run.
#[derive(Debug, Clone, Default)]
pub(super) enum Settle {
    /// Off (`--settle-time 0`), or no derived evidence in the mapping.
    #[default]
    Off,
    /// The mapping derives watermarks but has no creation time: not guarded.
    Unguarded,
    /// The settle time's cutoff (an SQL expression comparable with `messages.created_at`: a
    /// message newer than it is young, and a derived watermark that would newly cover one is
    /// held), with the settle time in seconds.
    Quiet(String, u64),
}

/// The settle-time guard of this run (semantics.md "Backfill", settle time): the audit's
/// `--min-age` predicate ("no message of the conversation younger than X", the dialect's
/// `seconds_ago` or a Unix-time literal for an integer `created_at`) when the mapping has
/// `messages.created_at`, the settle time is not zero and some evidence is derived (counter,
/// timestamp, own message); `Unguarded` when such evidence exists without a creation time.
pub(super) async fn settle_predicate(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    ctx: &SqlContext,
    settle_time: Duration,
) -> Result<Settle> {
    let derived = mapping
        .evidence
        .iter()
        .any(|e| e.kind() != EvidenceKind::Position);
    if !derived {
        return Ok(Settle::Off);
    }
    if mapping.messages.created_at.is_none() {
        return Ok(Settle::Unguarded);
    }
    if settle_time.is_zero() {
        return Ok(Settle::Off);
    }
    let secs = settle_time.as_secs().max(1);
    let (filter, _) = crate::stages::audit::quiescence(
        conn,
        mapping,
        ctx,
        &Scope::default(),
        Duration::from_secs(secs),
    )
    .await?;
    // Joined once per batch (backfill_plan.sql, tm_u), never evaluated per row.
    Ok(Settle::Quiet(filter.cutoff, secs))
}

/// The template variables of a batch's plan: the range markers, the policy and the settle
/// time's cutoff (`quiet`).
fn plan_vars(
    ctx: &SqlContext,
    mapping: &Mapping,
    settle: &Settle,
    batch: Option<&Batch>,
) -> minijinja::Value {
    let quiet = match settle {
        Settle::Quiet(cutoff, _) => Some(cutoff.clone()),
        _ => None,
    };
    minijinja::context! { range => markers(batch, ctx.keyed), quiet => quiet, policy => mapping.policy.as_str() }
}

/// The statements one batch runs, in order, with their binds numbered: on an engine that
/// writes and tallies in one statement (PostgreSQL) that statement alone; else the plan into
/// the temporary table, the INSERT … SELECT from it and the tally of it (the table is dropped
/// before and after: [`crate::dialect::Sessions::backfill_plan_drop_sql`]).
pub(super) fn write_statements(
    ctx: &SqlContext,
    mapping: &Mapping,
    settle: &Settle,
    batch: Option<&Batch>,
) -> Result<Vec<Numbered>> {
    let vars = plan_vars(ctx, mapping, settle, batch);
    let mut out = vec![number(
        &render("backfill_write.sql", ctx, vars)?,
        ctx.dialect,
    )];
    if ctx.dialect.sessions().backfill_plan_drop_sql().is_some() {
        let source = minijinja::context! { source => "tm_plan", from_plan => true };
        out.push(number(
            &render("upsert_watermarks.sql", ctx, source.clone())?,
            ctx.dialect,
        ));
        out.push(number(
            &render("backfill_tally.sql", ctx, source)?,
            ctx.dialect,
        ));
    }
    Ok(out)
}

/// The read-only statement of `--dry-run`: the tally of the plan, written nowhere.
pub(super) fn preview_statement(
    ctx: &SqlContext,
    mapping: &Mapping,
    settle: &Settle,
    batch: Option<&Batch>,
) -> Result<Numbered> {
    let plan = render(
        "backfill_plan.sql",
        ctx,
        plan_vars(ctx, mapping, settle, batch),
    )?;
    let source = format!("(\n{plan}\n)");
    Ok(number(
        &render(
            "backfill_tally.sql",
            ctx,
            minijinja::context! { source => source },
        )?,
        ctx.dialect,
    ))
}

/// Builds the run's checkpoint (JSON) from the counts including the batch being written.
pub(super) type CheckpointOf<'a> = &'a dyn Fn(&BackfillSummary) -> Result<serde_json::Value>;

/// What a writing batch records beside its watermarks, in the same transaction.
pub(super) struct Record<'a> {
    /// The ledger run the checkpoint belongs to.
    pub ledger_id: i64,
    /// The checkpoint, from the counts including this batch; None with `--jobs` (the run's
    /// own connection records it once every earlier batch is done).
    pub checkpoint: Option<CheckpointOf<'a>>,
    /// Count the rows whose unread number changes (`--skip-change-count` turns it off).
    pub count_changes: bool,
    /// The form of the audit statement that counts them (`--audit-form`).
    pub audit_form: crate::stages::audit::AuditForm,
}

/// Writes one batch (the plan, the forward-only INSERT … SELECT, the tally), with
/// [`Record::count_changes`] counts the rows whose unread number changes (the audit's
/// one-pass count over the new watermarks), and writes the run's checkpoint built from the
/// counts ([`Record::checkpoint`]), in one transaction: after a crash either all of it is there
/// or none (a kill -9 resumes exactly, the change count included). Without `record` (a dry
/// run) nothing is written and nothing counted: the tally of the plan is read in a snapshot.
/// Adds the batch's counts to `summary`.
///
/// Errors (exit 3): the database fails, or a lock wait gives up (the caller retries).
pub(super) async fn run_batch(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    mapping: &Mapping,
    settle: &Settle,
    batch: &Batch,
    summary: &mut BackfillSummary,
    record: Option<Record<'_>>,
) -> Result<()> {
    let dialect = ctx.dialect;
    let Some(record) = record else {
        let preview = preview_statement(ctx, mapping, settle, Some(batch))?;
        begin_snapshot(conn, dialect).await?;
        let row = preview
            .bind(batch, sqlx::query(&preview.sql).persistent(false))
            .fetch_one(&mut *conn)
            .await
            .context("planning the backfill batch");
        let row = match row {
            Ok(row) => {
                commit(conn).await?;
                row
            }
            Err(e) => {
                rollback(conn).await;
                return Err(e);
            }
        };
        return add_tally(&row, batch, summary);
    };
    let statements = write_statements(ctx, mapping, settle, Some(batch))?;
    for sql in dialect.sessions().backfill_write_begin_sql() {
        sqlx::raw_sql(sql).execute(&mut *conn).await?;
    }
    let result: Result<()> = async {
        if let Some(drop) = dialect.sessions().backfill_plan_drop_sql() {
            sqlx::raw_sql(drop).execute(&mut *conn).await?;
        }
        let (last, before) = statements.split_last().expect("one statement at least");
        for s in before {
            // Not kept prepared: the text differs with the batch's bounds and PostgreSQL may
            // switch a kept statement to a generic plan (see the counter rank's note).
            s.bind(batch, sqlx::query(&s.sql).persistent(false))
                .execute(&mut *conn)
                .await
                .context("writing watermarks")?;
        }
        let row = last
            .bind(batch, sqlx::query(&last.sql).persistent(false))
            .fetch_one(&mut *conn)
            .await
            .context("writing watermarks")?;
        add_tally(&row, batch, summary)?;
        if let Some(drop) = dialect.sessions().backfill_plan_drop_sql() {
            sqlx::raw_sql(drop).execute(&mut *conn).await?;
        }
        if record.count_changes {
            // What the model change loses, for this batch: rows whose unread number will
            // differ once the counter is gone, read after the write in the same transaction
            // (one commit a batch, and the count never missing from a committed batch).
            summary.unread_changes += count_changes(conn, ctx, batch, record.audit_form).await?;
            summary.counted_changes = true;
        }
        if let Some(checkpoint) = record.checkpoint {
            let checkpoint = checkpoint(summary)?;
            crate::ledger::set_checkpoint(conn, dialect, record.ledger_id, &checkpoint).await?;
        }
        Ok(())
    }
    .await;
    match result {
        Ok(()) => commit(conn).await,
        Err(e) => {
            rollback(conn).await;
            Err(e)
        }
    }
}

/// Adds one batch's tally row (`sql/common/backfill_tally.sql`) to the summary.
fn add_tally(row: &AnyRow, batch: &Batch, summary: &mut BackfillSummary) -> Result<()> {
    let n = |col: &str| -> Result<u64> {
        let v: Option<i64> = row
            .try_get(col)
            .with_context(|| format!("reading the backfill tally's {col}"))?;
        Ok(v.unwrap_or(0).max(0) as u64)
    };
    summary.written += n("written")?;
    summary.advanced += n("advanced")?;
    summary.unchanged += n("unchanged")?;
    for kind in [
        EvidenceKind::Position,
        EvidenceKind::Timestamp,
        EvidenceKind::Counter,
        EvidenceKind::OwnMessage,
    ]
    .map(EvidenceKind::as_str)
    {
        let count = n(&format!("n_{kind}"))?;
        if count > 0 {
            *summary.by_source.entry(kind.to_string()).or_default() += count;
        }
    }
    summary.kept_over_counter += n("kept")?;
    summary.left_unsettled_members += n("held")?;
    summary.left_unsettled += n("held_conversations")?;
    summary.left_without_evidence += n("left_none")?;
    summary.no_evidence += n("no_evidence")?;
    summary.unrepresentable_counters += n("unrep")?;
    summary.not_positions += n("nopos")?;
    summary.times_not_times += n("no_time")?;
    if let Some(f) = summary.read_flags.as_mut() {
        // Only a plan with read_flags evidence has these columns (backfill_tally.sql).
        let count = n("n_read_flags")?;
        if count > 0 {
            *summary
                .by_source
                .entry(EvidenceKind::ReadFlags.as_str().to_string())
                .or_default() += count;
        }
        f.members += n("oo_members")?;
        f.read_out_of_order += n("oo_read")?;
        f.unread_marked_read += n("oo_unread")?;
    }
    summary.members += batch.rows;
    summary.batches += 1;
    Ok(())
}

/// Rows of a batch whose stored counter differs from the unread recomputed from the
/// watermarks (the audit's statement of the batch in the form `asked` or, by default, the one
/// the batch's figures pick, as the audit picks it: uncapped, counted in the database).
/// Run inside the batch's write transaction, after its write: it reads the batch's own new
/// watermarks, and its count is committed with them and the checkpoint.
async fn count_changes(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    batch: &Batch,
    asked: crate::stages::audit::AuditForm,
) -> Result<u64> {
    let (_, form) = crate::stages::audit::rows_and_form(conn, ctx, batch, asked).await?;
    let sql = crate::stages::audit::batch_statement(ctx, batch, None, true, form)?;
    let q = sqlx::query(&sql).persistent(false);
    let n: Option<i64> = crate::stages::audit::bind_batch(batch, ctx, true, form, q)
        .fetch_one(&mut *conn)
        .await
        .context("counting the rows whose unread number changes")?
        .try_get("n")?;
    Ok(n.unwrap_or(0).max(0) as u64)
}
