//! Choosing each member's watermark from the evidence of one batch (semantics.md "Backfill:
//! where each last_read_id comes from"): the mapping's evidence policy, members who left, the
//! counter that only fills a missing watermark, and the settle time that keeps a derived
//! watermark off a position whose transaction has not committed.

use anyhow::{Context, Result};
use sqlx::{AnyConnection, Row};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::super::{begin_snapshot, commit, rollback, Batch, Key, Scope};
use super::BackfillSummary;
use crate::dialect::{render, Dialect, SqlContext};
use crate::mapping::{EvidenceKind, EvidencePolicy, Mapping};
use crate::schema::KeyKind;

/// How the settle time applies to a run.
#[derive(Debug, Clone, Default)]
pub(super) enum Settle {
    /// Off (`--settle-time 0`), or no derived evidence in the mapping.
    #[default]
    Off,
    /// The mapping derives watermarks but has no creation time: not guarded.
    Unguarded,
    /// SQL over `{col}` (a conversation key) true when the conversation has no message younger
    /// than the settle time; with the settle time in seconds.
    Quiet(String, u64),
}

/// One watermark to write.
#[derive(Debug, Clone)]
pub(super) struct Planned {
    pub(super) usr: Key,
    pub(super) conv: Key,
    pub(super) value: i64,
    pub(super) source: EvidenceKind,
    pub(super) existing: Option<i64>,
}

/// The settle-time guard of this run (semantics.md "Backfill", settle time): the audit's
/// `--min-age` predicate ("no message of the conversation younger than X", the dialect's
/// `seconds_ago` or a Unix-time literal for an integer `created_at`) when the mapping has
/// `messages.created_at`, the settle time is not zero and some evidence is derived (counter,
/// timestamp, own message); `Unguarded` when such evidence exists without a creation time.
pub(super) async fn settle_predicate(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
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
    let (quiet, _) = crate::stages::audit::quiescence(
        conn,
        mapping,
        dialect,
        &Scope::default(),
        Duration::from_secs(secs),
    )
    .await?;
    Ok(Settle::Quiet(quiet, secs))
}

/// Adds a planned batch to the counts.
pub(super) fn count_planned(planned: &[Planned], batch: &Batch, summary: &mut BackfillSummary) {
    for p in planned {
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
}

/// Reads one batch's evidence in a consistent snapshot and chooses each member's watermark.
#[allow(clippy::too_many_arguments)] // one call site (the batch loop): the run's state, passed as it is
pub(super) async fn plan_batch(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    mapping: &Mapping,
    settle: &Settle,
    batch: &Batch,
    user_kind: KeyKind,
    conv_kind: KeyKind,
    summary: &mut BackfillSummary,
) -> Result<Vec<Planned>> {
    let range = batch.params(ctx.dialect, 1);
    let quiet = match settle {
        Settle::Quiet(sql, _) => Some(sql.replace("{col}", "tm_c.conv")),
        _ => None,
    };
    let evidence_sql = render(
        "backfill_evidence.sql",
        ctx,
        minijinja::context! { range => range, quiet => quiet },
    )?;
    let has_counter = ctx.has_evidence(EvidenceKind::Counter);
    begin_snapshot(conn, ctx.dialect).await?;
    let read: Result<_> = async {
        // Not kept prepared: MariaDB re-executing the prepared statement (the next batch, or
        // the next run on the same connection) fails with "Unknown column 'tm_c.conv' in
        // 'WHERE'" once the settle-time predicate, a subquery over the derived table tm_c, is
        // in it (a server bug with prepared derived tables; the first execution works).
        let rows = batch
            .bind(sqlx::query(&evidence_sql).persistent(false))
            .fetch_all(&mut *conn)
            .await
            .context("reading backfill evidence")?;
        // (conv, user) -> (L[k] if it exists, whether k <= |L|)
        let mut ranks: HashMap<(Key, Key), (Option<i64>, bool)> = HashMap::new();
        if has_counter {
            // The range appears twice (messages, members): the second copy binds after the first.
            let range2 = batch.params(ctx.dialect, batch.param_count() + 1);
            let rank_sql = render(
                "backfill_counter_rank.sql",
                ctx,
                minijinja::context! { range => range, range2 => range2 },
            )?;
            // Not kept prepared: after five runs PostgreSQL may switch to a generic plan that
            // joins the ranks on the conversation alone (a join filter on the rank), quadratic
            // in a large conversation: 25.5 s against 0.69 s for one batch of the 400 000-member
            // bench data, whose backfill took 317 s instead of about 50.
            for r in batch
                .bind(batch.bind(sqlx::query(&rank_sql).persistent(false)))
                .fetch_all(&mut *conn)
                .await
                .context("ranking messages for counter evidence")?
            {
                let conv = Key::read(&r, "conv", conv_kind)?;
                let usr = Key::read(&r, "usr", user_kind)?;
                let representable: i64 = r.try_get("representable")?;
                ranks.insert((conv, usr), (r.try_get("pos")?, representable != 0));
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
    let mut unsettled_convs: HashSet<Key> = HashSet::new();
    // The order evidence is considered in: the mapping's, except that under the "highest"
    // policy a counter comes after every position-space source (it only fills a watermark
    // none of them gives).
    let highest = mapping.policy == EvidencePolicy::Highest;
    let mut order: Vec<usize> = (0..mapping.evidence.len()).collect();
    if highest {
        order.sort_by_key(|&i| mapping.evidence[i].kind() == EvidenceKind::Counter);
    }
    for row in &rows {
        let conv = Key::read(row, "conv", conv_kind)?;
        let usr = Key::read(row, "usr", user_kind)?;
        let existing: Option<i64> = row.try_get("existing")?;
        let max_pos: i64 = row.try_get("max_pos")?;
        // A member who left keeps the read position their position or timestamp evidence
        // gives (a rejoin must not find every message unread); their counter is owed nothing
        // and is never evidence, and their own messages are not either (semantics.md
        // "Backfill", scenario S10).
        let active = row.try_get::<i64, _>("is_active")? != 0;
        // A conversation with a message younger than the settle time may hide a position
        // allocated by a transaction that has not committed: no "everything up to the newest
        // message" derivation for it in this run (semantics.md "Backfill", settle time).
        let unsettled = quiet.is_some() && row.try_get::<i64, _>("unsettled")? != 0;
        let mut held = false;
        let mut chosen: Option<(i64, EvidenceKind)> = None;
        let mut own: Option<i64> = None;
        for &i in &order {
            let e = &mapping.evidence[i];
            // `ev1`, `ev2`, …: the evidence columns of backfill_evidence.sql, in mapping order.
            let v: Option<i64> = row.try_get(format!("ev{}", i + 1).as_str())?;
            match e.kind() {
                EvidenceKind::Counter | EvidenceKind::OwnMessage if !active => {}
                EvidenceKind::OwnMessage if unsettled => held |= v.is_some(),
                EvidenceKind::OwnMessage => own = v,
                // Under "first", a held source ahead of the rest decides: nothing is written
                // now, so that the later run chooses as a settled one would.
                EvidenceKind::Timestamp if unsettled && v.is_some() && !highest => {
                    if chosen.is_none() {
                        held = true;
                        break;
                    }
                }
                EvidenceKind::Timestamp if unsettled => held |= v.is_some(),
                // "highest": the largest position-space value, the first of equal ones.
                EvidenceKind::Position | EvidenceKind::Timestamp if highest => {
                    if let Some(v) = v.filter(|v| chosen.is_none_or(|(c, _)| *v > c)) {
                        chosen = Some((v, e.kind()));
                    }
                }
                _ if chosen.is_some() => {}
                EvidenceKind::Position | EvidenceKind::Timestamp => {
                    chosen = v.map(|v| (v, e.kind()))
                }
                EvidenceKind::Counter => {
                    if let Some(k) = v.filter(|k| !(unsettled && *k <= 0 && existing.is_none())) {
                        let (rank_pos, representable) = ranks
                            .get(&(conv.clone(), usr.clone()))
                            .cloned()
                            .unwrap_or((None, false));
                        // k <= 0: read everything; 0 < k < |L|: L[k]; k >= |L|: nothing read.
                        let value = if k <= 0 {
                            max_pos
                        } else {
                            rank_pos.unwrap_or(0)
                        };
                        if k < 0 || (k > 0 && !representable) {
                            summary.unrepresentable_counters += 1;
                        }
                        chosen = Some((value, EvidenceKind::Counter));
                    } else if v.is_some() {
                        held = true;
                        break;
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
            // A counter is the weakest evidence: it only fills a missing watermark. Once the
            // application (or an earlier run) has written one, a drifted counter must not
            // advance it (a counter cleared by a racing "mark all read" would mark unread
            // messages read, and forward-only cannot take that back).
            Some((_, EvidenceKind::Counter)) if existing.is_some() => {
                summary.kept_over_counter += 1
            }
            Some((value, source)) => planned.push(Planned {
                usr,
                conv,
                value,
                source,
                existing,
            }),
            None if held => {
                summary.left_unsettled_members += 1;
                unsettled_convs.insert(conv);
            }
            None if !active => summary.left_without_evidence += 1,
            None => summary.no_evidence += 1,
        }
    }
    summary.left_unsettled += unsettled_convs.len() as u64;
    Ok(planned)
}
