//! The *default* workload of issue 30, built inside the database from a numbers table (no rows
//! travel), in the legacy schema so the scenario mapping applies unchanged.
//!
//! At scale 1: 50 000 conversations: 80 % direct messages (2 members, 30 messages), 19 % groups
//! (3–49 members, 60 messages), 1 % channels (200–1 000 members, 400 messages); about 627 000
//! members and 1 970 000 messages. Message ids are interleaved across conversations (message
//! `n` of conversation `c` has id `n × C + c`, `C` the number of conversations), as one global
//! auto-increment would give them. Nearly every member is 0–4 messages behind: 19 in 20 have a
//! read receipt there (position evidence), the others only a counter (counter evidence, any
//! value is true for them). One member in 97 left (counter 0); one in 10 of the groups and
//! channels joined half-way. The counters of receipt-backed members are the true unread number,
//! except 3 % of them, 2 too high.
//!
//! Scale `s` keeps the shares and sizes per conversation and makes `50 000 × s` conversations.

use super::large::{concat, text_type};
use super::Backend;

/// Conversations at scale 1.
pub const CONVERSATIONS: u64 = 50_000;

/// Conversations at `scale` (at least 100, so every class is present).
pub fn conversations(scale: f64) -> u64 {
    ((CONVERSATIONS as f64 * scale).round() as u64).max(100)
}

/// The statements that build the default workload (on an empty database).
pub fn generate_sql(backend: Backend, scale: f64) -> Vec<String> {
    let c = conversations(scale);
    let user = concat(
        backend,
        "'u'",
        &format!("CAST((t.c * 7 + t.j) % 100000 AS {})", text_type(backend)),
    );
    let mut out = tidemark::legacy_schema::schema_sql();
    out.push("CREATE TABLE tm_digits (d BIGINT NOT NULL)".into());
    out.push(
        "INSERT INTO tm_digits (d) VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9)".into(),
    );
    out.push("CREATE TABLE tm_n (i BIGINT NOT NULL PRIMARY KEY)".into());
    out.push(format!(
        "INSERT INTO tm_n (i) SELECT t.i FROM (SELECT a.d + 10 * b.d + 100 * e.d + 1000 * f.d \
         + 10000 * g.d + 100000 * h.d + 1 AS i \
         FROM tm_digits a, tm_digits b, tm_digits e, tm_digits f, tm_digits g, tm_digits h) t \
         WHERE t.i <= {}",
        c.max(1000)
    ));
    // Per conversation: members m, messages k, the join position's message number h.
    out.push(
        "CREATE TABLE tm_conv (c BIGINT NOT NULL PRIMARY KEY, m BIGINT NOT NULL, \
         k BIGINT NOT NULL, h BIGINT NOT NULL)"
            .into(),
    );
    out.push(format!(
        "INSERT INTO tm_conv (c, m, k, h) SELECT i, \
           CASE WHEN i % 100 = 0 THEN 200 + (i * 13) % 801 \
                WHEN i % 100 < 20 THEN 3 + (i * 7) % 47 ELSE 2 END, \
           CASE WHEN i % 100 = 0 THEN 400 WHEN i % 100 < 20 THEN 60 ELSE 30 END, \
           CASE WHEN i % 100 = 0 THEN 200 WHEN i % 100 < 20 THEN 30 ELSE 15 END \
         FROM tm_n WHERE i <= {c}"
    ));
    // Members j = 1..m of each conversation with their user id.
    out.push(
        "CREATE TABLE tm_mem (c BIGINT NOT NULL, j BIGINT NOT NULL, u VARCHAR(64) NOT NULL, \
         PRIMARY KEY (c, j))"
            .into(),
    );
    out.push(format!(
        "INSERT INTO tm_mem (c, j, u) SELECT t.c, t.j, {user} FROM \
         (SELECT cv.c AS c, n.i AS j FROM tm_conv cv JOIN tm_n n ON n.i <= cv.m) t"
    ));
    // Message n of conversation c: id n × C + c, sent by member (n × 7919 + c) % m + 1; the
    // first is a system message, one in 50 is deleted.
    out.push(format!(
        "INSERT INTO messages (conv_id, id, sender_id, is_deleted, is_system, created_at, unread_count) \
         SELECT cv.c, n.i * {c} + cv.c, t.u, CASE WHEN (n.i + cv.c) % 50 = 0 THEN 1 ELSE 0 END, \
                CASE WHEN n.i = 1 THEN 1 ELSE 0 END, n.i, NULL \
         FROM tm_conv cv JOIN tm_n n ON n.i <= cv.k \
         JOIN tm_mem t ON t.c = cv.c AND t.j = (n.i * 7919 + cv.c) % cv.m + 1"
    ));
    out.push(format!(
        "INSERT INTO members (conv_id, user_id, active, join_position) \
         SELECT t.c, t.u, CASE WHEN t.j % 97 = 0 THEN 0 ELSE 1 END, \
                CASE WHEN cv.m > 2 AND t.j % 10 = 9 THEN cv.h * {c} + cv.c ELSE NULL END \
         FROM tm_mem t JOIN tm_conv cv ON cv.c = t.c"
    ));
    // The receipt: (c + j) % 5 messages behind the conversation's last; none for 1 in 20.
    let behind = "(t.c + t.j) % 5";
    let receipt = format!("(cv.k - {behind}) * {c} + cv.c");
    let no_receipt = "(t.c * 3 + t.j) % 20 = 0";
    out.push(format!(
        "INSERT INTO read_receipts (conv_id, user_id, message_id) \
         SELECT t.c, t.u, {receipt} FROM tm_mem t JOIN tm_conv cv ON cv.c = t.c \
         WHERE NOT ({no_receipt})"
    ));
    out.push(format!(
        "INSERT INTO unread_counters (conv_id, user_id, unread_count) \
         SELECT t.c, t.u, CASE WHEN t.j % 97 = 0 THEN 0 WHEN {no_receipt} THEN {behind} \
           ELSE (SELECT COUNT(*) FROM messages m WHERE m.conv_id = t.c AND m.id > {receipt} \
                   AND m.sender_id <> t.u AND m.is_deleted = 0 AND m.is_system = 0) \
                + CASE WHEN (t.c * 11 + t.j * 3) % 100 < 3 THEN 2 ELSE 0 END END \
         FROM tm_mem t JOIN tm_conv cv ON cv.c = t.c"
    ));
    for table in ["tm_mem", "tm_conv", "tm_n", "tm_digits"] {
        out.push(format!("DROP TABLE {table}"));
    }
    out
}

/// Builds the default workload; returns (members, messages, conversations) as counted.
pub async fn generate(
    conn: &mut sqlx::AnyConnection,
    backend: Backend,
    scale: f64,
) -> anyhow::Result<(u64, u64, u64)> {
    use anyhow::Context;
    use sqlx::Row;
    for sql in generate_sql(backend, scale) {
        sqlx::raw_sql(&sql)
            .execute(&mut *conn)
            .await
            .with_context(|| format!("default workload: {sql}"))?;
    }
    let count = |table: &'static str| format!("SELECT CAST(COUNT(*) AS BIGINT) FROM {table}");
    let mut n = Vec::new();
    for table in ["members", "messages"] {
        let sql = match backend {
            // MariaDB has no CAST(… AS BIGINT).
            Backend::Mysql => format!("SELECT COUNT(*) FROM {table}"),
            _ => count(table),
        };
        let row = sqlx::query(&sql).fetch_one(&mut *conn).await?;
        n.push(row.try_get::<i64, _>(0)? as u64);
    }
    Ok((n[0], n[1], conversations(scale)))
}
