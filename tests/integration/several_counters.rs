//! Several counters per member (issue 22), against the independent model
//! (`common::model::audit_counter`): random worlds of messages (deleted, replies, senders
//! gone), members (left, joined late), application watermarks and three counters on one
//! table, an unread counter, a root-only counter (`countable = "this.is_reply = 0"`) and a
//! mention counter (a mentions table with self-mentions and mentions of non-members), audited
//! by tidemark (one report, its `counter` column) and compared row for row with the model, on
//! every backend (SQLite 48 worlds, each server 6).

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::common::model::{self, CounterModel, Key, Legacy, Member, Msg, Watermark};
use crate::common::{csv, exec_all, Backend, TestDb};
use tidemark::mapping::Mapping;
use tidemark::stages::{audit, expand};

const USERS: i64 = 4;
const CONVS: i64 = 2;
const NAMES: [&str; 3] = ["unread", "root_unread", "mentions"];

const SCHEMA: &[&str] = &[
    "CREATE TABLE messages (id BIGINT NOT NULL PRIMARY KEY, conv_id INTEGER NOT NULL, sender_id VARCHAR(8) NULL, is_deleted INTEGER NOT NULL, is_reply INTEGER NOT NULL)",
    "CREATE INDEX messages_conv_id ON messages (conv_id, id)",
    "CREATE TABLE members (conv_id INTEGER NOT NULL, user_id VARCHAR(8) NOT NULL, active INTEGER NOT NULL, join_pos BIGINT NULL, PRIMARY KEY (conv_id, user_id))",
    "CREATE TABLE counters (conv_id INTEGER NOT NULL, user_id VARCHAR(8) NOT NULL, unread_count BIGINT NULL, root_unread BIGINT NULL, mention_count BIGINT NULL, PRIMARY KEY (conv_id, user_id))",
    "CREATE TABLE mentions (message_id BIGINT NOT NULL, user_id VARCHAR(8) NOT NULL, PRIMARY KEY (message_id, user_id))",
];

const MAPPING: &str = r#"
[messages]
table = "messages"
id = "id"
conversation = "conv_id"
sender = "sender_id"
countable = "is_deleted = 0"

[members]
table = "members"
user = "user_id"
conversation = "conv_id"
active = "active = 1"
join_position = "join_pos"

[[counter]]
name = "unread"
shape = "per_member"
table = "counters"
user = "user_id"
conversation = "conv_id"
column = "unread_count"

[[counter]]
name = "root_unread"
shape = "per_member"
table = "counters"
user = "user_id"
conversation = "conv_id"
column = "root_unread"
countable = "this.is_reply = 0"

[[counter]]
name = "mentions"
shape = "per_member"
table = "counters"
user = "user_id"
conversation = "conv_id"
column = "mention_count"
mentions = { table = "mentions", message = "message_id", user = "user_id" }

[[evidence]]
kind = "counter"

[watermarks]
table = "read_watermarks"
"#;

#[derive(Debug, Clone)]
struct World {
    cap: Option<i64>,
    legacy: Legacy,
    replies: BTreeSet<i64>,
    mentions: BTreeSet<(i64, String)>,
    /// One stored map per counter, in NAMES' order.
    stored: [BTreeMap<Key, Option<i64>>; 3],
    wms: BTreeMap<Key, Watermark>,
}

fn user(u: i64) -> String {
    format!("u{u}")
}

fn world() -> impl Strategy<Value = World> {
    let value = || prop::option::weighted(0.9, -1i64..5);
    let msg = (
        prop::option::weighted(0.9, 0..USERS),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.4),
        prop::collection::btree_set(0..USERS + 1, 0..3),
    );
    let conv = (
        prop::collection::btree_set(1i64..16, 0..7),
        prop::collection::vec(msg, 7),
        prop::collection::vec(
            prop::option::weighted(
                0.8,
                (
                    prop::bool::weighted(0.85),
                    prop::option::weighted(0.25, 0i64..16),
                ),
            ),
            USERS as usize,
        ),
        prop::collection::vec(
            prop::option::weighted(0.8, (value(), value(), value())),
            USERS as usize,
        ),
        prop::collection::vec(prop::option::weighted(0.7, 0i64..17), USERS as usize),
    );
    (
        prop::option::weighted(0.25, 1i64..3),
        prop::collection::vec(conv, CONVS as usize),
    )
        .prop_map(|(cap, convs)| {
            let mut w = World {
                cap,
                legacy: Legacy::default(),
                replies: BTreeSet::new(),
                mentions: BTreeSet::new(),
                stored: Default::default(),
                wms: BTreeMap::new(),
            };
            for (c, (ids, attrs, members, counters, wms)) in convs.into_iter().enumerate() {
                let conv = c as i64 + 1;
                // Positions unique in the database: the mentions name a message by it.
                for (n, (sender, deleted, reply, mentioned)) in ids.into_iter().zip(attrs) {
                    let id = conv * 100 + n;
                    w.legacy.msgs.push(Msg {
                        conv: conv.to_string(),
                        id,
                        sender: sender.map(user),
                        deleted,
                        system: false,
                        stored: None,
                    });
                    if reply {
                        w.replies.insert(id);
                    }
                    for u in mentioned {
                        w.mentions.insert((id, user(u)));
                    }
                }
                for u in 0..USERS {
                    let k = (conv.to_string(), user(u));
                    if let Some((active, join)) = members[u as usize] {
                        let join = join.map(|j| conv * 100 + j);
                        w.legacy.members.insert(k.clone(), Member { active, join });
                    }
                    if let Some((a, b, m)) = counters[u as usize] {
                        for (i, v) in [a, b, m].into_iter().enumerate() {
                            w.stored[i].insert(k.clone(), v);
                        }
                    }
                    if let Some(lrid) = wms[u as usize] {
                        w.wms.insert(k, Watermark::application(conv * 100 + lrid));
                    }
                }
            }
            w.legacy.counters = w.stored[0].clone();
            w
        })
}

/// The model's rows: each counter's, in one sorted list.
fn model_rows(w: &World) -> Vec<Vec<String>> {
    let all = |_: &Msg| true;
    let roots = |m: &Msg| !w.replies.contains(&m.id);
    let mut rows = Vec::new();
    for (i, name) in NAMES.iter().enumerate() {
        let c = CounterModel {
            name,
            stored: &w.stored[i],
            only: if i == 1 { &roots } else { &all },
            mentions: (i == 2).then_some(&w.mentions),
        };
        rows.extend(model::audit_counter(&w.legacy, &w.wms, w.cap, &c).rows);
    }
    rows.sort();
    rows
}

fn num(v: Option<i64>) -> String {
    v.map_or("NULL".into(), |v| v.to_string())
}

fn data_sql(w: &World) -> Vec<String> {
    let mut out = Vec::new();
    for m in &w.legacy.msgs {
        out.push(format!(
            "INSERT INTO messages (id, conv_id, sender_id, is_deleted, is_reply) VALUES ({}, {}, {}, {}, {})",
            m.id,
            m.conv,
            m.sender.as_ref().map_or("NULL".into(), |s| format!("'{s}'")),
            i32::from(m.deleted),
            i32::from(w.replies.contains(&m.id))
        ));
    }
    for ((c, u), mb) in &w.legacy.members {
        out.push(format!(
            "INSERT INTO members (conv_id, user_id, active, join_pos) VALUES ({c}, '{u}', {}, {})",
            i32::from(mb.active),
            num(mb.join)
        ));
    }
    for (c, u) in w.stored[0].keys() {
        let k = (c.clone(), u.clone());
        out.push(format!(
            "INSERT INTO counters (conv_id, user_id, unread_count, root_unread, mention_count) VALUES ({c}, '{u}', {}, {}, {})",
            num(w.stored[0][&k]),
            num(w.stored[1][&k]),
            num(w.stored[2][&k])
        ));
    }
    for (id, u) in &w.mentions {
        out.push(format!(
            "INSERT INTO mentions (message_id, user_id) VALUES ({id}, '{u}')"
        ));
    }
    out
}

async fn check(backend: Backend, w: &World) -> Result<(), TestCaseError> {
    let Some(db) = TestDb::create(backend, "several").await else {
        return Ok(());
    };
    let mapping = Mapping::parse(MAPPING, "several.toml").unwrap();
    let dialect = tidemark::db::Dsn::parse(&db.url).unwrap().dialect;
    let mut conn = db.connect().await;
    let schema: Vec<String> = SCHEMA.iter().map(|s| s.to_string()).collect();
    exec_all(&mut conn, &schema).await;
    exec_all(&mut conn, &data_sql(w)).await;
    expand::run(&mut conn, &mapping, dialect, false)
        .await
        .unwrap();
    let wms: Vec<String> = w
        .wms
        .iter()
        .map(|((c, u), wm)| {
            format!(
                "INSERT INTO read_watermarks (user_id, conversation_id, last_read_id) VALUES ('{u}', {c}, {})",
                wm.last_read_id
            )
        })
        .collect();
    exec_all(&mut conn, &wms).await;
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.csv");
    let s = audit::run(
        &mut conn,
        &mapping,
        dialect,
        &audit::AuditOptions {
            cap: w.cap,
            report: report.clone(),
            ledger: false,
            allow_empty: true,
            batch_size: 2,
            ..Default::default()
        },
    )
    .await
    .map_err(|e| TestCaseError::fail(format!("audit: {e:#}")))?
    .summary;
    let mut got = csv::read(&report).rows;
    got.sort();
    let want = model_rows(w);
    let result = (|| {
        prop_assert_eq!(&got, &want, "report rows (got, want)");
        let n = w.stored[0].len() as u64;
        prop_assert_eq!(s.rows_checked, 3 * n);
        for (i, c) in s.counters.iter().enumerate() {
            prop_assert_eq!(c.name.as_str(), NAMES[i]);
            prop_assert_eq!(c.rows_checked, n);
            let drifting = want.iter().filter(|r| r[8] == NAMES[i]).count() as u64;
            prop_assert_eq!(c.drifting_rows, drifting);
            prop_assert_eq!(c.passed, drifting == 0);
        }
        prop_assert_eq!(s.passed, want.is_empty());
        Ok(())
    })();
    drop(conn);
    db.cleanup().await;
    result
}

fn property(backends: &'static [Backend], default_cases: u32) {
    model::run_property(world(), default_cases, |w| async move {
        for &b in backends {
            check(b, &w).await?;
        }
        Ok(())
    });
}

#[test]
fn several_counters_equal_the_model_on_sqlite() {
    property(&[Backend::Sqlite], 48);
}

#[test]
fn several_counters_equal_the_model_on_the_servers() {
    property(&[Backend::Postgres, Backend::Mysql], 6);
}
