//! The demo as the front door: at a small scale on every backend it exits 0, which it does only
//! when the audit's classes equal the injected ground truth; a second run starts over.

use crate::common::{bin, on_every_backend, Backend, TestDb};

on_every_backend!(servers: demo_on);

fn demo(dir: &std::path::Path, extra: &[&str]) -> (Option<i32>, String) {
    let out = bin::command()
        .current_dir(dir)
        .env_remove("DATABASE_URL")
        .args(["demo", "--quiet", "--scale", "2000", "--seed", "9"])
        .args(extra)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// The "injected / found" table at the end of the demo's output.
fn truth_table(text: &str) -> Vec<(String, u64, u64)> {
    let start = text
        .find("beside the injected truth")
        .expect("the truth table");
    text[start..]
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f[..] {
                [class, a, b] => Some((class.to_string(), a.parse().ok()?, b.parse().ok()?)),
                _ => None,
            }
        })
        .collect()
}

fn check(code: Option<i32>, text: &str) {
    assert_eq!(code, Some(0), "{text}");
    let table = truth_table(text);
    assert_eq!(table.len(), 9, "a row per class: {table:?}");
    assert!(
        table.iter().all(|(_, injected, found)| injected == found),
        "{table:?}"
    );
    assert!(
        table.iter().all(|(_, injected, _)| *injected > 0),
        "every class injected: {table:?}"
    );
    assert!(
        text.contains("gate: CLOSED") && text.contains("gate: OPEN"),
        "{text}"
    );
    assert!(
        text.contains("done: column unread_counters.unread_count dropped"),
        "{text}"
    );
}

#[test]
fn demo_on_sqlite_finds_exactly_the_injected_drift_twice() {
    let dir = tempfile::tempdir().unwrap();
    let (code, text) = demo(dir.path(), &[]);
    check(code, &text);
    let (code, text) = demo(dir.path(), &[]);
    check(code, &text);
    // The demo's own database keeps its counter: only the copy was contracted.
    let report = std::fs::read_to_string(dir.path().join("tidemark-demo-report.csv")).unwrap();
    assert!(report.starts_with("conversation_id,user_id,stored_unread,recomputed_unread,drift,class,last_read_id,watermark_source"));
}

async fn demo_on(backend: Backend) {
    let Some(db) = TestDb::create(backend, "demo").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (code, text) = demo(dir.path(), &["--database", &db.url]);
    check(code, &text);
    // Again on the same database: the demo recognises its own tables and starts over.
    let (code, text) = demo(dir.path(), &["--database", &db.url]);
    check(code, &text);
    db.cleanup().await;
}

#[tokio::test]
async fn demo_refuses_a_database_it_did_not_make() {
    let Some(db) = TestDb::create(Backend::Postgres, "demo_refuse").await else {
        return;
    };
    let mut conn = db.connect().await;
    sqlx::raw_sql("CREATE TABLE messages (id BIGINT)")
        .execute(&mut conn)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (code, text) = demo(dir.path(), &["--database", &db.url]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("was not made by `tidemark demo`"), "{text}");
    let still: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM messages")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(still, 0);
    drop(conn);
    db.cleanup().await;
}
