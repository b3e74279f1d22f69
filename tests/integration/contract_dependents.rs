//! Objects that depend on the counter column (issue 13, row 5): `contract` finds them in the
//! catalog before any DDL. A view on the counter column closes the gate in the dry run,
//! naming the view (exit 1); a view on other columns of the table and an index on the counter
//! do not (the index goes with the column: a note).

use sqlx::Connection;

use crate::common::{bin, exec_all, on_every_backend, Backend, TestDb};
use crate::scenario;

/// A scenario with no drift at all after the backfill.
const CLEAN_SCENARIO: &str = "S3a-multi-device-receipts";

on_every_backend!(a_view_on_the_counter_closes_the_gate);

async fn a_view_on_the_counter_closes_the_gate(backend: Backend) {
    let Some(db) = TestDb::create(backend, "contract_dependents").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut conn = db.connect().await;
    scenario::load_one(&mut conn, CLEAN_SCENARIO).await;
    std::fs::write(
        dir.path().join("tidemark.toml"),
        scenario::mapping_toml("per_member", false),
    )
    .unwrap();
    let url = db.url.as_str();
    let dir = dir.path();
    bin::run(dir, &["expand", "--database", url]).expect_code(0);
    bin::run(dir, &["backfill", "--database", url, "--quiet"]).expect_code(0);
    bin::run(
        dir,
        &["audit", "--database", url, "--report", "a.csv", "--quiet"],
    )
    .expect_code(0);

    // Neither a view on the table's other columns nor an index on the counter stops the drop.
    exec_all(
        &mut conn,
        &[
            "CREATE VIEW counter_keys AS SELECT conv_id, user_id FROM unread_counters".to_string(),
            "CREATE INDEX unread_by_count ON unread_counters (unread_count)".to_string(),
        ],
    )
    .await;
    let open = bin::run(dir, &["contract", "--database", url]);
    open.expect_code(0);
    assert!(open.stdout.contains("gate: OPEN"), "{}", open.stdout);
    assert!(
        !open.stdout.contains("counter_keys"),
        "a view that does not use the counter is not named:\n{}",
        open.stdout
    );
    assert!(
        open.stdout.contains("unread_by_count"),
        "the index on the counter is noted:\n{}",
        open.stdout
    );

    // A view on the counter column: the dry run says CLOSED and names it.
    exec_all(
        &mut conn,
        &[
            "CREATE VIEW unread_totals AS SELECT SUM(unread_count) AS total FROM unread_counters"
                .to_string(),
        ],
    )
    .await;
    let closed = bin::run(dir, &["contract", "--database", url]);
    closed.expect_code(1);
    let out = &closed.stdout;
    assert!(out.contains("gate: CLOSED"), "{out}");
    assert!(
        out.contains("unread_totals depends on unread_count: drop or change it first"),
        "the reason names the view:\n{out}"
    );
    assert!(!out.contains("counter_keys"), "{out}");
    // --execute refuses too (exit 1: the gate; SQLite's plan refuses first, exit 2), and
    // the column is still there.
    let refused = bin::run(
        dir,
        &["contract", "--database", url, "--execute", "--quiet"],
    );
    assert!(
        matches!(refused.code, Some(1) | Some(2)),
        "{:?}\n{}\n{}",
        refused.code,
        refused.stdout,
        refused.stderr
    );
    sqlx::query("SELECT unread_count FROM unread_counters")
        .fetch_all(&mut conn)
        .await
        .expect("the counter column is still there");

    // Without the view the gate opens again.
    exec_all(&mut conn, &["DROP VIEW unread_totals".to_string()]).await;
    bin::run(dir, &["contract", "--database", url]).expect_code(0);
    conn.close().await.unwrap();
    db.cleanup().await;
}

on_every_backend!(servers: same_names_in_another_database_are_not_dependents);

/// Issue 25, row 16: a table and a view of the same names in another database of the same
/// server (MariaDB/MySQL) or another schema of the same database (PostgreSQL) are not this
/// mapping's dependents: the gate stays open. A view there over this database's counter
/// column is one (the drop would break it): the gate closes and names it.
async fn same_names_in_another_database_are_not_dependents(backend: Backend) {
    let Some(db) = TestDb::create(backend, "dependents_home").await else {
        return;
    };
    let Some(other) = TestDb::create(backend, "dependents_other").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut conn = db.connect().await;
    scenario::load_one(&mut conn, CLEAN_SCENARIO).await;
    std::fs::write(
        dir.path().join("tidemark.toml"),
        scenario::mapping_toml("per_member", false),
    )
    .unwrap();
    let url = db.url.as_str();
    let dir = dir.path();
    bin::run(dir, &["expand", "--database", url]).expect_code(0);
    bin::run(dir, &["backfill", "--database", url, "--quiet"]).expect_code(0);
    bin::run(
        dir,
        &["audit", "--database", url, "--report", "a.csv", "--quiet"],
    )
    .expect_code(0);
    bin::run(dir, &["contract", "--database", url]).expect_code(0);

    // The other place: on MariaDB a second database, on PostgreSQL a second schema.
    let (mut there, prefix, home) = match backend {
        Backend::Postgres => {
            exec_all(&mut conn, &["CREATE SCHEMA tm_elsewhere".to_string()]).await;
            (db.connect().await, "tm_elsewhere.", "public".to_string())
        }
        _ => (other.connect().await, "", db.name.clone()),
    };
    exec_all(
        &mut there,
        &[
            format!(
                "CREATE TABLE {prefix}unread_counters (conv_id BIGINT NOT NULL, \
                 user_id VARCHAR(64) NOT NULL, unread_count INT NULL, PRIMARY KEY (conv_id, user_id))"
            ),
            format!(
                "CREATE VIEW {prefix}counter_sums AS SELECT SUM(unread_count) AS total \
                 FROM {prefix}unread_counters"
            ),
        ],
    )
    .await;
    let open = bin::run(dir, &["contract", "--database", url]);
    assert!(
        !open.stdout.contains("counter_sums"),
        "a view over another database's table of the same name is not a dependent:\n{}",
        open.stdout
    );
    open.expect_code(0);
    assert!(open.stdout.contains("gate: OPEN"), "{}", open.stdout);

    // A view there over this database's counter column is one.
    let theirs = match backend {
        Backend::Postgres => "tm_elsewhere.",
        _ => "",
    };
    exec_all(
        &mut there,
        &[format!(
            "CREATE VIEW {theirs}home_sums AS SELECT SUM(unread_count) AS total \
             FROM {home}.unread_counters"
        )],
    )
    .await;
    let closed = bin::run(dir, &["contract", "--database", url]);
    closed.expect_code(1);
    assert!(
        closed.stdout.contains("home_sums depends on unread_count"),
        "{}",
        closed.stdout
    );
    assert!(!closed.stdout.contains("counter_sums"), "{}", closed.stdout);

    there.close().await.unwrap();
    conn.close().await.unwrap();
    other.cleanup().await;
    db.cleanup().await;
}
