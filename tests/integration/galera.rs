//! A MariaDB Galera cluster (issue 13, row 9 and "A Galera cluster in CI"): the runner lock
//! holds across nodes, a certification conflict at COMMIT is recognised as a lock wait (and so
//! retried), a backfill and an audit spread over the nodes give the same rows as on one server,
//! and the contract's DDL reaches every node.
//!
//! Gated on `TIDEMARK_TEST_GALERA_URLS`: the comma-separated admin URLs of three nodes of one
//! cluster (`.ci/galera.sh start` prints them; `.ci/run` sets them). Without it every test here
//! returns at once with a note on stderr. Each test creates its own database through the first
//! node (replicated to the others) and drops it.

use crate::common::{Backend, TestDb};
use crate::scenario;
use sqlx::{AnyConnection, Connection, Executor, Row};
use std::collections::BTreeMap;
use std::time::Duration;
use tidemark::db::Dsn;
use tidemark::mapping::Mapping;
use tidemark::stages::contract::{self, ContractOptions};
use tidemark::stages::{audit, backfill, expand};
use tidemark::values::text;

/// One database on the cluster, with a URL per node.
struct Cluster {
    name: String,
    urls: Vec<String>,
    admin: String,
}

impl Cluster {
    /// A fresh database `label` on the cluster, or None when `TIDEMARK_TEST_GALERA_URLS` is
    /// not set.
    async fn create(label: &str) -> Option<Cluster> {
        let Ok(list) = std::env::var("TIDEMARK_TEST_GALERA_URLS") else {
            eprintln!("skipping galera: TIDEMARK_TEST_GALERA_URLS is not set");
            return None;
        };
        let admins: Vec<String> = list.split(',').map(|s| s.trim().to_string()).collect();
        assert!(admins.len() >= 2, "TIDEMARK_TEST_GALERA_URLS names {list}");
        let name = crate::common::unique_name(label);
        let mut admin = crate::common::connect(&admins[0]).await;
        admin
            .execute(format!("DROP DATABASE IF EXISTS `{name}`").as_str())
            .await
            .unwrap();
        admin
            .execute(format!("CREATE DATABASE `{name}` CHARACTER SET utf8mb4").as_str())
            .await
            .unwrap();
        let _ = admin.close().await;
        // DDL is applied on the other nodes after it returns on the first: wait until each
        // node has applied everything certified so far (`wsrep_sync_wait`) and sees it.
        for a in &admins {
            let mut node = crate::common::connect(a).await;
            node.execute("SET SESSION wsrep_sync_wait = 1")
                .await
                .unwrap();
            let seen: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
            )
            .bind(&name)
            .fetch_one(&mut node)
            .await
            .unwrap();
            assert_eq!(seen, 1, "database {name} not visible on {a}");
            let _ = node.close().await;
        }
        let urls = admins
            .iter()
            .map(|a| {
                let mut u = url::Url::parse(a).unwrap();
                u.set_path(&format!("/{name}"));
                u.to_string()
            })
            .collect();
        Some(Cluster {
            name,
            urls,
            admin: admins[0].clone(),
        })
    }

    /// A connection to node `i` whose reads wait for every write the cluster has certified
    /// (`wsrep_sync_wait = 1`).
    async fn node(&self, i: usize) -> AnyConnection {
        let mut c = crate::common::connect(&self.urls[i]).await;
        c.execute("SET SESSION wsrep_sync_wait = 1").await.unwrap();
        c
    }

    async fn drop(self) {
        let mut admin = crate::common::connect(&self.admin).await;
        admin
            .execute(format!("DROP DATABASE IF EXISTS `{}`", self.name).as_str())
            .await
            .unwrap();
    }
}

/// The per-member scenarios side by side (as `tests/backfill.rs` loads them), the mapping.
async fn load_fleet(conn: &mut AnyConnection, shape: &str) -> Mapping {
    crate::common::exec_all(conn, &scenario::schema_sql()).await;
    let scenarios: Vec<_> = scenario::load_all()
        .unwrap()
        .into_iter()
        .filter(|s| {
            s.shape == shape && s.options.cap.is_none() && !s.options.own_message_lower_bound
        })
        .collect();
    for (j, s) in scenarios.iter().enumerate() {
        crate::common::exec_all(conn, &scenario::data_sql(s, (j as i64 + 1) * 100)).await;
    }
    Mapping::parse(&scenario::mapping_toml(shape, false), "fleet").unwrap()
}

/// The watermark table's rows, sorted.
async fn watermarks(conn: &mut AnyConnection) -> Vec<String> {
    let sql =
        "SELECT conversation_id, user_id, last_read_id, source FROM read_watermarks ORDER BY 1, 2";
    sqlx::query(sql)
        .fetch_all(&mut *conn)
        .await
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{} {} {} {}",
                r.try_get::<i64, _>(0).unwrap(),
                text(r, 1).unwrap().unwrap_or_default(),
                r.try_get::<i64, _>(2).unwrap(),
                text(r, 3).unwrap().unwrap_or_default()
            )
        })
        .collect()
}

/// Expand on `first`, backfill on `second`, audit on `third` (the same connection on one
/// server); returns the watermarks and the audit report's lines, sorted.
async fn pipeline(
    first: &mut AnyConnection,
    second: &mut AnyConnection,
    third: &mut AnyConnection,
    shape: &str,
) -> (Vec<String>, Vec<String>) {
    let mapping = load_fleet(first, shape).await;
    let dialect = tidemark::dialect::Dialect::Mysql;
    expand::run(first, &mapping, dialect, false).await.unwrap();
    let opts = backfill::BackfillOptions {
        batch_size: 7,
        chunk_time: Duration::ZERO,
        ..Default::default()
    };
    backfill::run(second, &mapping, dialect, &opts)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("drift.csv");
    let aopts = audit::AuditOptions {
        report: report.clone(),
        ..Default::default()
    };
    audit::run(third, &mapping, dialect, &aopts).await.unwrap();
    let mut lines: Vec<String> = std::fs::read_to_string(&report)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    (watermarks(third).await, lines)
}

#[tokio::test]
async fn runner_lock_holds_across_nodes() {
    let Some(cluster) = Cluster::create("galera_lock").await else {
        return;
    };
    let mut n1 = cluster.node(0).await;
    let mapping = load_fleet(&mut n1, "per_member").await;
    let dialect = tidemark::dialect::Dialect::Mysql;
    expand::run(&mut n1, &mapping, dialect, false)
        .await
        .unwrap();
    let lock_name = format!("tidemark:backfill:{}", &mapping.fingerprint[..16]);
    let held = tidemark::lock::RunnerLock::acquire(&mut n1, dialect, &lock_name)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mapping_path = dir.path().join("tidemark.toml");
    std::fs::write(&mapping_path, scenario::mapping_toml("per_member", false)).unwrap();
    let backfill_on = |url: &str| {
        crate::common::bin::command()
            .env_remove("DATABASE_URL")
            .args(["backfill", "--quiet", "--database", url, "--mapping"])
            .arg(&mapping_path)
            .output()
            .unwrap()
    };
    // Another process through another node is refused while node 1's runner holds the lock.
    for url in &cluster.urls[1..] {
        let out = backfill_on(url);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{url}: {stderr}");
        assert!(
            stderr.contains("already running") && stderr.contains("Galera node"),
            "{stderr}"
        );
    }
    let mut n3 = cluster.node(2).await;
    assert!(tidemark::lock::is_held(&mut n3, dialect, &lock_name)
        .await
        .unwrap());
    held.release(&mut n1).await.unwrap();
    assert!(!tidemark::lock::is_held(&mut n3, dialect, &lock_name)
        .await
        .unwrap());
    // Free again: the backfill through node 2 runs, and releases the lock at its end.
    let out = backfill_on(&cluster.urls[1]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!tidemark::lock::is_held(&mut n1, dialect, &lock_name)
        .await
        .unwrap());
    drop((n1, n3));
    cluster.drop().await;
}

#[tokio::test]
async fn certification_conflict_is_a_lock_wait() {
    let Some(cluster) = Cluster::create("galera_cert").await else {
        return;
    };
    let mut a = cluster.node(0).await;
    let mut b = cluster.node(1).await;
    a.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT) ENGINE=InnoDB")
        .await
        .unwrap();
    a.execute("INSERT INTO t VALUES (1, 0)").await.unwrap();
    // Both nodes change the same row; the first COMMIT wins certification.
    b.execute("SELECT * FROM t").await.unwrap();
    a.execute("START TRANSACTION").await.unwrap();
    b.execute("START TRANSACTION").await.unwrap();
    a.execute("UPDATE t SET v = 1 WHERE id = 1").await.unwrap();
    b.execute("UPDATE t SET v = 2 WHERE id = 1").await.unwrap();
    a.execute("COMMIT").await.unwrap();
    let err = match b.execute("COMMIT").await {
        Ok(_) => panic!("the second COMMIT of the same row on another node passed certification"),
        Err(e) => anyhow::Error::from(e),
    };
    assert!(
        tidemark::lock::is_lock_wait(&err),
        "a certification conflict is not recognised as a lock wait: {err:#}"
    );
    let _ = b.execute("ROLLBACK").await;
    drop((a, b));
    cluster.drop().await;
}

#[tokio::test]
async fn scenarios_give_the_same_rows_as_one_server() {
    for shape in ["per_member", "per_message"] {
        let Some(cluster) = Cluster::create(&format!("galera_rows_{shape}")).await else {
            return;
        };
        let (mut a, mut b, mut c) = (cluster.node(0).await, cluster.node(1).await, {
            cluster.node(2).await
        });
        let on_cluster = pipeline(&mut a, &mut b, &mut c, shape).await;
        drop((a, b, c));
        cluster.drop().await;

        let Some(db) = TestDb::create(Backend::Mysql, &format!("galera_ref_{shape}")).await else {
            return;
        };
        let mut one = db.connect().await;
        let mut same = db.connect().await;
        let mut also = db.connect().await;
        let on_one = pipeline(&mut one, &mut same, &mut also, shape).await;
        drop((one, same, also));
        db.cleanup().await;
        assert!(
            !on_one.0.is_empty() && on_one.1.len() > 1,
            "{shape}: no rows"
        );
        assert_eq!(on_cluster.0, on_one.0, "{shape}: watermarks differ");
        assert_eq!(on_cluster.1, on_one.1, "{shape}: audit reports differ");
    }
}

#[tokio::test]
async fn contract_ddl_reaches_every_node() {
    let Some(cluster) = Cluster::create("galera_contract").await else {
        return;
    };
    let mut n1 = cluster.node(0).await;
    crate::common::exec_all(&mut n1, &scenario::schema_sql()).await;
    // Counters that a counter-evidence backfill makes consistent (a clean audit).
    for (conv, ks) in [(1, [0, 3, 0]), (2, [0, 8, 5])] {
        let msgs: Vec<String> = (1..=8)
            .map(|id| format!("({conv}, {id}, 'u0', 0, 0, NULL, NULL)"))
            .collect();
        n1.execute(format!(
            "INSERT INTO messages (conv_id, id, sender_id, is_deleted, is_system, created_at, unread_count) VALUES {}",
            msgs.join(", ")
        ).as_str())
        .await
        .unwrap();
        for (i, k) in ks.iter().enumerate() {
            n1.execute(format!(
                "INSERT INTO members (conv_id, user_id, active, join_position) VALUES ({conv}, 'u{i}', 1, NULL)"
            ).as_str())
            .await
            .unwrap();
            n1.execute(
                format!(
                    "INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES ({conv}, 'u{i}', {k})"
                )
                .as_str(),
            )
            .await
            .unwrap();
        }
    }
    let mapping = Mapping::parse(&scenario::mapping_toml("per_member", false), "<g>").unwrap();
    let dialect = Dsn::parse(&cluster.urls[0]).unwrap().dialect;
    expand::run(&mut n1, &mapping, dialect, false)
        .await
        .unwrap();
    let mut n2 = cluster.node(1).await;
    backfill::run(
        &mut n2,
        &mapping,
        dialect,
        &backfill::BackfillOptions::default(),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let aopts = audit::AuditOptions {
        report: dir.path().join("drift.csv"),
        ..Default::default()
    };
    let audited = audit::run(&mut n1, &mapping, dialect, &aopts)
        .await
        .unwrap();
    assert!(audited.summary.passed, "the audit passes");
    let opts = ContractOptions {
        execute: true,
        archive_csv: Some(dir.path().join("archive.csv")),
        lock_timeout: Duration::from_secs(5),
        ..Default::default()
    };
    contract::run(&mut n1, &mapping, dialect, &opts)
        .await
        .expect("contract --execute on node 1");
    let column_sql =
        "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() \
                      AND TABLE_NAME = 'unread_counters' AND COLUMN_NAME = ?";
    let mut counts = BTreeMap::new();
    for i in 0..cluster.urls.len() {
        let mut n = cluster.node(i).await;
        let gone: i64 = sqlx::query_scalar(column_sql)
            .bind("unread_count")
            .fetch_one(&mut n)
            .await
            .unwrap();
        let kept: i64 = sqlx::query_scalar(column_sql)
            .bind("user_id")
            .fetch_one(&mut n)
            .await
            .unwrap();
        let archived: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tidemark_counter_archive")
            .fetch_one(&mut n)
            .await
            .unwrap();
        counts.insert(i + 1, (gone, kept, archived));
    }
    for (node, (gone, kept, archived)) in &counts {
        assert_eq!(
            (*gone, *kept),
            (0, 1),
            "node {node}: unread_count still there"
        );
        assert_eq!(
            *archived, 6,
            "node {node}: the archive holds the 6 counters"
        );
    }
    drop((n1, n2));
    cluster.drop().await;
}
