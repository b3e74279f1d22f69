//! The mapping proven on the data before anything is written (issue 24): on a sample of each
//! evidence entry's values, the share that belongs to the messages table's position space
//! (`sql/common/evidence_share.sql`). A value v of conversation c is a position of c when c
//! has a message at position v, or v is 0 (a value below 0 is no position and is not
//! sampled); a last-read time fits when c has a message created
//! at or before it; a stored counter k fits when 0 <= k <= the messages of its conversation.
//!
//! A mapping that pairs the global `posts.id` with a per-topic `last_read_post_number` (two
//! position spaces) writes a wrong watermark for almost every member, and its audit then
//! reports the mapping's error as counter drift. Measured first, such an entry fits in a small
//! share of its values: under [`MIN_SHARE`] of at least [`MIN_VALUES`] values, `backfill` (and
//! its dry run) stops with exit 2 naming the entry and the figure, unless the user accepts it
//! (`--accept-evidence-share`); `plan` and `inspect` print the same figures.
//!
//! Cost: one statement per entry, each a bounded read of [`SAMPLE_ROWS`] rows; a position is
//! one indexed probe of the messages table per sampled row, a counter or a timestamp one read of
//! each distinct sampled conversation's messages, of at most [`SAMPLE_CONVERSATIONS`] (issue 30:
//! a channel whose members fill the sample is counted once, not once per member). Citus runs every form (issue 29 row 20).

use anyhow::{Context, Result};
use sqlx::{AnyConnection, Row};

use crate::dialect::{render, SqlContext};
use crate::error::input_error;
use crate::mapping::{Evidence, EvidenceKind, Mapping};

/// Values read per evidence entry.
pub const SAMPLE_ROWS: u64 = 10_000;
/// Of a counter's or a timestamp's sampled values, those of at most this many conversations are
/// measured (each conversation's messages read once: issue 30). Where every sampled row is a
/// conversation of its own, the statement reads this many conversations instead of
/// [`SAMPLE_ROWS`]; a channel whose members fill the sample is one conversation.
pub const SAMPLE_CONVERSATIONS: u64 = 1_000;
/// The share under which an entry is taken to be in another position space (issue 24: "under,
/// say, 90 %").
pub const MIN_SHARE: f64 = 0.9;
/// The share under which a stored counter is taken to hold another quantity (a total, a
/// position, a time): lower than [`MIN_SHARE`], since counters drift by nature (a negative or
/// piled-up counter is drift the audit reports, not a mapping error), while a column that is
/// not an unread count at all lies outside the range in most rows.
pub const MIN_COUNTER_SHARE: f64 = 0.5;
/// Fewer values than this decide nothing (a share of 3 values is no measure).
pub const MIN_VALUES: u64 = 20;

/// One evidence entry's measure.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Share {
    /// The entry's 1-based place in the mapping (`evidence[n]`).
    pub entry: usize,
    /// Its kind: `position`, `timestamp` or `counter`.
    pub kind: String,
    /// What it reads, as the mapping names it: `topic_users.last_read_post_number`, or the
    /// counter's `table.column`.
    pub source: String,
    /// Values sampled (not NULL).
    pub measured: u64,
    /// Of those, the values that fit (see the module's rules).
    pub fits: u64,
}

impl Share {
    /// `fits / measured` (1 when nothing was measured).
    pub fn share(&self) -> f64 {
        if self.measured == 0 {
            1.0
        } else {
            self.fits as f64 / self.measured as f64
        }
    }

    /// The share under which this entry stops a backfill: [`MIN_SHARE`], or
    /// [`MIN_COUNTER_SHARE`] for the counter.
    pub fn limit(&self) -> f64 {
        if self.kind == "counter" {
            MIN_COUNTER_SHARE
        } else {
            MIN_SHARE
        }
    }

    /// Whether the entry looks like another position space (or, for the counter, another
    /// quantity): at least [`MIN_VALUES`] values and a share under [`Share::limit`].
    pub fn suspect(&self) -> bool {
        self.measured >= MIN_VALUES && self.share() < self.limit()
    }

    /// The figure in words: `91.7 % of 120 sampled values are positions of their conversation`.
    pub fn describe(&self) -> String {
        let what = match self.kind.as_str() {
            "position" => "are positions of their conversation (or 0)",
            "timestamp" => "are at or after their conversation's first message",
            _ => "lie between 0 and their conversation's message count",
        };
        let few = if self.measured < MIN_VALUES {
            " (too few to judge)"
        } else {
            ""
        };
        format!(
            "{:.1} % of {} sampled values {what}{few}",
            100.0 * self.share(),
            self.measured
        )
    }
}

/// One evidence entry's measuring statement (`sql/common/evidence_share.sql`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareStatement {
    /// The entry's 1-based place in the mapping (`evidence[n]`).
    pub entry: usize,
    /// Its kind: `position`, `timestamp` or `counter`.
    pub kind: &'static str,
    /// What it reads, as the mapping names it (see [`Share::source`]).
    pub source: String,
    /// The statement: one row, `measured` and `fits`.
    pub sql: String,
}

/// The statements [`measure`] sends for `mapping` under `ctx`, one per position, timestamp and
/// counter entry (own messages are positions by construction; a timestamp keyed by the user
/// alone has no conversation to check against, and none is measured without
/// `messages.created_at`), in the mapping's order. Public so that a DBA's review and the Citus
/// lint (`tests/integration/citus_lint.rs`) read exactly what runs.
///
/// Errors: a template that fails to render (a bug in tidemark, exit 3).
pub fn statements(mapping: &Mapping, ctx: &SqlContext) -> Result<Vec<ShareStatement>> {
    let mut out = Vec::new();
    for (i, e) in mapping.evidence.iter().enumerate() {
        let (kind, source, idents) = match e {
            Evidence::Position(s) | Evidence::Timestamp(s) if s.conversation.is_some() => {
                if e.kind() == EvidenceKind::Timestamp && mapping.messages.created_at.is_none() {
                    continue;
                }
                (
                    e.kind().as_str(),
                    format!("{}.{}", s.table, s.column),
                    Some(&ctx.evidence[i]),
                )
            }
            Evidence::Counter => (
                "counter",
                format!(
                    "{}.{}",
                    mapping.counter_table(),
                    mapping.counter.stored_column().unwrap_or("value")
                ),
                None,
            ),
            _ => continue,
        };
        let sql = render(
            "evidence_share.sql",
            ctx,
            minijinja::context! {
                e => idents,
                sample => SAMPLE_ROWS,
                conversations => SAMPLE_CONVERSATIONS,
            },
        )?;
        out.push(ShareStatement {
            entry: i + 1,
            kind,
            source,
            sql,
        });
    }
    Ok(out)
}

/// Measures every entry [`statements`] lists, in the mapping's order.
///
/// Errors (exit 3): a query fails.
pub async fn measure(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    ctx: &SqlContext,
) -> Result<Vec<Share>> {
    let mut out = Vec::new();
    for s in statements(mapping, ctx)? {
        let row = sqlx::query(&s.sql)
            .persistent(false)
            .fetch_one(&mut *conn)
            .await
            .with_context(|| format!("measuring evidence[{}] ({})", s.entry, s.source))?;
        let n = |c: &str| -> Result<u64> { Ok(row.try_get::<i64, _>(c)?.max(0) as u64) };
        out.push(Share {
            entry: s.entry,
            kind: s.kind.to_string(),
            source: s.source,
            measured: n("measured")?,
            fits: n("fits")?,
        });
    }
    Ok(out)
}

/// The refusal for the suspect entries of `shares` (None when there is none): each named with
/// where the mapping writes it, and its figure.
pub fn refusal(mapping: &Mapping, shares: &[Share]) -> Option<anyhow::Error> {
    let suspect: Vec<String> = shares
        .iter()
        .filter(|s| s.suspect())
        .map(|s| {
            let key = if s.kind == "counter" {
                "counter.column".to_string()
            } else {
                format!("evidence[{}].column", s.entry)
            };
            format!(
                "{} ({} evidence {}): only {} (under {:.0} %)",
                mapping.located(&key),
                s.kind,
                s.source,
                s.describe(),
                100.0 * s.limit()
            )
        })
        .collect();
    if suspect.is_empty() {
        return None;
    }
    Some(input_error(format!(
        "the evidence does not fit the messages' position space ({}.{}): {}. A value of \
         another position space (a global id beside a per-conversation number, or the \
         reverse) would write a wrong watermark for most members; map the position the \
         evidence uses as messages.id (or the counter that counts them), or accept the figure \
         with --accept-evidence-share",
        mapping.messages.table,
        mapping.messages.id,
        suspect.join("; ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_is_judged_only_on_enough_values() {
        let s = |measured, fits| Share {
            entry: 1,
            kind: "position".into(),
            source: "t.c".into(),
            measured,
            fits,
        };
        assert!(s(100, 89).suspect());
        assert!(!s(100, 90).suspect());
        assert!(!s(19, 0).suspect(), "too few values");
        assert!(s(20, 0).suspect());
        let counter = Share {
            kind: "counter".into(),
            ..s(100, 60)
        };
        assert!(!counter.suspect(), "counters drift: 50 % is their limit");
        assert!(Share {
            fits: 49,
            ..counter
        }
        .suspect());
        assert_eq!(s(0, 0).share(), 1.0);
        assert_eq!(
            s(120, 110).describe(),
            "91.7 % of 120 sampled values are positions of their conversation (or 0)"
        );
    }
}
