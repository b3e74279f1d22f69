//! The `flags` dimension (issue 29 row 11; semantics.md "Shape C": "a flag row belongs to the
//! message it names and to that message's conversation only"): read flags (shape C) where the
//! messages' position is unique only within a conversation (each conversation numbers its
//! messages 1, 2, 3, …), the flags table naming the conversation (`conversation = "conv_id"`
//! on the counter and on the evidence). A flag of position 2 in one conversation must never
//! count in another that also has a position 2. Compared with `model::flags` (its
//! `conv_flags`): watermarks, out-of-order counts, report rows and sums.

use std::collections::BTreeMap;

use proptest::prelude::*;
use sqlx::{AnyConnection, Row};

use super::keys::as_text;
use crate::common::model::flags::{self, Flagged, OutOfOrder};
use crate::common::model::{existing_watermark_inserts, sql_literal as lit};
use crate::common::model::{Key, Member, Msg, Watermark};
use crate::common::{csv, exec_all, Backend, TestDb};
use tidemark::db::Dsn;
use tidemark::mapping::Mapping;
use tidemark::stages::{audit, backfill, expand};
use tidemark::values::text;

/// Shape C over a flags table keyed by (user, conversation, position).
const MAPPING: &str = r#"
[messages]
table = "messages"
id = "id"
conversation = "conv_id"
sender = "sender_id"
countable = "is_deleted = 0 AND is_system = 0"

[members]
table = "members"
user = "user_id"
conversation = "conv_id"
active = "active = 1"
join_position = "join_position"

[counter]
shape = "read_flags"
table = "message_flags"
user = "user_id"
conversation = "conv_id"
message = "message_id"
read = "(this.flags & 1) = 1"

[contract]
drop = "nothing"

[[evidence]]
kind = "read_flags"
table = "message_flags"
user = "user_id"
conversation = "conv_id"
message = "message_id"
read = "(this.flags & 1) = 1"

[watermarks]
table = "read_watermarks"
"#;

const SCHEMA: [&str; 3] = [
    "CREATE TABLE messages (conv_id VARCHAR(20) NOT NULL, id BIGINT NOT NULL, sender_id VARCHAR(20) NULL, is_deleted INTEGER NOT NULL, is_system INTEGER NOT NULL, PRIMARY KEY (conv_id, id))",
    "CREATE TABLE members (conv_id VARCHAR(20) NOT NULL, user_id VARCHAR(20) NOT NULL, active INTEGER NOT NULL, join_position BIGINT NULL, PRIMARY KEY (conv_id, user_id))",
    "CREATE TABLE message_flags (user_id VARCHAR(20) NOT NULL, conv_id VARCHAR(20) NOT NULL, message_id BIGINT NOT NULL, flags INTEGER NOT NULL, PRIMARY KEY (user_id, conv_id, message_id))",
];

const CONVS: [&str; 3] = ["a", "b", "c"];
const USERS: [&str; 3] = ["u1", "u2", "u3"];

/// One case: the database and the watermarks the application wrote before the backfill.
#[derive(Debug, Clone)]
pub struct World {
    db: Flagged,
    existing: BTreeMap<Key, Watermark>,
}

/// Worlds of up to three conversations numbering their messages from 1, so that positions
/// repeat across them; a flag row per (user, conversation, position) drawn, some naming a
/// position the conversation does not have.
pub fn world() -> impl Strategy<Value = World> {
    let msgs = prop::collection::vec(
        (
            0..CONVS.len(),
            prop::option::weighted(0.9, 0..USERS.len()),
            prop::bool::weighted(0.15),
            prop::bool::weighted(0.05),
        ),
        1..12,
    );
    let members = prop::collection::vec(
        (
            prop::bool::weighted(0.85),
            prop::bool::weighted(0.8),
            prop::option::weighted(0.2, 0..4i64),
            prop::option::weighted(0.2, 0..6i64),
        ),
        CONVS.len() * USERS.len(),
    );
    let flags = prop::collection::vec(prop::option::weighted(0.8, any::<bool>()), 90);
    (msgs, members, flags).prop_map(|(msgs, members, flags)| {
        let mut db = Flagged::default();
        let mut next = [0i64; CONVS.len()];
        for (c, s, deleted, system) in msgs {
            next[c] += 1;
            db.msgs.push(Msg {
                conv: CONVS[c].to_string(),
                id: next[c],
                sender: s.map(|s| USERS[s].to_string()),
                deleted,
                system,
                stored: None,
            });
        }
        let mut existing = BTreeMap::new();
        for (k, (present, active, join, wm)) in members.into_iter().enumerate() {
            let key = (
                CONVS[k / USERS.len()].to_string(),
                USERS[k % USERS.len()].to_string(),
            );
            if present {
                db.members.insert(key.clone(), Member { active, join });
                if let Some(v) = wm.filter(|v| *v > 0) {
                    existing.insert(key, Watermark::application(v));
                }
            }
        }
        // Positions 1..=10 of every conversation: past its last message, a flag names nothing.
        for (i, read) in flags.into_iter().enumerate() {
            let Some(read) = read else { continue };
            let (c, rest) = (i / 30, i % 30);
            let (u, pos) = (rest / 10, rest % 10 + 1);
            db.conv_flags.insert(
                (USERS[u].to_string(), CONVS[c].to_string(), pos as i64),
                read,
            );
        }
        World { db, existing }
    })
}

fn inserts(w: &World) -> Vec<String> {
    let mut out: Vec<String> = SCHEMA.iter().map(|s| s.to_string()).collect();
    for m in &w.db.msgs {
        out.push(format!(
            "INSERT INTO messages (conv_id, id, sender_id, is_deleted, is_system) VALUES ({}, {}, {}, {}, {})",
            lit(&m.conv),
            m.id,
            m.sender.as_deref().map_or("NULL".into(), lit),
            i32::from(m.deleted),
            i32::from(m.system)
        ));
    }
    for ((c, u), mb) in &w.db.members {
        out.push(format!(
            "INSERT INTO members (conv_id, user_id, active, join_position) VALUES ({}, {}, {}, {})",
            lit(c),
            lit(u),
            i32::from(mb.active),
            mb.join.map_or("NULL".into(), |j| j.to_string())
        ));
    }
    for (i, ((u, c, id), read)) in w.db.conv_flags.iter().enumerate() {
        out.push(format!(
            "INSERT INTO message_flags (user_id, conv_id, message_id, flags) VALUES ({}, {}, {id}, {})",
            lit(u),
            lit(c),
            [0, 2, 8][i % 3] + i32::from(*read)
        ));
    }
    out
}

async fn watermarks(
    backend: Backend,
    conn: &mut AnyConnection,
) -> Result<BTreeMap<Key, Watermark>, String> {
    let rows = sqlx::query(&format!(
        "SELECT {}, {}, last_read_id, source, backfilled_id FROM read_watermarks",
        as_text(backend, "conversation_id"),
        as_text(backend, "user_id")
    ))
    .fetch_all(&mut *conn)
    .await
    .map_err(|e| format!("reading the watermarks: {e}"))?;
    let mut out = BTreeMap::new();
    for r in &rows {
        let t = |i| text(r, i).map_err(|e| format!("{e:#}"));
        let key = (t(0)?.unwrap_or_default(), t(1)?.unwrap_or_default());
        let wm = Watermark {
            last_read_id: r.try_get(2).map_err(|e| e.to_string())?,
            source: t(3)?,
            backfilled: r.try_get(4).map_err(|e| e.to_string())?,
        };
        out.insert(key, wm);
    }
    Ok(out)
}

/// One case on one backend: tidemark's stages (the library, as `read_flags` runs them), then
/// the model's answer.
pub async fn check(backend: Backend, w: &World) -> Result<(), TestCaseError> {
    let Some(db) = TestDb::create(backend, "diff_flags").await else {
        return Ok(());
    };
    let result = stages(backend, &db, w).await;
    db.cleanup().await;
    result
}

async fn stages(backend: Backend, db: &TestDb, w: &World) -> Result<(), TestCaseError> {
    let fail =
        |what: &str, e: &dyn std::fmt::Display| TestCaseError::fail(format!("{what}: {e:#}"));
    let dsn = Dsn::parse(&db.url).unwrap();
    let dialect = dsn.dialect;
    let mut conn = dsn.connect().await.unwrap();
    exec_all(&mut conn, &inserts(w)).await;
    let mapping = Mapping::parse(MAPPING, "<flags per conversation>").map_err(|e| {
        fail(
            "mapping (conversation = \"conv_id\" on read flags)",
            &format!("{e:#}"),
        )
    })?;
    expand::run(&mut conn, &mapping, dialect, false)
        .await
        .map_err(|e| fail("expand", &format!("{e:#}")))?;
    exec_all(&mut conn, &existing_watermark_inserts(&w.existing)).await;
    let opts = backfill::BackfillOptions {
        batch_size: 2,
        ..Default::default()
    };
    let b = backfill::run(&mut conn, &mapping, dialect, &opts)
        .await
        .map_err(|e| fail("backfill", &format!("{e:#}")))?;
    let f = b
        .read_flags
        .ok_or_else(|| TestCaseError::fail("backfill: no read_flags counts"))?;
    let (want_wms, want_ooo) = flags::backfill(&w.db, &w.existing);
    let got_wms = watermarks(backend, &mut conn)
        .await
        .map_err(|e| fail("watermarks", &e))?;
    prop_assert_eq!(&got_wms, &want_wms, "watermarks (got, want)");
    let got_ooo = OutOfOrder {
        members: f.members,
        read_out_of_order: f.read_out_of_order,
        unread_marked_read: f.unread_marked_read,
    };
    prop_assert_eq!(got_ooo, want_ooo, "out-of-order counts (got, want)");
    let tmp = tempfile::tempdir().unwrap();
    let report = tmp.path().join("r.csv");
    let a = audit::run(
        &mut conn,
        &mapping,
        dialect,
        &audit::AuditOptions {
            report: report.clone(),
            batch_size: 2,
            allow_empty: true,
            ..Default::default()
        },
    )
    .await
    .map_err(|e| fail("audit", &format!("{e:#}")))?;
    drop(conn);
    let mut rows = csv::read(&report).rows;
    rows.sort();
    let want = flags::audit(&w.db, &want_wms);
    prop_assert_eq!(&rows, &want.rows, "report rows (got, want)");
    prop_assert_eq!(
        (
            a.summary.rows_checked,
            a.summary.drifting_rows,
            a.summary.sum_abs_drift,
            a.summary.max_abs_drift
        ),
        (
            want.rows_checked,
            want.rows.len() as u64,
            want.sum_abs_drift,
            want.max_abs_drift
        ),
        "audit sums (checked, drifting, sum |drift|, largest |drift|)"
    );
    Ok(())
}
