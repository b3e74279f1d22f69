//! The application during the demo's dual-write period: messages, reads and counters written
//! as the application writes them, with the faults of the legacy counter injected.

use anyhow::{Context, Result};
use sqlx::{AnyConnection, Executor};
use std::collections::BTreeMap;

use crate::app_sql::{self, AppStatement};
use crate::dialect::Dialect;
use crate::mapping::Mapping;

/// Faults the dual-write period injects, each into a new direct conversation of its own:
/// (class it must be found as, how many).
const DUAL_WRITE_FAULTS: &[(&str, u64)] = &[
    ("overcount", 3),
    ("cleared", 3),
    ("undercount", 3),
    ("negative", 2),
];

/// What the dual-write period did.
pub(super) struct DualWrite {
    pub(super) conversations: u64,
    pub(super) messages: u64,
    pub(super) reads: u64,
    pub(super) faults: BTreeMap<String, u64>,
}

/// The application during the dual-write period, on new direct conversations (ids above every
/// generated one) between a sender and a reader: each message and its counter increment in one
/// transaction, a read moving the watermark forward-only and clearing the counter. Each
/// conversation carries at most one fault, so its class is known:
/// - overcount: one message delivered twice (the counter incremented twice);
/// - cleared: "mark all read" cleared the counter after a new message had arrived;
/// - undercount: a lost update (read-modify-write) dropped one increment;
/// - negative: an unguarded decrement below zero after the reader had read everything.
///
/// The rest of the conversations are written correctly. A read is the statement `tidemark sql
/// app` gives the application (`mark_read`, the forward-only upsert every writer uses).
pub(super) async fn dual_write(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
) -> Result<DualWrite> {
    let base: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(conv_id), 0) FROM members")
        .fetch_one(&mut *conn)
        .await?;
    let upsert = app_sql::statements(mapping, dialect, 1)?
        .into_iter()
        .find(|s| s.name == "mark_read")
        .context("tidemark sql app has no mark_read statement")?;
    let mut plan: Vec<Option<&str>> = Vec::new();
    for (class, n) in DUAL_WRITE_FAULTS {
        plan.extend(std::iter::repeat_n(Some(*class), *n as usize));
    }
    plan.extend(std::iter::repeat_n(None, 20));
    let mut out = DualWrite {
        conversations: 0,
        messages: 0,
        reads: 0,
        faults: BTreeMap::new(),
    };
    for (i, fault) in plan.iter().enumerate() {
        let conv = base + 1 + i as i64;
        let (sender, reader) = (format!("dw{i}a"), format!("dw{i}b"));
        for sql in [
            format!("INSERT INTO members (conv_id, user_id, active) VALUES ({conv}, '{sender}', 1), ({conv}, '{reader}', 1)"),
            format!("INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES ({conv}, '{sender}', 0), ({conv}, '{reader}', 0)"),
        ] {
            conn.execute(sql.as_str()).await?;
        }
        out.conversations += 1;
        let mut next = 0i64;
        let mut send = async |conn: &mut AnyConnection, increments: i64| -> Result<i64> {
            next += 1;
            let id = next;
            exec_tx(conn, dialect, &[
                format!("INSERT INTO messages (conv_id, id, sender_id) VALUES ({conv}, {id}, '{sender}')"),
                format!("UPDATE unread_counters SET unread_count = unread_count + {increments} WHERE conv_id = {conv} AND user_id = '{reader}'"),
            ])
            .await?;
            Ok(id)
        };
        // Three messages, the reader reads them, two more arrive.
        for _ in 0..3 {
            send(conn, 1).await?;
        }
        let read_upto = 3;
        read(conn, dialect, &upsert, conv, &reader, read_upto).await?;
        out.reads += 1;
        match fault {
            Some("overcount") => {
                send(conn, 2).await?; // delivered twice
                send(conn, 1).await?;
            }
            Some("cleared") => {
                send(conn, 1).await?;
                send(conn, 1).await?;
                // A "mark all read" from a stale screen: the counter is cleared, the watermark
                // stays where that screen was.
                conn.execute(format!("UPDATE unread_counters SET unread_count = 0 WHERE conv_id = {conv} AND user_id = '{reader}'").as_str())
                    .await?;
            }
            Some("undercount") => {
                send(conn, 1).await?;
                send(conn, 1).await?;
                send(conn, 0).await?; // the lost update
            }
            Some("negative") => {
                // A "message deleted" decrement after the reader had read everything.
                conn.execute(format!("UPDATE unread_counters SET unread_count = unread_count - 1 WHERE conv_id = {conv} AND user_id = '{reader}'").as_str())
                    .await?;
            }
            _ => {
                send(conn, 1).await?;
                send(conn, 1).await?;
            }
        }
        out.messages += next as u64;
        if let Some(class) = fault {
            *out.faults.entry(class.to_string()).or_default() += 1;
        }
    }
    Ok(out)
}

/// A read: the watermark moves forward-only and the counter is cleared, in one transaction.
async fn read(
    conn: &mut AnyConnection,
    dialect: Dialect,
    upsert: &AppStatement,
    conv: i64,
    user: &str,
    upto: i64,
) -> Result<()> {
    begin(conn, dialect).await?;
    let mut q = sqlx::query(&upsert.sql);
    for name in &upsert.binds {
        q = match name.as_str() {
            "user" => q.bind(user.to_string()),
            "conversation" => q.bind(conv),
            "message" => q.bind(upto),
            other => anyhow::bail!("mark_read binds {other:?}, which the demo does not know"),
        };
    }
    q.execute(&mut *conn).await?;
    conn.execute(format!("UPDATE unread_counters SET unread_count = 0 WHERE conv_id = {conv} AND user_id = '{user}'").as_str())
        .await?;
    conn.execute("COMMIT").await?;
    Ok(())
}

/// Opens a write transaction of the application.
async fn begin(conn: &mut AnyConnection, dialect: Dialect) -> Result<()> {
    conn.execute(dialect.admin().demo_begin_write()).await?;
    Ok(())
}

/// Runs `statements` in one write transaction.
async fn exec_tx(conn: &mut AnyConnection, dialect: Dialect, statements: &[String]) -> Result<()> {
    begin(conn, dialect).await?;
    for s in statements {
        conn.execute(s.as_str()).await?;
    }
    conn.execute("COMMIT").await?;
    Ok(())
}
