//! `tidemark sql app` (issue 10): the statements it prints, run as printed on a scenario
//! database after expand, backfill and audit, on every backend. The unread count equals the
//! audit's recomputed value for every counter row (and stops at 100), a late mark-read does not
//! move a watermark back, the sender's own watermark advances, the per-message counts of a page
//! come from one grouped query, and the sequence hands out numbers under the row lock.

use std::collections::BTreeMap;

use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Connection, Row};

use crate::common::{csv, on_every_backend, Backend};
use crate::json_output::Fixture;
use crate::scenario;

/// The conversation with more than 100 unread messages.
const BIG: i64 = 9000;

/// One printed statement: its name, its binds in order, its SQL.
#[derive(Debug, Clone)]
pub(crate) struct Printed {
    /// The statement's name.
    pub name: String,
    /// Its binds, in order.
    pub binds: Vec<String>,
    /// Its SQL, without the closing `;`.
    pub sql: String,
}

/// Parses the output of `tidemark sql app`: `-- name: …` or `-- name (continued)` starts a
/// statement, `-- binds: a, b` lists its binds, the SQL runs to the line ending in `;`.
pub(crate) fn parse(text: &str) -> Vec<Printed> {
    let mut out = Vec::new();
    let mut current: Option<Printed> = None;
    for line in text.lines() {
        if let Some(comment) = line.strip_prefix("-- ") {
            if let Some(list) = comment.strip_prefix("binds: ") {
                let p = current.as_mut().expect("binds after a name");
                p.binds = list.split(", ").map(str::to_string).collect();
            } else if let Some(name) = comment.strip_suffix(" (continued)") {
                current = Some(Printed {
                    name: name.to_string(),
                    binds: Vec::new(),
                    sql: String::new(),
                });
            } else if !comment.starts_with("prevents:") && !comment.starts_with("statements for") {
                let name = comment.split(':').next().unwrap().to_string();
                current = Some(Printed {
                    name,
                    binds: Vec::new(),
                    sql: String::new(),
                });
            }
            continue;
        }
        if line.trim().is_empty() {
            continue;
        }
        let p = current.as_mut().expect("SQL after a name");
        p.sql.push_str(line);
        p.sql.push('\n');
        if line.ends_with(';') {
            let mut done = current.take().unwrap();
            done.sql = done.sql.trim_end().trim_end_matches(';').to_string();
            out.push(done);
        }
    }
    out
}

/// A value to bind.
#[derive(Debug, Clone)]
pub(crate) enum V {
    /// An integer.
    Int(i64),
    /// A text.
    Text(String),
}

/// The printed statements and a way to run them.
pub(crate) struct App {
    /// What `tidemark sql app` printed, parsed.
    pub statements: Vec<Printed>,
}

impl App {
    /// Every part of statement `name`, in order (panics when there is none).
    pub fn all(&self, name: &str) -> Vec<&Printed> {
        let found: Vec<&Printed> = self.statements.iter().filter(|p| p.name == name).collect();
        assert!(!found.is_empty(), "no statement {name}");
        found
    }

    /// Runs statement `name` (every part, in order) with `values` by bind name; the rows of the
    /// last part.
    pub async fn run(
        &self,
        conn: &mut AnyConnection,
        name: &str,
        values: &[(&str, V)],
    ) -> Vec<AnyRow> {
        let values: BTreeMap<&str, V> = values.iter().cloned().collect();
        let mut rows = Vec::new();
        for p in self.all(name) {
            let mut q = sqlx::query(&p.sql);
            for b in &p.binds {
                q = match values.get(b.as_str()) {
                    Some(V::Int(i)) => q.bind(*i),
                    Some(V::Text(t)) => q.bind(t.clone()),
                    None => panic!("{name}: no value for bind {b}"),
                };
            }
            rows = q
                .fetch_all(&mut *conn)
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}\n{}", p.sql));
        }
        rows
    }

    /// The printed `unread_count` of `user` in `conv`.
    pub async fn unread(&self, conn: &mut AnyConnection, conv: i64, user: &str) -> i64 {
        let rows = self
            .run(
                conn,
                "unread_count",
                &[
                    ("conversation", V::Int(conv)),
                    ("user", V::Text(user.into())),
                ],
            )
            .await;
        int(&rows[0], 0)
    }
}

/// An integer column, whatever width the engine gave it.
pub(crate) fn int(row: &AnyRow, i: usize) -> i64 {
    row.try_get::<i64, _>(i)
        .or_else(|_| row.try_get::<i32, _>(i).map(i64::from))
        .unwrap_or_else(|e| panic!("column {i}: {e}"))
}

async fn watermark(conn: &mut AnyConnection, conv: i64, user: &str) -> i64 {
    let row = sqlx::query(&format!(
        "SELECT last_read_id FROM {} WHERE conversation_id = {conv} AND user_id = '{user}'",
        scenario::WATERMARK_TABLE
    ))
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    int(&row, 0)
}

/// 150 messages in conversation BIG by `big_sender`; `big_reader` has read none.
fn big_conversation() -> Vec<String> {
    let messages: Vec<String> = (1..=150)
        .map(|id| format!("({BIG}, {id}, 'big_sender', 0, 0, NULL, NULL)"))
        .collect();
    vec![
        format!(
            "INSERT INTO messages (conv_id, id, sender_id, is_deleted, is_system, created_at, unread_count) VALUES {}",
            messages.join(", ")
        ),
        format!("INSERT INTO members (conv_id, user_id, active, join_position) VALUES ({BIG}, 'big_reader', 1, NULL), ({BIG}, 'big_sender', 1, NULL)"),
        format!("INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES ({BIG}, 'big_reader', 150), ({BIG}, 'big_sender', 0)"),
    ]
}

async fn printed_statements_hold(backend: Backend) {
    let Some(fx) = Fixture::create(backend, "app_sql", &big_conversation()).await else {
        return;
    };
    fx.run(&["expand"], &[]).expect_code(0);
    fx.run(&["backfill"], &["-q"]).expect_code(0);
    let report = fx.dir.path().join("drift.csv");
    fx.run(&["audit"], &["-q", "--report", report.to_str().unwrap()])
        .expect_code(1);
    let printed = fx.run(&["sql", "app"], &["--page", "2"]);
    printed.expect_code(0);
    let app = App {
        statements: parse(&printed.stdout),
    };
    let mut conn = fx.connect().await;

    // The unread count equals the audit's recomputed value for every counter row, capped at
    // 100: a drifting row's is in the report, any other's is its stored counter.
    let drift = csv::read(&report);
    let col = |name: &str| drift.columns.iter().position(|c| c == name).unwrap();
    let (c_conv, c_user, c_rec) = (
        col("conversation_id"),
        col("user_id"),
        col("recomputed_unread"),
    );
    let mut recomputed: BTreeMap<(i64, String), i64> = drift
        .rows
        .iter()
        .map(|r| {
            (
                (r[c_conv].parse().unwrap(), r[c_user].clone()),
                r[c_rec].parse().unwrap(),
            )
        })
        .collect();
    assert!(!recomputed.is_empty(), "the scenarios drift");
    let counters = sqlx::query("SELECT conv_id, user_id, unread_count FROM unread_counters")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    let mut checked = 0;
    for row in &counters {
        let conv = int(row, 0);
        let user: String = row.get(1);
        let key = (conv, user.clone());
        let want = match recomputed.remove(&key) {
            Some(r) => r,
            None => int(row, 2),
        };
        let got = app.unread(&mut conn, conv, &user).await;
        assert_eq!(got, want.min(100), "unread of {user} in {conv}");
        checked += 1;
    }
    assert!(checked > 20);
    assert!(
        recomputed.is_empty(),
        "report rows without a counter: {recomputed:?}"
    );

    // Capped: 150 unread count as 100 ("99+").
    assert_eq!(app.unread(&mut conn, BIG, "big_reader").await, 100);
    let page = app
        .run(
            &mut conn,
            "unread_count_page",
            &[
                ("conversation_1", V::Int(BIG)),
                ("conversation_2", V::Int(1)),
                ("user", V::Text("big_reader".into())),
            ],
        )
        .await;
    let page: BTreeMap<i64, i64> = page.iter().map(|r| (int(r, 0), int(r, 1))).collect();
    assert_eq!(page, BTreeMap::from([(1, 100), (2, 0)]));

    // Mark-read is forward-only: a late report of an older position changes nothing.
    let mark = |conv: i64, user: &str, message: i64| {
        vec![
            ("conversation", V::Int(conv)),
            ("user", V::Text(user.to_string())),
            ("message", V::Int(message)),
        ]
    };
    app.run(&mut conn, "mark_read", &mark(BIG, "big_reader", 120))
        .await;
    assert_eq!(watermark(&mut conn, BIG, "big_reader").await, 120);
    app.run(&mut conn, "mark_read", &mark(BIG, "big_reader", 50))
        .await;
    assert_eq!(watermark(&mut conn, BIG, "big_reader").await, 120);
    assert_eq!(app.unread(&mut conn, BIG, "big_reader").await, 30);

    // Per-message unread of a page of messages: big_reader has not read 149 and 150 (the
    // sender is never counted); after reading 149, only 150.
    let per_message = |rows: Vec<AnyRow>| -> Vec<(i64, i64)> {
        rows.iter().map(|r| (int(r, 0), int(r, 1))).collect()
    };
    let page_values = vec![
        ("conversation", V::Int(BIG)),
        ("message_1", V::Int(149)),
        ("message_2", V::Int(150)),
    ];
    let rows = app
        .run(&mut conn, "message_unread_page", &page_values)
        .await;
    assert_eq!(per_message(rows), [(149, 1), (150, 1)]);
    app.run(&mut conn, "mark_read", &mark(BIG, "big_reader", 149))
        .await;
    let rows = app
        .run(&mut conn, "message_unread_page", &page_values)
        .await;
    assert_eq!(per_message(rows), [(149, 0), (150, 1)]);

    // Sending advances the sender's own watermark (never back).
    app.run(
        &mut conn,
        "send_message_own_watermark",
        &mark(BIG, "big_sender", 150),
    )
    .await;
    assert_eq!(watermark(&mut conn, BIG, "big_sender").await, 150);
    assert_eq!(app.unread(&mut conn, BIG, "big_sender").await, 0);

    // The sequence: created above every existing id; numbers follow one another.
    for p in app.all("sequence_schema") {
        sqlx::raw_sql(&p.sql).execute(&mut conn).await.unwrap();
    }
    let next = |conv: i64| vec![("conversation", V::Int(conv))];
    let mut tx = conn.begin().await.unwrap();
    let rows = app.run(&mut tx, "sequence_next", &next(BIG)).await;
    assert_eq!(int(&rows[0], 0), 151);
    tx.commit().await.unwrap();
    app.run(&mut conn, "sequence_new_conversation", &next(BIG + 1))
        .await;
    for want in [1, 2] {
        let mut tx = conn.begin().await.unwrap();
        let rows = app.run(&mut tx, "sequence_next", &next(BIG + 1)).await;
        assert_eq!(int(&rows[0], 0), want);
        tx.commit().await.unwrap();
    }
    drop(conn);
    fx.db.cleanup().await;
}

on_every_backend!(printed_statements_hold);

#[test]
fn every_statement_names_the_bug_it_prevents() {
    let dir = tempfile::tempdir().unwrap();
    let mapping = dir.path().join("tidemark.toml");
    std::fs::write(&mapping, scenario::mapping_toml("per_member", false)).unwrap();
    for url in ["postgres://u@h/db", "mysql://u@h/db", "sqlite:x.db"] {
        let run = crate::common::bin::run(
            dir.path(),
            &[
                "sql",
                "app",
                "--database",
                url,
                "--mapping",
                mapping.to_str().unwrap(),
            ],
        );
        run.expect_code(0);
        let statements = parse(&run.stdout);
        assert!(statements.len() >= 8, "{url}");
        for name in [
            "mark_read",
            "send_message_own_watermark",
            "unread_count",
            "unread_count_page",
            "message_unread_page",
            "sequence_next",
        ] {
            let block = run
                .stdout
                .split(&format!("-- {name}: "))
                .nth(1)
                .unwrap_or_else(|| panic!("{url}: no {name}"));
            let prevents = block.lines().nth(1).unwrap();
            // The hazard in words, not a reference to a document the user does not have.
            assert!(
                prevents.starts_with("-- prevents: ")
                    && prevents.len() > 40
                    && !prevents.contains("seed"),
                "{name}: {prevents}"
            );
        }
        assert!(run.stdout.contains("LIMIT 100"));
        let greatest = if url.starts_with("sqlite") {
            "MAX(last_read_id"
        } else {
            "GREATEST("
        };
        assert!(run.stdout.contains(greatest), "{url}");
        let json = crate::common::bin::run(
            dir.path(),
            &[
                "sql",
                "app",
                "--database",
                url,
                "--mapping",
                mapping.to_str().unwrap(),
                "--format",
                "json",
            ],
        );
        let value: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
        assert_eq!(
            value["statements"].as_array().unwrap().len(),
            statements.len()
        );
    }
}

/// Seed 000 §4 with two connections in a fixed order: while A holds the number it took (not yet
/// committed), B's `sequence_next` on the same conversation waits for A's row lock (here it gives
/// up after a short lock timeout); once A commits, B gets the next number. So a smaller number
/// always commits first.
async fn sequence_waits_for_the_lock(backend: Backend) {
    let Some(fx) = Fixture::create(backend, "app_seq", &big_conversation()).await else {
        return;
    };
    fx.run(&["expand"], &[]).expect_code(0);
    let printed = fx.run(&["sql", "app"], &[]);
    printed.expect_code(0);
    let app = App {
        statements: parse(&printed.stdout),
    };
    let mut a = fx.connect().await;
    for p in app.all("sequence_schema") {
        sqlx::raw_sql(&p.sql).execute(&mut a).await.unwrap();
    }
    let mut b = fx.connect().await;
    let short_wait = match backend {
        Backend::Postgres => "SET lock_timeout = '300ms'",
        _ => "SET SESSION innodb_lock_wait_timeout = 1",
    };
    sqlx::raw_sql(short_wait).execute(&mut b).await.unwrap();
    let next = vec![("conversation", V::Int(BIG))];

    let mut tx_a = a.begin().await.unwrap();
    let rows = app.run(&mut tx_a, "sequence_next", &next).await;
    assert_eq!(int(&rows[0], 0), 151);

    // B waits for A's lock and gives up: it took no number.
    let mut tx_b = b.begin().await.unwrap();
    let waited = {
        let p = &app.all("sequence_next")[0];
        let mut q = sqlx::query(&p.sql);
        for _ in &p.binds {
            q = q.bind(BIG);
        }
        q.execute(&mut *tx_b).await
    };
    let err = waited
        .expect_err("B must wait for A's row lock")
        .to_string();
    assert!(
        err.contains("lock") || err.contains("Lock"),
        "a lock wait timeout, got: {err}"
    );
    tx_b.rollback().await.unwrap();
    tx_a.commit().await.unwrap();

    // After A's commit, B gets the next number.
    let mut tx_b = b.begin().await.unwrap();
    let rows = app.run(&mut tx_b, "sequence_next", &next).await;
    assert_eq!(int(&rows[0], 0), 152);
    tx_b.commit().await.unwrap();
    drop((a, b));
    fx.db.cleanup().await;
}

on_every_backend!(servers: sequence_waits_for_the_lock);

/// Runs `tidemark sql app` for `mapping` (a file) on the fixture's dialect and parses it.
fn printed_for(fx: &Fixture, mapping: &std::path::Path) -> App {
    let run = crate::common::bin::run(
        fx.dir.path(),
        &[
            "sql",
            "app",
            "--database",
            &fx.db.url,
            "--mapping",
            mapping.to_str().unwrap(),
            "--page",
            "3",
        ],
    );
    run.expect_code(0);
    App {
        statements: parse(&run.stdout),
    }
}

/// A message the mapping's `countable` predicate leaves out (a system message, a deleted one)
/// is unread by nobody in `message_unread_page`, as in the audit's per-message count (the page
/// used to count it like any other).
async fn message_page_follows_countable(backend: Backend) {
    let mut extra = big_conversation();
    extra.push(format!(
        "INSERT INTO messages (conv_id, id, sender_id, is_deleted, is_system, created_at, unread_count) \
         VALUES ({BIG}, 151, 'big_sender', 0, 1, NULL, NULL), ({BIG}, 152, 'big_sender', 1, 0, NULL, NULL)"
    ));
    let Some(fx) = Fixture::create(backend, "app_countable", &extra).await else {
        return;
    };
    fx.run(&["expand"], &[]).expect_code(0);
    let app = printed_for(&fx, &fx.mapping);
    let mut conn = fx.connect().await;
    let rows = app
        .run(
            &mut conn,
            "message_unread_page",
            &[
                ("conversation", V::Int(BIG)),
                ("message_1", V::Int(150)),
                ("message_2", V::Int(151)),
                ("message_3", V::Int(152)),
            ],
        )
        .await;
    let got: Vec<(i64, i64)> = rows.iter().map(|r| (int(r, 0), int(r, 1))).collect();
    assert_eq!(got, [(150, 1), (151, 0), (152, 0)]);
    drop(conn);
    fx.db.cleanup().await;
}

on_every_backend!(message_page_follows_countable);

/// `sequence_schema` fills `seq` for the existing rows (seq = id: id order within each
/// conversation, every watermark keeps its meaning), so with `seq` mapped as the position the
/// unread counts are the same as with `id`; the next number follows the highest; the unique
/// `(conversation, seq)` index refuses a number twice.
async fn sequence_schema_fills_seq(backend: Backend) {
    let Some(fx) = Fixture::create(backend, "app_seq_fill", &big_conversation()).await else {
        return;
    };
    fx.run(&["expand"], &[]).expect_code(0);
    fx.run(&["backfill"], &["-q"]).expect_code(0);
    let by_id = printed_for(&fx, &fx.mapping);
    let mut conn = fx.connect().await;
    for p in by_id.all("sequence_schema") {
        sqlx::raw_sql(&p.sql).execute(&mut conn).await.unwrap();
    }
    let count = |sql: &'static str| sqlx::query_scalar::<_, i64>(sql);
    let total = count("SELECT COUNT(*) FROM messages")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert!(total > 150, "{total}");
    let unfilled = count("SELECT COUNT(*) FROM messages WHERE seq IS NULL")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(unfilled, 0, "rows without seq after sequence_schema");
    let differ = count("SELECT COUNT(*) FROM messages WHERE seq <> id")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(differ, 0);

    // The same counts with seq as the position.
    let seq_mapping = fx.dir.path().join("seq.toml");
    let text = std::fs::read_to_string(&fx.mapping).unwrap();
    assert!(text.contains("id = \"id\"\n"));
    std::fs::write(
        &seq_mapping,
        text.replacen("id = \"id\"\n", "id = \"seq\"\n", 1),
    )
    .unwrap();
    let by_seq = printed_for(&fx, &seq_mapping);
    let members =
        sqlx::query("SELECT conv_id, user_id FROM unread_counters ORDER BY conv_id, user_id")
            .fetch_all(&mut conn)
            .await
            .unwrap();
    let mut compared = 0;
    for row in &members {
        let (conv, user): (i64, String) = (int(row, 0), row.get(1));
        let a = by_id.unread(&mut conn, conv, &user).await;
        let b = by_seq.unread(&mut conn, conv, &user).await;
        assert_eq!(a, b, "unread of {user} in {conv}: by id {a}, by seq {b}");
        compared += 1;
    }
    assert!(compared > 20);

    // The next number follows the highest; a number twice is refused.
    let next = vec![("conversation", V::Int(BIG))];
    let mut tx = conn.begin().await.unwrap();
    let rows = by_seq.run(&mut tx, "sequence_next", &next).await;
    assert_eq!(int(&rows[0], 0), 151);
    tx.commit().await.unwrap();
    let twice = sqlx::raw_sql(&format!(
        "INSERT INTO messages (conv_id, id, sender_id, seq) VALUES ({BIG}, 1151, 'big_sender', 150)"
    ))
    .execute(&mut conn)
    .await;
    assert!(
        twice.is_err(),
        "a seq used twice in one conversation must be refused"
    );
    drop(conn);
    fx.db.cleanup().await;
}

on_every_backend!(sequence_schema_fills_seq);
