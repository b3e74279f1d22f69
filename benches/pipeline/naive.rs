//! The naive loop (issue 11): what a script does without set-based SQL, one query per member
//! from a small client program (this bench, through sqlx: one round trip per query). The
//! backfill loop upserts each member's highest receipt (position evidence, forward-only); the
//! audit loop reads each counter row's recomputed unread with a correlated count and compares
//! it in the client.
//!
//! A loop that would take over [`FULL_RUN_LIMIT`] is sampled: members are visited in an
//! interleaved order (every 64th member first, then the next offset…), so the sample is spread
//! over the whole table, and the loop stops once [`SAMPLE_TIME`] has passed; its time is
//! extrapolated to all members and the table says so.

use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::{json, Value};
use sqlx::{AnyConnection, Row};

use tidemark::dialect::Dialect;

/// A loop projected to take longer than this is sampled and extrapolated.
pub const FULL_RUN_LIMIT: Duration = Duration::from_secs(60);

/// How long a sampled loop runs before extrapolating.
pub const SAMPLE_TIME: Duration = Duration::from_secs(15);

/// The interleaving stride of the visiting order.
const STRIDE: usize = 64;

/// `$n` on PostgreSQL, `?` elsewhere.
fn p(dialect: Dialect, n: usize) -> String {
    dialect.placeholder(n)
}

/// The per-member backfill statement: the member's highest receipt, upserted forward-only.
fn backfill_sql(dialect: Dialect) -> String {
    let select = format!(
        "SELECT {}, {}, t.m, 'position' FROM (SELECT MAX(message_id) AS m FROM read_receipts \
         WHERE conv_id = {} AND user_id = {}) t WHERE t.m IS NOT NULL",
        p(dialect, 1),
        p(dialect, 2),
        p(dialect, 3),
        p(dialect, 4)
    );
    let insert = "INSERT INTO read_watermarks (user_id, conversation_id, last_read_id, source)";
    match dialect {
        Dialect::Postgres => format!(
            "{insert} {select} ON CONFLICT (user_id, conversation_id) DO UPDATE \
             SET last_read_id = GREATEST(read_watermarks.last_read_id, EXCLUDED.last_read_id), source = EXCLUDED.source"
        ),
        Dialect::Mysql => format!(
            "{insert} {select} ON DUPLICATE KEY UPDATE \
             last_read_id = GREATEST(last_read_id, VALUES(last_read_id)), source = VALUES(source)"
        ),
        Dialect::Sqlite => format!(
            "{insert} {select} ON CONFLICT (user_id, conversation_id) DO UPDATE \
             SET last_read_id = MAX(last_read_id, excluded.last_read_id), source = excluded.source"
        ),
    }
}

/// The per-row audit statement: the stored counter and the recomputed unread of one counter row.
fn audit_sql(dialect: Dialect) -> String {
    format!(
        "SELECT k.unread_count AS stored, CASE WHEN mb.active = 1 THEN (SELECT COUNT(*) FROM messages m \
           WHERE m.conv_id = k.conv_id AND m.id > COALESCE(w.last_read_id, 0) \
             AND (mb.join_position IS NULL OR m.id > mb.join_position) \
             AND m.sender_id <> k.user_id AND m.is_deleted = 0 AND m.is_system = 0) ELSE 0 END AS rc \
         FROM unread_counters k \
         LEFT JOIN members mb ON mb.conv_id = k.conv_id AND mb.user_id = k.user_id \
         LEFT JOIN read_watermarks w ON w.conversation_id = k.conv_id AND w.user_id = k.user_id \
         WHERE k.conv_id = {} AND k.user_id = {}",
        p(dialect, 1),
        p(dialect, 2)
    )
}

/// The visiting order: every STRIDE-th index, then the next offset, so any prefix is spread
/// over the whole list.
fn interleaved(n: usize) -> impl Iterator<Item = usize> {
    (0..STRIDE.min(n.max(1))).flat_map(move |off| (off..n).step_by(STRIDE))
}

/// Runs the naive loop `job` (`backfill` or `audit`) and returns its figures: `loop_secs`
/// (measured or extrapolated), `measured_secs`, `sampled` (members visited), `members`, `extrapolated` (bool),
/// `drifting` (audit: drifting rows among those visited).
pub async fn run(conn: &mut AnyConnection, dialect: Dialect, job: &str) -> Result<Value> {
    let list_sql = if job == "backfill" {
        "SELECT conv_id, user_id FROM members ORDER BY conv_id, user_id"
    } else {
        "SELECT conv_id, user_id FROM unread_counters ORDER BY conv_id, user_id"
    };
    let keys: Vec<(i64, String)> = sqlx::query(list_sql)
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|r| Ok((r.try_get::<i64, _>(0)?, r.try_get::<String, _>(1)?)))
        .collect::<Result<_>>()?;
    let n = keys.len();
    let sql = if job == "backfill" {
        backfill_sql(dialect)
    } else {
        audit_sql(dialect)
    };
    let started = Instant::now();
    let mut visited = 0usize;
    let mut drifting = 0u64;
    let mut decided_full = false;
    for i in interleaved(n) {
        let (conv, user) = &keys[i];
        if job == "backfill" {
            sqlx::query(&sql)
                .bind(user.clone())
                .bind(*conv)
                .bind(*conv)
                .bind(user.clone())
                .execute(&mut *conn)
                .await?;
        } else {
            let row = sqlx::query(&sql)
                .bind(*conv)
                .bind(user.clone())
                .fetch_one(&mut *conn)
                .await?;
            let stored: Option<i64> = row
                .try_get::<Option<i32>, _>("stored")
                .map(|v| v.map(i64::from))
                .or_else(|_| row.try_get::<Option<i64>, _>("stored"))?;
            let rc: i64 = row.try_get("rc")?;
            if stored != Some(rc) {
                drifting += 1;
            }
        }
        visited += 1;
        if !decided_full && started.elapsed() >= SAMPLE_TIME {
            let projected = started.elapsed().as_secs_f64() * n as f64 / visited as f64;
            if projected > FULL_RUN_LIMIT.as_secs_f64() {
                break;
            }
            decided_full = true;
        }
    }
    let measured = started.elapsed().as_secs_f64();
    let extrapolated = visited < n;
    let secs = if extrapolated {
        measured * n as f64 / visited.max(1) as f64
    } else {
        measured
    };
    Ok(json!({
        "loop_secs": secs,
        "measured_secs": measured,
        "sampled": visited,
        "members": n,
        "extrapolated": extrapolated,
        "drifting": drifting,
    }))
}
