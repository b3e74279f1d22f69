//! The differential test (issue 25): random small legacy databases through `expand`,
//! `backfill` and `audit` on every backend, compared with the independent model of
//! semantics.md (`crate::common::model`): every watermark (value, `source`, `backfilled_id`),
//! every report row (its class and `watermark_source` included) and the audit's sums.
//!
//! What the worlds hold, to find what the scenarios do not: text keys with odd characters
//! (quotes, spaces, accents, `%`, `_`, upper and lower case) in a different collation per table
//! (PostgreSQL `C` or ICU `en-x-icu`; MariaDB `utf8mb4_bin` or `utf8mb4_general_ci`; SQLite
//! `BINARY` or `NOCASE`; keys are chosen so that no two are equal in any of them, only their
//! order differs); message positions interleaved across conversations; NULL senders; members
//! who left or joined late; receipts, several per member; counters NULL, negative, 0, above the
//! history and at the 64-bit edge (`i64::MAX`); watermarks the application wrote before the
//! backfill (forward-only: the backfill never moves them back); `--cap`; both shapes; and now
//! and then a duplicated member row, which every stage must refuse (exit 2) rather than count
//! twice; and, in per-member worlds, messages only some readers count (issue 22: restricted
//! messages with the members who count them, messages addressed to one reader).
//!
//! Issue 29 adds the dimensions that found its defects, each switchable with
//! `TIDEMARK_DIFF_DIMENSIONS` (`all`, the default; `none`: the worlds above only; or a comma
//! list; [`dims`]): time columns of both kinds in a database zone other than UTC and SQLite
//! text times in mixed ISO forms ([`time`]), MariaDB zero dates, positions near and below
//! zero (refused, exit 2) and receipts <= 0 (no position), read flags over per-conversation
//! positions ([`flags`]), the counter's forms (`column`, `value`, `rows`, `combine =
//! "single"`) and duplicate counter rows in each (refused, exit 2), integer keys of mixed
//! types and uuid keys ([`keys`]), and restricted messages the legacy counter counted
//! (`excluded_counted`).
//!
//! Runs: `TIDEMARK_PROPTEST_CASES` cases per backend (default 24 on SQLite and 8 on each
//! server; the per-conversation flags worlds half as many); a longer run:
//! `TIDEMARK_PROPTEST_CASES=200 cargo test --test integration differential::`. A failure
//! prints the world, the model's answer and tidemark's.

mod audit_forms;
mod dims;
mod flags;
mod keys;
mod time;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use proptest::prelude::*;
use sqlx::Connection;

use crate::common::bin::run;
use crate::common::model::{self, Key, Legacy, Member, Msg, Watermark};
use crate::common::{exec_all, Backend, TestDb};
use crate::scenario::{self, quote_literal};
use audit_forms::audit_equals_model;
use dims::{issue29_draw, mapping, refusals, with_issue29, Dims, Form};
use keys::KeyKind;

/// Conversation keys: no two equal under any collation used, differently ordered by them.
const CONVS: &[&str] = &[
    "a", "B", "c", "D", "é", "F", "x y", "o'k", "Z9", "ñ", "_u", "%",
];
/// User keys, likewise.
const USERS: &[&str] = &["u1", "U2", "ü3", "o'4", "v 5"];
/// Counter values worth trying: NULL-free small ones, negatives, and the 64-bit edge.
const EDGE_COUNTERS: &[i64] = &[-1, 0, 1, 2, 3, 5, 9, 40, i64::MAX];

/// One generated case.
#[derive(Debug, Clone)]
struct World {
    legacy: Legacy,
    /// Watermarks the application wrote before the backfill.
    existing: BTreeMap<Key, Watermark>,
    /// A member row written twice (the stages must refuse it).
    duplicate_member: Option<Key>,
    cap: Option<i64>,
    /// Per table (messages, members, counters, receipts): which of the backend's two
    /// collations its key columns use.
    collations: [bool; 4],
    /// The mapping says which messages count for some readers only (issue 22, per member):
    /// `legacy.readers` then holds them.
    readers: bool,
    /// How the keys are typed (`keys`).
    keys: KeyKind,
    /// Creation and visit times (`time`).
    times: Option<time::Times>,
    /// How the mapping reads the counter (`forms`).
    form: Form,
    /// A counter row written twice (`duplicates`; the stages must refuse it).
    duplicate_counter: Option<Key>,
}

/// Issue 22's draws: per message whether it is restricted and to whom it is addressed (an
/// index into USERS), per (conversation, user) whether restricted messages count for them.
type ReaderDraw = (Vec<(bool, Option<usize>)>, Vec<bool>);

fn reader_draw() -> impl Strategy<Value = ReaderDraw> {
    (
        prop::collection::vec(
            (
                prop::bool::weighted(0.3),
                prop::option::weighted(0.2, 0..USERS.len()),
            ),
            24,
        ),
        prop::collection::vec(any::<bool>(), CONVS.len() * USERS.len()),
    )
}

/// Spreads `draw` over the world's messages and members (per member worlds only).
fn with_readers(mut w: World, draw: Option<ReaderDraw>) -> World {
    let Some((msgs, admitted)) = draw.filter(|_| !w.legacy.per_message) else {
        return w;
    };
    w.readers = true;
    for (m, (restricted, to)) in w.legacy.msgs.iter().zip(msgs) {
        if restricted {
            w.legacy.readers.restricted.insert(m.id);
        }
        if let Some(u) = to {
            w.legacy
                .readers
                .recipient
                .insert(m.id, USERS[u].to_string());
        }
    }
    for (c, conv) in CONVS.iter().enumerate() {
        for (u, user) in USERS.iter().enumerate() {
            if admitted[c * USERS.len() + u] {
                w.legacy
                    .readers
                    .admitted
                    .insert((conv.to_string(), user.to_string()));
            }
        }
    }
    w
}

fn world(backend: Backend, dims: Dims) -> impl Strategy<Value = World> {
    let conv = (
        0..CONVS.len(),
        prop::collection::vec(
            (
                prop::option::weighted(0.85, 0..USERS.len()),
                prop::bool::weighted(0.15),
                prop::bool::weighted(0.1),
                prop::option::weighted(0.9, prop::sample::select(EDGE_COUNTERS)),
            ),
            0..6,
        ),
        prop::collection::vec(
            prop::option::weighted(
                0.7,
                (
                    prop::bool::weighted(0.8),
                    prop::option::weighted(0.25, 0i64..40),
                    prop::option::weighted(
                        0.7,
                        prop::option::weighted(0.9, prop::sample::select(EDGE_COUNTERS)),
                    ),
                    prop::collection::vec(1i64..60, 0..3),
                    prop::option::weighted(0.3, 0i64..60),
                ),
            ),
            USERS.len(),
        ),
    );
    (
        any::<bool>(),
        prop::option::weighted(0.3, 1i64..4),
        prop::collection::vec(conv, 1..4),
        prop::bool::weighted(0.05),
        any::<[bool; 4]>(),
        prop::collection::btree_set(1i64..60, 0..24),
        prop::option::weighted(0.5, reader_draw()),
        issue29_draw(dims),
    )
        .prop_map(
            move |(per_message, cap, convs, dup, collations, ids, readers, new)| {
                let w = with_readers(
                    build(per_message, cap, convs, dup, collations, ids),
                    readers,
                );
                with_issue29(w, backend, dims, new)
            },
        )
}

/// What the strategy draws for one conversation: its key, its messages (sender, deleted,
/// system, shape B counter), and per user its member row (active, join position, counter,
/// receipts, an application watermark).
type ConvDraw = (
    usize,
    Vec<(Option<usize>, bool, bool, Option<i64>)>,
    Vec<
        Option<(
            bool,
            Option<i64>,
            Option<Option<i64>>,
            Vec<i64>,
            Option<i64>,
        )>,
    >,
);

/// A world from the strategy's draws: positions handed out in a shuffled global order, so
/// that they interleave across conversations.
fn build(
    per_message: bool,
    cap: Option<i64>,
    convs: Vec<ConvDraw>,
    duplicate: bool,
    collations: [bool; 4],
    ids: BTreeSet<i64>,
) -> World {
    let mut legacy = Legacy {
        per_message,
        ..Legacy::default()
    };
    let mut existing = BTreeMap::new();
    let mut ids = ids.into_iter().collect::<Vec<_>>();
    ids.reverse();
    let mut seen = BTreeSet::new();
    for (c, msgs, members) in convs {
        let conv = CONVS[c].to_string();
        if !seen.insert(c) {
            continue;
        }
        for (sender, deleted, system, stored) in msgs {
            let Some(id) = ids.pop() else { break };
            legacy.msgs.push(Msg {
                conv: conv.clone(),
                id,
                sender: sender.map(|u| USERS[u].to_string()),
                deleted,
                system,
                stored,
            });
        }
        for (u, draw) in members.into_iter().enumerate() {
            let Some((active, join, counter, receipts, wm)) = draw else {
                continue;
            };
            let key = (conv.clone(), USERS[u].to_string());
            legacy.members.insert(key.clone(), Member { active, join });
            if let Some(v) = counter {
                legacy.counters.insert(key.clone(), v);
            }
            for r in receipts {
                legacy.receipts.push((key.clone(), r));
            }
            if let Some(lrid) = wm {
                existing.insert(key, Watermark::application(lrid));
            }
        }
    }
    let duplicate_member = duplicate
        .then(|| legacy.members.keys().next().cloned())
        .flatten();
    World {
        legacy,
        existing,
        duplicate_member,
        cap,
        collations,
        readers: false,
        keys: KeyKind::Text,
        times: None,
        form: Form::Column,
        duplicate_counter: None,
    }
}

/// The two collations a backend's tables are given.
fn collation(backend: Backend, second: bool) -> &'static str {
    match (backend, second) {
        (Backend::Postgres, false) => "COLLATE \"C\"",
        (Backend::Postgres, true) => "COLLATE \"en-x-icu\"",
        (Backend::Mysql, false) => "CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
        (Backend::Mysql, true) => "CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci",
        (Backend::Sqlite, false) => "COLLATE BINARY",
        (Backend::Sqlite, true) => "COLLATE NOCASE",
    }
}

/// The legacy schema of the scenarios, each table's keys of the world's kind (text keys in the
/// table's own collation), with the time columns and the counter's `kind` where drawn.
fn schema(backend: Backend, w: &World) -> Vec<String> {
    let key = |table: usize| {
        keys::column_type(backend, w.keys, table)
            .unwrap_or_else(|| format!("VARCHAR(64) {}", collation(backend, w.collations[table])))
    };
    let (created, visit) = match &w.times {
        Some(t) => {
            let (c, v) = time::column_types(backend, t);
            (format!(", created_at {c}"), format!(", last_read_at {v}"))
        }
        None => (String::new(), String::new()),
    };
    let kind = if w.form == Form::Rows {
        ", kind INT NOT NULL DEFAULT 0"
    } else {
        ""
    };
    vec![
        format!(
            "CREATE TABLE messages (conv_id {k} NOT NULL, id BIGINT NOT NULL, sender_id {k}, \
             is_deleted INT NOT NULL DEFAULT 0, is_system INT NOT NULL DEFAULT 0, unread_count BIGINT, \
             restricted INT NOT NULL DEFAULT 0, recipient_id {k}{created}, PRIMARY KEY (conv_id, id))",
            k = key(0)
        ),
        format!(
            "CREATE TABLE members (conv_id {k} NOT NULL, user_id {k} NOT NULL, active INT NOT NULL, \
             join_position BIGINT, staff INT NOT NULL DEFAULT 0{visit})",
            k = key(1)
        ),
        "CREATE INDEX members_conv ON members (conv_id, user_id)".into(),
        format!(
            "CREATE TABLE unread_counters (conv_id {k} NOT NULL, user_id {k} NOT NULL, unread_count BIGINT{kind})",
            k = key(2)
        ),
        "CREATE INDEX counters_conv ON unread_counters (conv_id, user_id)".into(),
        format!(
            "CREATE TABLE read_receipts (conv_id {k} NOT NULL, user_id {k} NOT NULL, message_id BIGINT NOT NULL)",
            k = key(3)
        ),
        "CREATE INDEX receipts_conv ON read_receipts (conv_id, user_id)".into(),
    ]
}

/// The rows of `w`, and (after `expand`) the application's watermarks.
fn data(w: &World) -> (Vec<String>, Vec<String>) {
    let q = |s: &str| quote_literal(s);
    let n = |v: Option<i64>| v.map_or("NULL".to_string(), |v| v.to_string());
    let null = || "NULL".to_string();
    let l = &w.legacy;
    let mut rows = Vec::new();
    for m in &l.msgs {
        let created = w.times.as_ref().map_or(String::new(), |t| {
            let at = t.rendered_created.get(&(m.conv.clone(), m.id)).cloned();
            format!(", {}", at.unwrap_or_else(null))
        });
        rows.push(format!(
            "INSERT INTO messages (conv_id, id, sender_id, is_deleted, is_system, unread_count, \
             restricted, recipient_id{}) VALUES ({}, {}, {}, {}, {}, {}, {}, {}{created})",
            if w.times.is_some() {
                ", created_at"
            } else {
                ""
            },
            q(&m.conv),
            m.id,
            m.sender.as_deref().map_or_else(null, q),
            m.deleted as i64,
            m.system as i64,
            n(m.stored),
            l.readers.restricted.contains(&m.id) as i64,
            l.readers.recipient.get(&m.id).map_or_else(null, |u| q(u))
        ));
    }
    let mut members: Vec<(&Key, &Member)> = l.members.iter().collect();
    if let Some(dup) = &w.duplicate_member {
        members.push((dup, &l.members[dup]));
    }
    for (key, m) in members {
        let (c, u) = key;
        let visit = w.times.as_ref().map_or(String::new(), |t| {
            format!(", {}", t.rendered.get(key).cloned().unwrap_or_else(null))
        });
        rows.push(format!(
            "INSERT INTO members (conv_id, user_id, active, join_position, staff{}) \
             VALUES ({}, {}, {}, {}, {}{visit})",
            if w.times.is_some() {
                ", last_read_at"
            } else {
                ""
            },
            q(c),
            q(u),
            m.active as i64,
            n(m.join),
            l.readers.admitted.contains(&(c.clone(), u.clone())) as i64
        ));
    }
    if !l.per_message {
        let mut counters: Vec<(&Key, &Option<i64>)> = l.counters.iter().collect();
        if let Some(dup) = &w.duplicate_counter {
            counters.push((dup, &l.counters[dup]));
        }
        for ((c, u), v) in counters {
            rows.push(format!(
                "INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES ({}, {}, {})",
                q(c),
                q(u),
                n(*v)
            ));
            if w.form == Form::Rows {
                // A row of another kind (a thread's counter, say), left out by `rows`.
                rows.push(format!(
                    "INSERT INTO unread_counters (conv_id, user_id, unread_count, kind) VALUES ({}, {}, 77, 1)",
                    q(c),
                    q(u)
                ));
            }
        }
    }
    for ((c, u), p) in &l.receipts {
        rows.push(format!(
            "INSERT INTO read_receipts (conv_id, user_id, message_id) VALUES ({}, {}, {p})",
            q(c),
            q(u)
        ));
    }
    let wms = w
        .existing
        .iter()
        .map(|((c, u), wm)| {
            format!(
                "INSERT INTO {} (user_id, conversation_id, last_read_id) VALUES ({}, {}, {})",
                scenario::WATERMARK_TABLE,
                q(u),
                q(c),
                wm.last_read_id
            )
        })
        .collect();
    (rows, wms)
}

/// The watermark table as tidemark left it (keys read as text, whatever their type).
async fn watermarks(backend: Backend, url: &str) -> BTreeMap<Key, Watermark> {
    let mut conn = crate::common::connect(url).await;
    let rows = sqlx::query(&format!(
        "SELECT {}, {}, last_read_id, source, backfilled_id FROM {}",
        keys::as_text(backend, "conversation_id"),
        keys::as_text(backend, "user_id"),
        scenario::WATERMARK_TABLE
    ))
    .fetch_all(&mut conn)
    .await
    .expect("reading the watermarks");
    let _ = conn.close().await;
    rows.iter()
        .map(|r| {
            let text = |i: usize| tidemark::values::text(r, i).unwrap().unwrap_or_default();
            let key = (text(0), text(1));
            let wm = Watermark {
                last_read_id: sqlx::Row::try_get(r, 2).unwrap(),
                source: tidemark::values::text(r, 3).unwrap(),
                backfilled: sqlx::Row::try_get(r, 4).unwrap(),
            };
            (key, wm)
        })
        .collect()
}

/// One case on one backend.
async fn check(backend: Backend, w: &World) -> Result<(), TestCaseError> {
    let Some(db) = TestDb::create(backend, "differential").await else {
        return Ok(());
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("m.toml"), mapping(w)).unwrap();
    let mut conn = db.connect().await;
    if let Some(t) = &w.times {
        exec_all(&mut conn, &time::session(backend, &db.name, t)).await;
    }
    exec_all(&mut conn, &schema(backend, w)).await;
    let (rows, wms) = data(w);
    exec_all(&mut conn, &rows).await;
    let common = ["--database", db.url.as_str(), "--mapping", "m.toml"];
    let with = |args: &[&str]| -> Vec<String> {
        args.iter()
            .chain(common.iter())
            .map(|s| s.to_string())
            .collect()
    };
    let expand = run(d, &to_str(&with(&["expand"])));
    let refused = refusals(w);
    if let Some((c, u)) = w.duplicate_member.as_ref().filter(|_| refused.is_empty()) {
        // A member row written twice is bad input for every stage: named, nothing created.
        let _ = conn.close().await;
        db.cleanup().await;
        prop_assert_eq!(
            expand.code,
            Some(2),
            "duplicated member ({}, {}): {}",
            c,
            u,
            expand.stderr
        );
        prop_assert!(expand.stderr.contains("members.table"), "{}", expand.stderr);
        return Ok(());
    }
    // A duplicated member beside another refusal: either may be the one named (the stages
    // check the members' rows before the positions).
    let mut refused = refused;
    if !refused.is_empty() && w.duplicate_member.is_some() {
        refused.push(("duplicated member".into(), "members.table".into()));
    }
    let refused_by_expand = expand.code == Some(2) && !refused.is_empty();
    if !refused_by_expand {
        prop_assert_eq!(expand.code, Some(0), "expand: {}", expand.stderr);
        exec_all(&mut conn, &wms).await;
    }
    let _ = conn.close().await;
    let result = if refused_by_expand {
        named(&refused, &expand.stderr)
    } else {
        stages(d, backend, &db.url, w, &refused, &with).await
    };
    db.cleanup().await;
    result
}

/// A refusal's message names one of the things refused.
fn named(refused: &[(String, String)], stderr: &str) -> Result<(), TestCaseError> {
    prop_assert!(
        refused
            .iter()
            .any(|(_, needle)| stderr.contains(needle.as_str())),
        "refused {:?}, but the message names none of them: {}",
        refused,
        stderr
    );
    Ok(())
}

fn to_str(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Backfill and audit, each compared with the model; or, for a world every stage must refuse,
/// the backfill's refusal.
async fn stages(
    d: &Path,
    backend: Backend,
    url: &str,
    w: &World,
    refused: &[(String, String)],
    with: &dyn Fn(&[&str]) -> Vec<String>,
) -> Result<(), TestCaseError> {
    // The receipts are drawn at random, most of them no position of their conversation: the
    // evidence-share check (which the model does not model) is accepted.
    let mut args = with(&[
        "backfill",
        "--batch-size",
        "2",
        "--quiet",
        "--accept-evidence-share",
    ]);
    if let Some(t) = &w.times {
        args.extend(time::args(backend, t));
    }
    let backfill = run(d, &to_str(&args));
    if !refused.is_empty() || w.duplicate_member.is_some() {
        // Bad input: named, nothing written.
        prop_assert_eq!(
            backfill.code,
            Some(2),
            "refused {:?} (duplicated member {:?}): {}",
            refused,
            w.duplicate_member,
            backfill.stderr
        );
        if !refused.is_empty() {
            named(refused, &backfill.stderr)?;
        }
        let got = watermarks(backend, url).await;
        prop_assert_eq!(&got, &w.existing, "watermarks after a refused backfill");
        return Ok(());
    }
    prop_assert_eq!(backfill.code, Some(0), "backfill: {}", backfill.stderr);
    let want_wms = model::backfill(&w.legacy, &w.existing);
    let got_wms = watermarks(backend, url).await;
    prop_assert_eq!(&got_wms, &want_wms, "watermarks (got, want)");

    // Every form of the audit statement (issue 30) gives the model's report.
    for form in ["one-pass", "probe", "auto"] {
        audit_equals_model(d, w, &want_wms, form, with)?;
    }
    Ok(())
}

/// Runs the property on `backend`, each case on a fresh database, with the dimensions of
/// `TIDEMARK_DIFF_DIMENSIONS`.
fn property(backend: Backend, default_cases: u32) {
    if !backend.enabled() {
        eprintln!("skipping {}: not in TIDEMARK_TEST_BACKENDS", backend.name());
        return;
    }
    let dims = Dims::from_env();
    model::run_property(world(backend, dims), default_cases, |w| async move {
        check(backend, &w).await
    });
}

/// The `flags` dimension's worlds on `backend` (nothing when it is off).
fn flags_property(backend: Backend, default_cases: u32) {
    if !backend.enabled() || !Dims::from_env().flags {
        eprintln!(
            "skipping {}: not in TIDEMARK_TEST_BACKENDS, or `flags` not in TIDEMARK_DIFF_DIMENSIONS",
            backend.name()
        );
        return;
    }
    model::run_property(flags::world(), default_cases, |w| async move {
        flags::check(backend, &w).await
    });
}

#[test]
fn backfill_and_audit_equal_the_model_on_sqlite() {
    property(Backend::Sqlite, 24);
}

#[test]
fn backfill_and_audit_equal_the_model_on_postgres() {
    property(Backend::Postgres, 8);
}

#[test]
fn backfill_and_audit_equal_the_model_on_mysql() {
    property(Backend::Mysql, 8);
}

#[test]
fn flags_per_conversation_equal_the_model_on_sqlite() {
    flags_property(Backend::Sqlite, 12);
}

#[test]
fn flags_per_conversation_equal_the_model_on_postgres() {
    flags_property(Backend::Postgres, 4);
}

#[test]
fn flags_per_conversation_equal_the_model_on_mysql() {
    flags_property(Backend::Mysql, 4);
}
