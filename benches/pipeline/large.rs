//! The *large channels* workload and the reference statements (issue 11).
//!
//! Large channels: 20 channels, each with `2000 × scale` members and `10 000 × scale`
//! messages. Every other member has never read (no receipt, a counter that no watermark can
//! represent, so the backfill leaves them at 0 and the audit counts every message for them);
//! the others read near the end (up to 199 messages behind). One member in 50 left, one in 10
//! joined half-way. Built inside the database from a numbers table (no rows travel).
//!
//! The reference statements are what a DBA would write by hand, run through the database's
//! own command-line client (`psql`, `mariadb`, `sqlite3`) at its default settings, rows
//! counted: for the backfill one `INSERT … SELECT … ON CONFLICT` (position evidence, the
//! highest receipt per member), for the audit one correlated `COUNT(*)` per counter row (per
//! member, or per message for the per-message shape).

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use sqlx::AnyConnection;

use super::Backend;

/// Channels of the large workload.
pub const CHANNELS: u64 = 20;

/// Members and messages per channel at `scale`.
pub fn per_channel(scale: f64) -> (u64, u64) {
    let members = ((2000.0 * scale).round() as u64).max(2);
    let messages = ((10_000.0 * scale).round() as u64).clamp(2, 99_999);
    (members, messages)
}

/// `a || b` in the backend's spelling (MariaDB reads `||` as OR).
pub fn concat(backend: Backend, a: &str, b: &str) -> String {
    match backend {
        Backend::Mysql => format!("CONCAT({a}, {b})"),
        _ => format!("({a} || {b})"),
    }
}

/// The statements that build the large-channels database (on an empty one).
pub fn generate_sql(backend: Backend, scale: f64) -> Vec<String> {
    let (m, k) = per_channel(scale);
    let user = |n: &str| {
        concat(
            backend,
            "'u'",
            &format!("CAST({n} AS {})", text_type(backend)),
        )
    };
    let mut out = tidemark::legacy_schema::schema_sql();
    out.push("CREATE TABLE tm_digits (d BIGINT NOT NULL)".into());
    out.push(
        "INSERT INTO tm_digits (d) VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9)".into(),
    );
    out.push("CREATE TABLE tm_n (i BIGINT NOT NULL PRIMARY KEY)".into());
    out.push(
        "INSERT INTO tm_n (i) SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d + 1 \
         FROM tm_digits a, tm_digits b, tm_digits c, tm_digits e, tm_digits f"
            .into(),
    );
    out.push(format!(
        "INSERT INTO messages (conv_id, id, sender_id, is_deleted, is_system, created_at, unread_count) \
         SELECT c.i, n.i, {}, CASE WHEN n.i % 40 = 0 THEN 1 ELSE 0 END, \
                CASE WHEN n.i % 97 = 0 THEN 1 ELSE 0 END, n.i, NULL \
         FROM tm_n c, tm_n n WHERE c.i <= {CHANNELS} AND n.i <= {k}",
        user(&format!("(n.i * 7919) % {m} + 1"))
    ));
    out.push(format!(
        "INSERT INTO members (conv_id, user_id, active, join_position) \
         SELECT c.i, {}, CASE WHEN j.i % 50 = 0 THEN 0 ELSE 1 END, \
                CASE WHEN j.i % 10 = 3 THEN {} ELSE NULL END \
         FROM tm_n c, tm_n j WHERE c.i <= {CHANNELS} AND j.i <= {m}",
        user("j.i"),
        k / 2
    ));
    out.push(format!(
        "INSERT INTO read_receipts (conv_id, user_id, message_id) \
         SELECT c.i, {}, {k} - j.i % 200 \
         FROM tm_n c, tm_n j WHERE c.i <= {CHANNELS} AND j.i <= {m} AND j.i % 2 = 1",
        user("j.i")
    ));
    out.push(format!(
        "INSERT INTO unread_counters (conv_id, user_id, unread_count) \
         SELECT c.i, {}, CASE WHEN j.i % 2 = 1 THEN j.i % 200 ELSE {} END \
         FROM tm_n c, tm_n j WHERE c.i <= {CHANNELS} AND j.i <= {m}",
        user("j.i"),
        k + 1
    ));
    out.push("DROP TABLE tm_n".into());
    out.push("DROP TABLE tm_digits".into());
    out
}

pub fn text_type(backend: Backend) -> &'static str {
    match backend {
        Backend::Mysql => "CHAR",
        _ => "TEXT",
    }
}

/// Builds the large-channels database; returns (members, messages).
pub async fn generate(
    conn: &mut AnyConnection,
    backend: Backend,
    scale: f64,
) -> Result<(u64, u64)> {
    for sql in generate_sql(backend, scale) {
        sqlx::raw_sql(&sql)
            .execute(&mut *conn)
            .await
            .with_context(|| format!("large workload: {sql}"))?;
    }
    let (m, k) = per_channel(scale);
    Ok((CHANNELS * m, CHANNELS * k))
}

/// The hand-written backfill: the highest receipt of each member, one upsert, forward-only.
pub fn reference_backfill(backend: Backend) -> String {
    let select = "SELECT r.user_id, r.conv_id, MAX(r.message_id), 'position' FROM read_receipts r";
    match backend {
        Backend::Postgres => format!(
            "INSERT INTO read_watermarks (user_id, conversation_id, last_read_id, source) {select} \
             GROUP BY r.conv_id, r.user_id ON CONFLICT (user_id, conversation_id) DO UPDATE \
             SET last_read_id = GREATEST(read_watermarks.last_read_id, EXCLUDED.last_read_id), source = EXCLUDED.source"
        ),
        Backend::Mysql => format!(
            "INSERT INTO read_watermarks (user_id, conversation_id, last_read_id, source) {select} \
             GROUP BY r.conv_id, r.user_id ON DUPLICATE KEY UPDATE \
             last_read_id = GREATEST(last_read_id, VALUES(last_read_id)), source = VALUES(source)"
        ),
        Backend::Sqlite => format!(
            "INSERT INTO read_watermarks (user_id, conversation_id, last_read_id, source) {select} \
             WHERE 1 GROUP BY r.conv_id, r.user_id ON CONFLICT (user_id, conversation_id) DO UPDATE \
             SET last_read_id = MAX(last_read_id, excluded.last_read_id), source = excluded.source"
        ),
    }
}

/// The hand-written audit: per counter row, a correlated `COUNT(*)` of the countable messages
/// after the watermark (and the join position), not the member's own; the drifting rows out.
pub fn reference_audit() -> String {
    "SELECT t.conv_id, t.user_id, t.unread_count, t.rc FROM (\
       SELECT k.conv_id, k.user_id, k.unread_count, \
         CASE WHEN mb.active = 1 THEN (SELECT COUNT(*) FROM messages m \
           WHERE m.conv_id = k.conv_id AND m.id > COALESCE(w.last_read_id, 0) \
             AND (mb.join_position IS NULL OR m.id > mb.join_position) \
             AND m.sender_id <> k.user_id AND m.is_deleted = 0 AND m.is_system = 0) ELSE 0 END AS rc \
       FROM unread_counters k \
       LEFT JOIN members mb ON mb.conv_id = k.conv_id AND mb.user_id = k.user_id \
       LEFT JOIN read_watermarks w ON w.conversation_id = k.conv_id AND w.user_id = k.user_id) t \
     WHERE t.unread_count IS NULL OR t.unread_count <> t.rc"
        .to_string()
}

/// The hand-written audit of the per-message shape (seed 003): per message, a correlated
/// `COUNT(*)` of the active members other than the sender who joined before it and whose
/// watermark is below it (0 for a message that is not countable); the drifting rows out.
pub fn reference_audit_per_message() -> String {
    "SELECT t.conv_id, t.id, t.unread_count, t.rc FROM (\
       SELECT m.conv_id, m.id, m.unread_count, \
         CASE WHEN m.is_deleted = 0 AND m.is_system = 0 THEN (SELECT COUNT(*) FROM members mb \
           LEFT JOIN read_watermarks w ON w.conversation_id = mb.conv_id AND w.user_id = mb.user_id \
           WHERE mb.conv_id = m.conv_id AND mb.active = 1 AND mb.user_id <> m.sender_id \
             AND COALESCE(w.last_read_id, 0) < m.id \
             AND (mb.join_position IS NULL OR mb.join_position < m.id)) ELSE 0 END AS rc \
       FROM messages m) t \
     WHERE t.unread_count IS NULL OR t.unread_count <> t.rc"
        .to_string()
}

/// One run of a statement through the database's own client.
#[derive(Debug, Clone, Copy)]
pub struct ClientRun {
    /// Wall time, seconds (the time limit when `stopped`).
    pub secs: f64,
    /// Rows the statement returned (lines the client printed).
    pub rows: u64,
    /// The statement was stopped at the time limit: `secs` is a lower bound.
    pub stopped: bool,
}

/// Runs `sql` through the backend's own client against `url` (the bench database); its rows
/// are counted, not kept. With `limit` (seconds) the server stops the statement at that time
/// (PostgreSQL `statement_timeout`, MariaDB `max_statement_time`; the `sqlite3` process is
/// killed) and the run is marked `stopped`. Errors: the client is missing or the statement
/// fails otherwise.
pub fn run_client(backend: Backend, url: &str, sql: &str, limit: Option<f64>) -> Result<ClientRun> {
    let sql = match (backend, limit) {
        (Backend::Postgres, Some(l)) => {
            format!(
                "SET statement_timeout = {}; {sql}",
                (l * 1000.0).round() as u64
            )
        }
        (Backend::Mysql, Some(l)) => format!("SET SESSION max_statement_time = {l}; {sql}"),
        _ => sql.to_string(),
    };
    let mut cmd = match backend {
        Backend::Postgres => {
            let mut c = Command::new("psql");
            c.args([
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-d",
                url,
                "-c",
                &sql,
            ]);
            c
        }
        Backend::Mysql => {
            let u = url::Url::parse(url)?;
            let mut c = Command::new("mariadb");
            c.arg("-N")
                .arg("-B")
                .arg("-h")
                .arg(u.host_str().unwrap_or("127.0.0.1"))
                .arg("-P")
                .arg(u.port().unwrap_or(3306).to_string())
                .arg("-u")
                .arg(u.username());
            if let Some(p) = u.password() {
                c.arg(format!("-p{p}"));
            }
            c.arg(u.path().trim_start_matches('/')).arg("-e").arg(&sql);
            c
        }
        Backend::Sqlite => {
            let path = url
                .trim_start_matches("sqlite://")
                .trim_start_matches("sqlite:")
                .split('?')
                .next()
                .unwrap_or_default()
                .to_string();
            let mut c = Command::new("sqlite3");
            c.arg(path).arg(&sql);
            c
        }
    };
    let started = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting the {} client", backend.name()))?;
    // Drained on threads, so a full pipe never stalls the client while it is timed.
    let stdout = child.stdout.take().context("client stdout")?;
    let rows = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(|l| l.ok())
            .filter(|l| !l.trim().is_empty())
            .count() as u64
    });
    let mut stderr = child.stderr.take().context("client stderr")?;
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let mut killed = false;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        // The server stops the statement itself; the client is killed only when it does not
        // (SQLite, or a server that ignores the setting), a few seconds later.
        let grace = if backend == Backend::Sqlite { 0.0 } else { 5.0 };
        if limit.is_some_and(|l| started.elapsed().as_secs_f64() > l + grace) {
            let _ = child.kill();
            killed = true;
            break child.wait()?;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let secs = started.elapsed().as_secs_f64();
    let rows = rows.join().unwrap_or(0);
    let errors = errors.join().unwrap_or_default();
    let timed_out =
        killed || errors.contains("statement timeout") || errors.contains("max_statement_time");
    if timed_out {
        return Ok(ClientRun {
            secs: limit.unwrap_or(secs),
            rows,
            stopped: true,
        });
    }
    if !status.success() {
        bail!("{} client failed: {}", backend.name(), errors.trim());
    }
    Ok(ClientRun {
        secs,
        rows,
        stopped: false,
    })
}
