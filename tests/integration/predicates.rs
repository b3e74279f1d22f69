//! Issue 13, row 10: a mapping predicate that does not parse in the database's SQL is named
//! with its key and its line (exit 2) before any statement runs, on every backend. Before, the
//! stage ran and the database's "syntax error near …" surfaced with no key named.

use crate::common::bin::run;
use crate::common::{exec_all, on_every_backend, Backend, TestDb};
use crate::scenario;
use sqlx::{Connection, Row};

on_every_backend!(bad_predicate_is_named_before_any_statement);

async fn bad_predicate_is_named_before_any_statement(backend: Backend) {
    let Some(db) = TestDb::create(backend, "badpred").await else {
        return;
    };
    let mut conn = db.connect().await;
    exec_all(&mut conn, &scenario::schema_sql()).await;
    let dir = tempfile::tempdir().unwrap();
    let good = scenario::mapping_toml("per_member", false);
    let line = good
        .lines()
        .position(|l| l.starts_with("countable"))
        .unwrap()
        + 1;
    let bad = good.replace(
        "\"is_deleted = 0 AND is_system = 0\"",
        "\"is_deleted = 0 AND is_system = 0 AND\"",
    );
    std::fs::write(dir.path().join("bad.toml"), bad).unwrap();
    for args in [
        &["expand"][..],
        &["backfill", "--quiet"],
        &["audit", "--quiet", "--no-ledger"],
        &["plan"],
        &["status"],
        &["contract"],
    ] {
        let mut all = args.to_vec();
        all.extend(["--database", &db.url, "--mapping", "bad.toml"]);
        let out = run(dir.path(), &all);
        out.expect_code(2);
        let want = format!("bad.toml:{line}:13: messages.countable: ");
        assert!(
            out.stderr.contains(&want),
            "{args:?}: want {want:?} in\n{}",
            out.stderr
        );
    }
    // Nothing ran: expand never created the watermark table or the ledger.
    let tables: i64 = sqlx::query(&format!(
        "SELECT COUNT(*) FROM {} WHERE {}",
        match backend {
            Backend::Sqlite => "sqlite_master",
            _ => "information_schema.tables",
        },
        match backend {
            Backend::Sqlite => "name LIKE 'tidemark%' OR name = 'read_watermarks'".to_string(),
            _ => format!(
                "(table_name LIKE 'tidemark%' OR table_name = 'read_watermarks') AND {}",
                match backend {
                    Backend::Postgres => "table_schema = 'public'".to_string(),
                    _ => format!("table_schema = '{}'", db.name),
                }
            ),
        }
    ))
    .fetch_one(&mut conn)
    .await
    .unwrap()
    .try_get::<i64, _>(0)
    .unwrap();
    assert_eq!(tables, 0, "a statement ran before the predicate check");
    let _ = conn.close().await;
    db.cleanup().await;
}
