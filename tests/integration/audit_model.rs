//! The whole audit against a reference model (issue 13, "Fuzzing"): random small legacy
//! databases (conversations; members active or not, with or without a join position; messages
//! of their own, from a NULL sender, deleted or system; watermarks; stored counters, NULL and
//! negative included), both shapes, with and without `--cap`. The model computes the
//! recomputed unread and the class in plain Rust from `shared/spec/semantics.md`, and every row
//! of the CSV report must equal it; rows that do not drift must be absent.
//!
//! The model is `crate::common::model` (where semantics.md leaves a detail open, it says
//! what it takes from the scenarios).
//!
//! Runs: SQLite, `TIDEMARK_PROPTEST_CASES` cases (default 64; `PROPTEST_CASES` also works).
//! The same property on the servers, in a longer run: `TIDEMARK_PROPTEST_SERVERS=1 CI=true
//! cargo test --test integration audit_model:: -- --ignored` (PostgreSQL and MariaDB of
//! `common`, each case on a fresh database).

use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;
use sqlx::Connection;

use crate::common::bin::run;
use crate::common::model::{self, Key, Legacy, Watermark};
use crate::common::{csv, exec_all, Backend, TestDb};
use crate::scenario::{self, quote_literal, SHAPE_PER_MEMBER, SHAPE_PER_MESSAGE};

const USERS: i64 = 4;
const CONVS: i64 = 3;

#[derive(Debug, Clone)]
struct Msg {
    conv: i64,
    id: i64,
    sender: Option<i64>,
    deleted: bool,
    system: bool,
    /// The per_message counter.
    stored: Option<i64>,
}

#[derive(Debug, Clone, Copy)]
struct Member {
    active: bool,
    join: Option<i64>,
}

#[derive(Debug, Clone)]
struct World {
    per_message: bool,
    cap: Option<i64>,
    msgs: Vec<Msg>,
    /// (conv, user) -> member row.
    members: BTreeMap<(i64, i64), Member>,
    /// (conv, user) -> per_member counter row (its value may be NULL).
    counters: BTreeMap<(i64, i64), Option<i64>>,
    /// (conv, user) -> watermark row.
    watermarks: BTreeMap<(i64, i64), i64>,
}

fn user(u: i64) -> String {
    format!("u{u}")
}

fn world() -> impl Strategy<Value = World> {
    let msg_attrs = (
        prop::option::weighted(0.85, 0..USERS),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.1),
        prop::option::weighted(0.9, -1i64..6),
    );
    let conv = (
        prop::collection::btree_set(1i64..20, 0..8),
        prop::collection::vec(msg_attrs, 8),
        prop::collection::vec(
            prop::option::weighted(
                0.75,
                (
                    prop::bool::weighted(0.8),
                    prop::option::weighted(0.3, 0i64..20),
                ),
            ),
            USERS as usize,
        ),
        prop::collection::vec(
            prop::option::weighted(0.7, prop::option::weighted(0.9, -2i64..10)),
            USERS as usize,
        ),
        prop::collection::vec(prop::option::weighted(0.6, 0i64..21), USERS as usize),
    );
    (
        any::<bool>(),
        prop::option::weighted(0.4, 1i64..4),
        prop::collection::vec(conv, CONVS as usize),
    )
        .prop_map(|(per_message, cap, convs)| {
            let mut w = World {
                per_message,
                cap,
                msgs: Vec::new(),
                members: BTreeMap::new(),
                counters: BTreeMap::new(),
                watermarks: BTreeMap::new(),
            };
            for (c, (ids, attrs, members, counters, wms)) in convs.into_iter().enumerate() {
                let conv = c as i64 + 1;
                for (id, (sender, deleted, system, stored)) in ids.into_iter().zip(attrs) {
                    w.msgs.push(Msg {
                        conv,
                        id,
                        sender,
                        deleted,
                        system,
                        stored,
                    });
                }
                for u in 0..USERS {
                    let k = (conv, u);
                    if let Some((active, join)) = members[u as usize] {
                        w.members.insert(k, Member { active, join });
                    }
                    if let Some(stored) = counters[u as usize] {
                        w.counters.insert(k, stored);
                    }
                    if let Some(lrid) = wms[u as usize] {
                        w.watermarks.insert(k, lrid);
                    }
                }
            }
            w
        })
}

/// `w` in the terms of the model of semantics.md (`crate::common::model`): keys as written,
/// the watermarks the application's (source `application`), no receipts (the audit alone).
fn legacy(w: &World) -> (Legacy, BTreeMap<Key, Watermark>) {
    let key = |conv: i64, u: i64| (conv.to_string(), user(u));
    let l = Legacy {
        per_message: w.per_message,
        msgs: w
            .msgs
            .iter()
            .map(|m| model::Msg {
                conv: m.conv.to_string(),
                id: m.id,
                sender: m.sender.map(user),
                deleted: m.deleted,
                system: m.system,
                stored: m.stored,
            })
            .collect(),
        members: w
            .members
            .iter()
            .map(|(&(c, u), m)| {
                let member = model::Member {
                    active: m.active,
                    join: m.join,
                };
                (key(c, u), member)
            })
            .collect(),
        counters: w
            .counters
            .iter()
            .map(|(&(c, u), &v)| (key(c, u), v))
            .collect(),
        receipts: Vec::new(),
        ..Legacy::default()
    };
    let wms = w
        .watermarks
        .iter()
        .map(|(&(c, u), &lrid)| {
            let wm = Watermark {
                last_read_id: lrid,
                source: Some("application".into()),
                backfilled: None,
            };
            (key(c, u), wm)
        })
        .collect();
    (l, wms)
}

/// The report the model expects, rows sorted.
fn model(w: &World) -> Vec<Vec<String>> {
    let (l, wms) = legacy(w);
    model::audit(&l, &wms, w.cap).rows
}

/// The statements loading `w` (after `expand` created the watermark table).
fn data_sql(w: &World) -> (Vec<String>, Vec<String>) {
    let lit = |u: Option<i64>| u.map_or("NULL".to_string(), |u| quote_literal(&user(u)));
    let num = |v: Option<i64>| v.map_or("NULL".to_string(), |v| v.to_string());
    let mut legacy = Vec::new();
    for m in &w.msgs {
        legacy.push(format!(
            "INSERT INTO messages (conv_id, id, sender_id, is_deleted, is_system, unread_count) \
             VALUES ({}, {}, {}, {}, {}, {})",
            m.conv,
            m.id,
            lit(m.sender),
            m.deleted as i64,
            m.system as i64,
            num(m.stored)
        ));
    }
    for (&(conv, u), mb) in &w.members {
        legacy.push(format!(
            "INSERT INTO members (conv_id, user_id, active, join_position) VALUES ({conv}, {}, {}, {})",
            lit(Some(u)),
            mb.active as i64,
            num(mb.join)
        ));
    }
    for (&(conv, u), &stored) in &w.counters {
        legacy.push(format!(
            "INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES ({conv}, {}, {})",
            lit(Some(u)),
            num(stored)
        ));
    }
    let wms = w
        .watermarks
        .iter()
        .map(|(&(conv, u), &lrid)| {
            format!(
                "INSERT INTO {} (user_id, conversation_id, last_read_id, source) \
                 VALUES ({}, {conv}, {lrid}, 'application')",
                scenario::WATERMARK_TABLE,
                lit(Some(u))
            )
        })
        .collect();
    (legacy, wms)
}

/// Loads `w` into a fresh database on `backend`, runs the audit and compares the report.
async fn check(backend: Backend, w: &World) -> Result<(), TestCaseError> {
    let Some(db) = TestDb::create(backend, "model").await else {
        return Ok(());
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let shape = if w.per_message {
        SHAPE_PER_MESSAGE
    } else {
        SHAPE_PER_MEMBER
    };
    std::fs::write(d.join("m.toml"), scenario::mapping_toml(shape, false)).unwrap();
    let mut conn = db.connect().await;
    exec_all(&mut conn, &scenario::schema_sql()).await;
    let (legacy, wms) = data_sql(w);
    exec_all(&mut conn, &legacy).await;
    run(d, &["expand", "--database", &db.url, "--mapping", "m.toml"]).expect_code(0);
    exec_all(&mut conn, &wms).await;
    let _ = conn.close().await;
    let cap = w.cap.map(|c| c.to_string());
    let mut args = vec![
        "audit",
        "--database",
        &db.url,
        "--mapping",
        "m.toml",
        "--report",
        "r.csv",
        "--no-ledger",
        "--allow-empty",
        "--quiet",
        "--batch-size",
        "2",
    ];
    if let Some(c) = &cap {
        args.extend(["--cap", c]);
    }
    let want = model(w);
    // Every form of the audit statement (issue 30) gives the model's report.
    let mut result = Ok(());
    for form in ["one-pass", "probe", "auto"] {
        let mut with_form = args.clone();
        with_form.extend(["--audit-form", form]);
        let out = run(d, &with_form);
        result = compare(d, &want, out.code, &format!("{form} form: {}", out.stderr));
        if result.is_err() {
            break;
        }
    }
    db.cleanup().await;
    result
}

fn compare(
    d: &Path,
    want: &[Vec<String>],
    code: Option<i32>,
    stderr: &str,
) -> Result<(), TestCaseError> {
    let report = csv::try_read(&d.join("r.csv"))
        .map_err(|e| TestCaseError::fail(format!("no report ({code:?}): {e:#}\n{stderr}")))?;
    let mut got = report.rows;
    got.sort();
    prop_assert_eq!(&got, &want.to_vec(), "report rows (got, want); {}", stderr);
    let expected_code = if want.is_empty() { 0 } else { 1 };
    prop_assert_eq!(code, Some(expected_code), "exit code; stderr: {}", stderr);
    Ok(())
}

/// Runs the property on `backends`, each case on a fresh database.
fn property(backends: &'static [Backend], default_cases: u32) {
    model::run_property(world(), default_cases, |w| async move {
        for &b in backends {
            check(b, &w).await?;
        }
        Ok(())
    });
}

#[test]
fn the_audit_equals_the_model_on_sqlite() {
    property(&[Backend::Sqlite], 64);
}

/// The longer run on the servers: `TIDEMARK_PROPTEST_SERVERS=1` and `--ignored`.
#[test]
#[ignore = "long: set TIDEMARK_PROPTEST_SERVERS=1 and run with --ignored"]
fn the_audit_equals_the_model_on_the_servers() {
    if std::env::var_os("TIDEMARK_PROPTEST_SERVERS").is_none() {
        eprintln!("skipping: TIDEMARK_PROPTEST_SERVERS is not set");
        return;
    }
    property(&[Backend::Postgres, Backend::Mysql], 64);
}
