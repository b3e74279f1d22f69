//! Stage 2, backfill: each member's `last_read_id` from the best evidence the database holds
//! (semantics.md, "Backfill: where each last_read_id comes from"), in batches of whole
//! conversations. Each batch reads in one consistent snapshot and writes with one forward-only
//! upsert per chunk of rows: a watermark never moves back (seed 000 §3).

use anyhow::{Context, Result};
use serde::Serialize;
use sqlx::{AnyConnection, Row};
use std::collections::{BTreeMap, HashMap};

use super::{begin_snapshot, begin_write, commit, next_batch, rollback, Batch, BatchUnit, Key};
use crate::dialect::{render, Dialect, RangeParams, SqlContext};
use crate::error::input_error;
use crate::ledger;
use crate::mapping::{EvidenceKind, Mapping};
use crate::progress::Progress;
use crate::schema::{self, KeyKind};

/// Rows per upsert statement: 4 parameters a row stays below SQLite's 32 766 bind limit.
const UPSERT_CHUNK: usize = 5000;

/// Options of a backfill run.
#[derive(Debug, Clone)]
pub struct BackfillOptions {
    /// Members per batch (whole conversations: a batch may exceed it by one conversation).
    pub batch_size: u64,
    /// Print the plan and write nothing.
    pub dry_run: bool,
    /// No progress output.
    pub quiet: bool,
}

impl Default for BackfillOptions {
    fn default() -> Self {
        BackfillOptions {
            batch_size: 2000,
            dry_run: false,
            quiet: true,
        }
    }
}

/// What a backfill did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BackfillSummary {
    /// Members considered (active members, or counter rows without [members]).
    pub members: u64,
    /// Batches run.
    pub batches: u64,
    /// Watermarks created (no row before).
    pub written: u64,
    /// Existing watermarks moved forward.
    pub advanced: u64,
    /// Existing watermarks already at or past the evidence (left as they were).
    pub unchanged: u64,
    /// Members with no evidence at all (no watermark written).
    pub no_evidence: u64,
    /// Watermarks per evidence kind (provenance).
    pub by_source: BTreeMap<String, u64>,
    /// Counters that no watermark can represent: k < 0 or k greater than the countable
    /// messages (semantics.md, Backfill 3).
    pub unrepresentable_counters: u64,
    /// The ledger run id, when the ledger exists.
    pub ledger_id: Option<i64>,
}

/// One watermark to write.
#[derive(Debug, Clone)]
struct Planned {
    usr: Key,
    conv: Key,
    value: i64,
    source: EvidenceKind,
    existing: Option<i64>,
}

/// Runs the backfill. With `dry_run`, returns the plan's counts (what would be written) and
/// writes nothing.
///
/// Errors: exit 2 for a mapping that does not match the database or a missing watermark table
/// (run `expand` first); exit 3 for database failures (the batch in flight is rolled back;
/// finished batches stay written, and re-running is safe because writes are forward-only).
pub async fn run(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
    opts: &BackfillOptions,
) -> Result<BackfillSummary> {
    schema::preflight(conn, mapping, dialect).await?;
    if !schema::table_exists(conn, dialect, &mapping.watermarks.table).await? {
        return Err(input_error(format!(
            "watermark table {:?} does not exist: run `tidemark expand` first",
            mapping.watermarks.table
        )));
    }
    let ctx = SqlContext::new(mapping, dialect);
    let (user_kind, conv_kind) = {
        let (u, c) = schema::watermark_key_types(conn, mapping, &ctx).await?;
        (u.kind, c.kind)
    };
    let total = count_subjects(conn, &ctx).await?;
    let mut summary = BackfillSummary::default();
    let options = serde_json::json!({ "batch_size": opts.batch_size, "dry_run": opts.dry_run });
    let ledger_id =
        if !opts.dry_run && schema::table_exists(conn, dialect, ledger::LEDGER_TABLE).await? {
            Some(ledger::start(conn, dialect, "backfill", &mapping.fingerprint, &options).await?)
        } else {
            None
        };
    summary.ledger_id = ledger_id;
    let mut progress = Progress::new("backfill", "members", total, opts.quiet);
    let mut lo: Option<Key> = None;
    let result: Result<()> = async {
        while let Some(batch) = next_batch(
            conn,
            &ctx,
            BatchUnit::Subjects,
            conv_kind,
            lo.clone(),
            opts.batch_size,
        )
        .await?
        {
            let planned = plan_batch(
                conn,
                &ctx,
                mapping,
                &batch,
                user_kind,
                conv_kind,
                &mut summary,
            )
            .await?;
            if !opts.dry_run {
                write_batch(conn, &ctx, &planned).await?;
            }
            for p in &planned {
                match p.existing {
                    None => summary.written += 1,
                    Some(e) if p.value > e => summary.advanced += 1,
                    Some(_) => summary.unchanged += 1,
                }
                *summary
                    .by_source
                    .entry(p.source.as_str().to_string())
                    .or_default() += 1;
            }
            summary.members += batch.rows;
            summary.batches += 1;
            progress.advance(batch.rows);
            lo = Some(batch.hi);
        }
        Ok(())
    }
    .await;
    progress.finish();
    if let Some(id) = ledger_id {
        let status = if result.is_ok() { "done" } else { "failed" };
        ledger::finish(
            conn,
            dialect,
            id,
            status,
            &serde_json::to_value(&summary)?,
            None,
            None,
            None,
        )
        .await?;
    }
    result?;
    Ok(summary)
}

async fn count_subjects(conn: &mut AnyConnection, ctx: &SqlContext) -> Result<u64> {
    let sub = render(
        "subjects.sql",
        ctx,
        minijinja::context! { range => RangeParams::default() },
    )?;
    let n: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM ({sub}) tm_s"))
        .fetch_one(&mut *conn)
        .await?;
    Ok(n.max(0) as u64)
}

/// Reads one batch's evidence in a consistent snapshot and chooses each member's watermark.
async fn plan_batch(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    mapping: &Mapping,
    batch: &Batch,
    user_kind: KeyKind,
    conv_kind: KeyKind,
    summary: &mut BackfillSummary,
) -> Result<Vec<Planned>> {
    let range = batch.params(ctx.dialect, 1);
    let evidence_sql = render(
        "backfill_evidence.sql",
        ctx,
        minijinja::context! { range => range },
    )?;
    let has_counter = ctx.has_evidence(EvidenceKind::Counter);
    begin_snapshot(conn, ctx.dialect).await?;
    let read: Result<_> = async {
        let rows = batch
            .bind(sqlx::query(&evidence_sql))
            .fetch_all(&mut *conn)
            .await
            .context("reading backfill evidence")?;
        let mut ranks: HashMap<(Key, Key), (Option<i64>, i64)> = HashMap::new();
        if has_counter {
            let rank_sql = render(
                "backfill_counter_rank.sql",
                ctx,
                minijinja::context! { range => range },
            )?;
            for r in batch
                .bind(sqlx::query(&rank_sql))
                .fetch_all(&mut *conn)
                .await
                .context("ranking messages for counter evidence")?
            {
                let conv = Key::read(&r, 0, conv_kind)?;
                let usr = Key::read(&r, 1, user_kind)?;
                ranks.insert((conv, usr), (r.try_get(2)?, r.try_get(3)?));
            }
        }
        Ok((rows, ranks))
    }
    .await;
    let (rows, ranks) = match read {
        Ok(v) => {
            commit(conn).await?;
            v
        }
        Err(e) => {
            rollback(conn).await;
            return Err(e);
        }
    };
    let mut planned = Vec::with_capacity(rows.len());
    for row in &rows {
        let conv = Key::read(row, 0, conv_kind)?;
        let usr = Key::read(row, 1, user_kind)?;
        let existing: Option<i64> = row.try_get(2)?;
        let max_pos: i64 = row.try_get(3 + mapping.evidence.len())?;
        let mut chosen: Option<(i64, EvidenceKind)> = None;
        let mut own: Option<i64> = None;
        for (i, e) in mapping.evidence.iter().enumerate() {
            let v: Option<i64> = row.try_get(3 + i)?;
            match e.kind {
                EvidenceKind::OwnMessage => own = v,
                _ if chosen.is_some() => {}
                EvidenceKind::Position | EvidenceKind::Timestamp => chosen = v.map(|v| (v, e.kind)),
                EvidenceKind::Counter => {
                    if let Some(k) = v {
                        let (rank_pos, countable) = ranks
                            .get(&(conv.clone(), usr.clone()))
                            .cloned()
                            .unwrap_or((None, 0));
                        // k <= 0: read everything; 0 < k < |L|: L[k]; k >= |L|: nothing read.
                        let value = if k <= 0 {
                            max_pos
                        } else {
                            rank_pos.unwrap_or(0)
                        };
                        if k < 0 || k > countable {
                            summary.unrepresentable_counters += 1;
                        }
                        chosen = Some((value, EvidenceKind::Counter));
                    }
                }
            }
        }
        // Own messages are a lower bound (semantics.md, Backfill 4).
        let chosen = match (chosen, own) {
            (Some((v, _)), Some(o)) if o > v => Some((o, EvidenceKind::OwnMessage)),
            (None, Some(o)) => Some((o, EvidenceKind::OwnMessage)),
            (c, _) => c,
        };
        match chosen {
            Some((value, source)) => planned.push(Planned {
                usr,
                conv,
                value,
                source,
                existing,
            }),
            None => summary.no_evidence += 1,
        }
    }
    Ok(planned)
}

/// Writes one batch with forward-only upserts in one short transaction.
async fn write_batch(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    planned: &[Planned],
) -> Result<()> {
    if planned.is_empty() {
        return Ok(());
    }
    begin_write(conn, ctx.dialect).await?;
    let result: Result<()> = async {
        for chunk in planned.chunks(UPSERT_CHUNK) {
            let sql = render(
                "upsert_watermarks.sql",
                ctx,
                minijinja::context! { rows => chunk.len() },
            )?;
            let mut q = sqlx::query(&sql);
            for p in chunk {
                q = p.usr.bind(q);
                q = p.conv.bind(q);
                q = q.bind(p.value).bind(p.source.as_str().to_string());
            }
            q.execute(&mut *conn).await.context("writing watermarks")?;
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
