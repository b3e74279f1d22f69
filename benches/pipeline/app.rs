//! The application latency row (issue 30, "Gentle on a live application"): 4 writer tasks run
//! the application's transactions at a fixed total rate, alone, during a backfill and during an
//! audit, and the bench reports their p50/p99.
//!
//! Two transactions alternate, in conversations drawn from the first 2 000 (two of their
//! members each, one the sender, the other the reader):
//! - *send*: insert a message (a new id above every existing one), increment the other
//!   members' counters, and advance the sender's watermark (`tidemark sql app`'s
//!   `send_message_own_watermark`);
//! - *read*: the reader's forward-only mark-read to the newest id (`mark_read`), and their
//!   counter reset to 0.
//!
//! Each writer starts a transaction every `4 / rate` seconds (a late one starts at once, to
//! catch up). Latency is each transaction's own time, begin to commit, in milliseconds; the
//! rate actually reached is reported beside it (on a machine that cannot keep up, a latency
//! counted from the schedule would measure the backlog, which grows with the window's
//! length). Errors are counted, not retried.

use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use serde_json::{json, Value};
use sqlx::{AnyConnection, Connection, Row};

use tidemark::app_sql::{statements, AppStatement};
use tidemark::db::Dsn;
use tidemark::dialect::Dialect;

/// Writer tasks.
pub const WRITERS: usize = 4;

/// One conversation the writers use: (conversation, sender, reader).
type Pair = (i64, String, String);

/// The two application statements, their SQL and bind names.
struct Statements {
    send_own: AppStatement,
    mark_read: AppStatement,
    insert: String,
    increment: String,
    reset: String,
}

fn load_statements(dialect: Dialect) -> Result<Statements> {
    let all = statements(&super::mapping()?, dialect, 1)?;
    let find = |name: &str| {
        all.iter()
            .find(|s| s.name == name)
            .cloned()
            .ok_or_else(|| anyhow!("tidemark sql app has no {name} statement"))
    };
    let p = |n| dialect.placeholder(n);
    Ok(Statements {
        send_own: find("send_message_own_watermark")?,
        mark_read: find("mark_read")?,
        insert: format!(
            "INSERT INTO messages (conv_id, id, sender_id, is_deleted, is_system, created_at) \
             VALUES ({}, {}, {}, 0, 0, 1)",
            p(1),
            p(2),
            p(3)
        ),
        increment: format!(
            "UPDATE unread_counters SET unread_count = unread_count + 1 \
             WHERE conv_id = {} AND user_id <> {}",
            p(1),
            p(2)
        ),
        reset: format!(
            "UPDATE unread_counters SET unread_count = 0 WHERE conv_id = {} AND user_id = {}",
            p(1),
            p(2)
        ),
    })
}

/// Runs an application statement with its named binds (`user`, `conversation`, `message`).
async fn run_app(
    conn: &mut AnyConnection,
    st: &AppStatement,
    user: &str,
    conv: i64,
    message: i64,
) -> Result<()> {
    let mut q = sqlx::query(&st.sql);
    for name in &st.binds {
        q = match name.as_str() {
            "user" => q.bind(user.to_string()),
            "conversation" => q.bind(conv),
            "message" => q.bind(message),
            other => return Err(anyhow!("{}: unknown bind {other:?}", st.name)),
        };
    }
    q.execute(&mut *conn).await?;
    Ok(())
}

/// One transaction: `send` or read, in `pair`; `next` allocates message ids.
async fn transaction(
    conn: &mut AnyConnection,
    st: &Statements,
    pair: &Pair,
    send: bool,
    next: &AtomicI64,
) -> Result<()> {
    let (conv, sender, reader) = pair;
    let mut tx = conn.begin().await?;
    if send {
        let id = next.fetch_add(1, Ordering::Relaxed);
        sqlx::query(&st.insert)
            .bind(*conv)
            .bind(id)
            .bind(sender.clone())
            .execute(&mut *tx)
            .await?;
        sqlx::query(&st.increment)
            .bind(*conv)
            .bind(sender.clone())
            .execute(&mut *tx)
            .await?;
        run_app(&mut tx, &st.send_own, sender, *conv, id).await?;
    } else {
        let newest = next.load(Ordering::Relaxed) - 1;
        run_app(&mut tx, &st.mark_read, reader, *conv, newest).await?;
        sqlx::query(&st.reset)
            .bind(*conv)
            .bind(reader.clone())
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// What one writer measured: latencies (ms) and errors (with the first error's text).
struct WriterResult {
    latencies: Vec<f64>,
    errors: u64,
    first_error: Option<String>,
}

/// One writer: a transaction every `period` until `stop()` says so.
async fn writer(
    url: String,
    index: usize,
    period: Duration,
    pairs: Arc<Vec<Pair>>,
    next: Arc<AtomicI64>,
    stop: impl Fn() -> bool,
) -> Result<WriterResult> {
    let dsn = Dsn::parse(&url)?;
    let st = load_statements(dsn.dialect)?;
    let mut conn = dsn.connect().await?;
    let mut out = WriterResult {
        latencies: Vec::new(),
        errors: 0,
        first_error: None,
    };
    let mut ticks = tokio::time::interval(period);
    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ (index as u64 + 1);
    let mut n = 0u64;
    while !stop() {
        ticks.tick().await;
        let started = Instant::now();
        // xorshift: which conversation.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let pair = &pairs[(state % pairs.len() as u64) as usize];
        let result = transaction(&mut conn, &st, pair, n % 2 == 0, &next).await;
        out.latencies.push(started.elapsed().as_secs_f64() * 1000.0);
        if let Err(e) = result {
            out.errors += 1;
            out.first_error.get_or_insert_with(|| format!("{e:#}"));
        }
        n += 1;
    }
    let _ = conn.close().await;
    Ok(out)
}

/// The `q` quantile (0–1) of sorted values, nearest rank; None when empty.
pub fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

/// Runs the writers (the `app` phase child) at `rate` transactions per second in all, for
/// `secs` seconds, or (with `secs` 0) until `stop_file` exists. Returns `p50_ms`, `p99_ms`,
/// `max_ms`, `transactions`, `errors`, `first_error`, `rate` (achieved, per second).
pub async fn run(url: &str, rate: f64, secs: f64, stop_file: Option<&Path>) -> Result<Value> {
    let dsn = Dsn::parse(url)?;
    let mut conn = dsn.connect().await?;
    let rows = sqlx::query(
        "SELECT conv_id, MIN(user_id) AS a, MAX(user_id) AS b FROM members \
         GROUP BY conv_id ORDER BY conv_id LIMIT 2000",
    )
    .fetch_all(&mut conn)
    .await?;
    let pairs: Vec<Pair> = rows
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
        .collect::<Result<_>>()
        .context("the writers' conversations")?;
    if pairs.is_empty() {
        return Err(anyhow!("no members for the application writers"));
    }
    let max_id: i64 = sqlx::query("SELECT MAX(id) FROM messages")
        .fetch_one(&mut conn)
        .await?
        .try_get(0)?;
    let _ = conn.close().await;
    let next = Arc::new(AtomicI64::new(max_id + 1));
    let pairs = Arc::new(pairs);
    let period = Duration::from_secs_f64(WRITERS as f64 / rate.max(1.0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..WRITERS {
        let stop_file = stop_file.map(Path::to_path_buf);
        let stop = move || match &stop_file {
            Some(f) if secs <= 0.0 => f.exists(),
            _ => started.elapsed().as_secs_f64() >= secs,
        };
        tasks.push(writer(
            url.to_string(),
            i,
            period,
            pairs.clone(),
            next.clone(),
            stop,
        ));
    }
    // One task polls the 4 writers (sqlx's transaction futures are not `Send` for spawn);
    // each waits on its own connection, so they still overlap.
    let results = futures_util::future::join_all(tasks).await;
    let mut latencies = Vec::new();
    let mut errors = 0;
    let mut first_error = None;
    for r in results {
        let r = r?;
        latencies.extend(r.latencies);
        errors += r.errors;
        first_error = first_error.or(r.first_error);
    }
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort_by(f64::total_cmp);
    Ok(json!({
        "p50_ms": quantile(&latencies, 0.50),
        "p99_ms": quantile(&latencies, 0.99),
        "max_ms": latencies.last(),
        "transactions": latencies.len(),
        "errors": errors,
        "first_error": first_error,
        "rate": latencies.len() as f64 / elapsed.max(1e-9),
    }))
}
