//! `audit --read-database` on streaming replicas (issue 31): a PostgreSQL standby made by
//! `pg_basebackup -R` and a MariaDB binlog replica, both started by `.ci/replicas.sh` (from
//! `.ci/run`), their URLs in `TIDEMARK_TEST_PG_PRIMARY_URL` / `TIDEMARK_TEST_PG_REPLICA_URL`
//! and `TIDEMARK_TEST_MYSQL_PRIMARY_URL` / `TIDEMARK_TEST_MYSQL_REPLICA_URL` (each test
//! replaces the database name by its own). Without them these tests skip; with `CI` set they
//! fail, unless `TIDEMARK_SKIP_REPLICAS` is set.
//!
//! The data are the per-member scenarios (`shared/spec/scenarios.json`), loaded and
//! backfilled on the primary; once the replica has caught up (waited for here with the
//! engines' own replication positions, not with tidemark's), the audit on the replica must
//! give the primary's report byte for byte and the scenarios' expected drifting rows, with its
//! ledger row on the primary and the replica's lag in the summary. A replica whose replay is
//! paused while the primary writes is refused (exit 3, naming the lag and the limit) before
//! anything is recorded; a primary given as `--read-database` is refused (exit 2). Spider
//! tables (MariaDB primary, Spider loaded from a private plugin folder) are refused (exit 2).

use serde_json::Value;
use sqlx::Connection;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tidemark::db::Dsn;
use tidemark::mapping::Mapping;

use crate::common::{bin, exec_all, Backend, TestDb};
use crate::scenario;

/// The tests that pause a replica's replay must not overlap the others on the same pair.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Whether `TIDEMARK_SKIP_REPLICAS` is set (CI without the replica pairs: the tests skip).
fn skipped() -> bool {
    std::env::var("TIDEMARK_SKIP_REPLICAS").is_ok_and(|v| !v.is_empty())
}

/// A primary and its replica, as admin URLs.
struct Pair {
    backend: Backend,
    primary: String,
    replica: String,
}

/// The pair of `backend` from the environment, or None (a note; a failure under `CI`).
fn pair(backend: Backend) -> Option<Pair> {
    let (p, r) = match backend {
        Backend::Postgres => (
            "TIDEMARK_TEST_PG_PRIMARY_URL",
            "TIDEMARK_TEST_PG_REPLICA_URL",
        ),
        _ => (
            "TIDEMARK_TEST_MYSQL_PRIMARY_URL",
            "TIDEMARK_TEST_MYSQL_REPLICA_URL",
        ),
    };
    match (std::env::var(p), std::env::var(r)) {
        (Ok(primary), Ok(replica)) if !primary.trim().is_empty() && !replica.trim().is_empty() => {
            Some(Pair {
                backend,
                primary: primary.trim().to_string(),
                replica: replica.trim().to_string(),
            })
        }
        _ if std::env::var_os("CI").is_some() && !skipped() => {
            panic!("{p} / {r} are not set and CI is set: .ci/run starts them (.ci/replicas.sh start), or set TIDEMARK_SKIP_REPLICAS=1")
        }
        _ => {
            eprintln!("skipping: {p} / {r} are not set (.ci/replicas.sh start)");
            None
        }
    }
}

/// `url` with the database `name` in its path.
fn on_database(url: &str, name: &str) -> String {
    let mut url = url::Url::parse(url).unwrap();
    url.set_path(&format!("/{name}"));
    url.to_string()
}

/// A test database on the pair's primary, dropped by [`Fixture::cleanup`].
struct Fixture {
    pair: Pair,
    name: String,
    primary: String,
    replica: String,
    mapping: PathBuf,
    /// Drifting rows per class, as the scenarios expect them (the independent truth).
    expected: BTreeMap<String, u64>,
}

impl Fixture {
    /// The per-member scenarios (two copies) on the primary, expanded and backfilled there,
    /// the mapping saved in `dir`; waits until the replica has caught up.
    async fn new(pair: Pair, label: &str, dir: &Path) -> Fixture {
        let name = crate::common::unique_name(label);
        let admin = Dsn::parse(&pair.primary).unwrap();
        let mut conn = admin.connect().await.unwrap();
        tidemark::db::testing::recreate_database(&mut conn, &admin, &name)
            .await
            .unwrap();
        let _ = conn.close().await;
        let primary = on_database(&pair.primary, &name);
        let mut conn = crate::common::connect(&primary).await;
        exec_all(&mut conn, &scenario::schema_sql()).await;
        let scenarios: Vec<_> = scenario::load_all()
            .unwrap()
            .into_iter()
            .filter(|s| {
                !s.is_per_message() && s.options.cap.is_none() && !s.options.own_message_lower_bound
            })
            .collect();
        let mut expected = BTreeMap::new();
        let mut placed = Vec::new();
        for copy in 0..2 {
            for (j, s) in scenarios.iter().enumerate() {
                let offset = (copy * 40 + j as i64 + 1) * 100;
                exec_all(&mut conn, &scenario::data_sql(s, offset)).await;
                placed.push((s, offset));
                for row in &s.expected.audit {
                    *expected.entry(row.class.clone()).or_insert(0) += 1;
                }
            }
        }
        let text = scenario::mapping_toml("per_member", false);
        let mapping = Mapping::parse(&text, "replicas").unwrap();
        let dialect = Dsn::parse(&primary).unwrap().dialect;
        tidemark::stages::expand::run(&mut conn, &mapping, dialect, false)
            .await
            .unwrap();
        for (s, offset) in &placed {
            let sql = scenario::existing_watermarks_sql(s, *offset, scenario::WATERMARK_TABLE);
            exec_all(&mut conn, &sql).await;
        }
        let options = tidemark::stages::backfill::BackfillOptions::default();
        tidemark::stages::backfill::run(&mut conn, &mapping, dialect, &options)
            .await
            .unwrap();
        let _ = conn.close().await;
        let path = dir.join("tidemark.toml");
        std::fs::write(&path, text).unwrap();
        let replica = on_database(&pair.replica, &name);
        let fixture = Fixture {
            pair,
            name,
            primary,
            replica,
            mapping: path,
            expected,
        };
        fixture.wait_caught_up().await;
        fixture
    }

    /// Waits (at most 60 s) until the replica has replayed everything the primary has
    /// written now: PostgreSQL's WAL positions, MariaDB's GTID positions.
    async fn wait_caught_up(&self) {
        let mut primary = crate::common::connect(&self.pair.primary).await;
        let mut replica = crate::common::connect(&self.pair.replica).await;
        if self.pair.backend == Backend::Postgres {
            let target: String = sqlx::query_scalar("SELECT CAST(pg_current_wal_lsn() AS TEXT)")
                .fetch_one(&mut primary)
                .await
                .unwrap();
            let started = Instant::now();
            loop {
                let done: bool = sqlx::query_scalar(
                    "SELECT COALESCE(pg_last_wal_replay_lsn() >= CAST($1 AS pg_lsn), FALSE)",
                )
                .bind(&target)
                .fetch_one(&mut replica)
                .await
                .unwrap();
                if done {
                    break;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "replica behind"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        } else {
            let row = sqlx::query("SELECT @@gtid_binlog_pos AS pos")
                .fetch_one(&mut primary)
                .await
                .unwrap();
            let pos = tidemark::values::text(&row, "pos").unwrap().unwrap();
            let reached: i64 = sqlx::query_scalar("SELECT CAST(MASTER_GTID_WAIT(?, 60) AS SIGNED)")
                .bind(&pos)
                .fetch_one(&mut replica)
                .await
                .unwrap();
            assert_eq!(reached, 0, "the replica did not reach {pos} in 60 s");
        }
        let _ = primary.close().await;
        let _ = replica.close().await;
    }

    /// `tidemark audit` of this fixture's mapping on the primary, with `extra` arguments.
    fn audit(&self, dir: &Path, report: &str, extra: &[&str]) -> bin::Run {
        let mut args = vec![
            "audit",
            "--database",
            &self.primary,
            "--mapping",
            self.mapping.to_str().unwrap(),
            "--report",
            report,
            "--quiet",
        ];
        args.extend_from_slice(extra);
        bin::run(dir, &args)
    }

    /// The number of audit rows in the ledger of `url`'s database.
    async fn audits_in_ledger(url: &str) -> i64 {
        let mut conn = crate::common::connect(url).await;
        let n: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM tidemark_ledger WHERE stage = 'audit'")
                .fetch_one(&mut conn)
                .await
                .unwrap();
        let _ = conn.close().await;
        n
    }

    async fn cleanup(self) {
        let admin = Dsn::parse(&self.pair.primary).unwrap();
        let mut conn = admin.connect().await.unwrap();
        tidemark::db::testing::drop_database(&mut conn, &admin, &self.name)
            .await
            .unwrap();
        let _ = conn.close().await;
    }
}

fn json(run: &bin::Run) -> Value {
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", run.stdout, run.stderr))
}

/// The audit on the replica equals the audit on the primary (report bytes, summary counts),
/// both equal the scenarios' expected drifting rows, its ledger row is on the primary, and
/// the summary gives the replica and its lag (JSON and text).
async fn audit_on_replica_equals_primary(backend: Backend) {
    let Some(pair) = pair(backend) else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let f = Fixture::new(pair, "replica_equal", dir.path()).await;
    let on_primary = f.audit(dir.path(), "primary.csv", &["--format", "json"]);
    on_primary.expect_code(1);
    let before = Fixture::audits_in_ledger(&f.primary).await;
    let on_replica = f.audit(
        dir.path(),
        "replica.csv",
        &["--format", "json", "--read-database", &f.replica],
    );
    on_replica.expect_code(1);
    assert_eq!(Fixture::audits_in_ledger(&f.primary).await, before + 1);
    let (p, r) = (json(&on_primary), json(&on_replica));
    for key in [
        "rows_checked",
        "drifting_rows",
        "sum_abs_drift",
        "max_abs_drift",
        "by_class",
        "report_sha256",
    ] {
        assert_eq!(p[key], r[key], "{key}");
    }
    let bytes = |name: &str| std::fs::read(dir.path().join(name)).unwrap();
    assert_eq!(bytes("primary.csv"), bytes("replica.csv"));
    // The scenarios' own expected rows, class by class (every class the audit lists).
    let by_class: BTreeMap<String, u64> = serde_json::from_value(r["by_class"].clone()).unwrap();
    for (class, n) in &by_class {
        assert_eq!(*n, f.expected.get(class).copied().unwrap_or(0), "{class}");
    }
    assert_eq!(
        r["drifting_rows"].as_u64().unwrap(),
        f.expected.values().sum::<u64>()
    );
    assert!(p.get("replica").is_none(), "{p}");
    let replica = &r["replica"];
    let port = url::Url::parse(&f.replica).unwrap().port().unwrap();
    assert!(
        replica["url"]
            .as_str()
            .unwrap()
            .contains(&format!(":{port}/")),
        "{replica}"
    );
    assert_eq!(replica["max_lag_ms"], 30_000, "{replica}");
    assert!(replica["lag_ms"].as_u64().unwrap() <= 30_000, "{replica}");
    // The text summary names it too.
    let text = f.audit(dir.path(), "text.csv", &["--read-database", &f.replica]);
    text.expect_code(1);
    eprintln!("{}", text.stdout);
    assert!(
        text.stdout.contains("read on replica") && text.stdout.contains("--max-replica-lag 30s"),
        "{}",
        text.stdout
    );
    f.cleanup().await;
}

/// Pauses the replica's replay (PostgreSQL `pg_wal_replay_pause()`, MariaDB
/// `STOP SLAVE SQL_THREAD`) or resumes it.
async fn set_replay(pair: &Pair, paused: bool) {
    let mut replica = crate::common::connect(&pair.replica).await;
    let sql = match (pair.backend, paused) {
        (Backend::Postgres, true) => "SELECT pg_wal_replay_pause()",
        (Backend::Postgres, false) => "SELECT pg_wal_replay_resume()",
        (_, true) => "STOP SLAVE SQL_THREAD",
        (_, false) => "START SLAVE SQL_THREAD",
    };
    sqlx::raw_sql(sql).execute(&mut replica).await.unwrap();
    let _ = replica.close().await;
}

/// A replica whose replay is paused while the primary writes is refused with exit 3, naming
/// its lag and the limit, before any ledger row is written; resumed, it is accepted again.
async fn lagging_replica_is_refused(backend: Backend) {
    let Some(pair) = pair(backend) else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let f = Fixture::new(pair, "replica_lag", dir.path()).await;
    let before = Fixture::audits_in_ledger(&f.primary).await;
    set_replay(&f.pair, true).await;
    let refused = async {
        let mut conn = crate::common::connect(&f.primary).await;
        sqlx::raw_sql("UPDATE unread_counters SET unread_count = unread_count + 1")
            .execute(&mut conn)
            .await
            .unwrap();
        let _ = conn.close().await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let args = ["--read-database", &f.replica, "--max-replica-lag", "1s"];
        f.audit(dir.path(), "lag.csv", &args)
    }
    .await;
    set_replay(&f.pair, false).await;
    refused.expect_code(3);
    eprintln!("{}", refused.stderr);
    for part in [
        "lags at least",
        "more than --max-replica-lag 1s",
        "leave --read-database out",
    ] {
        assert!(
            refused.stderr.contains(part),
            "{part:?} in {}",
            refused.stderr
        );
    }
    assert_eq!(Fixture::audits_in_ledger(&f.primary).await, before);
    // Caught up again: accepted (the counters drift now: exit 1).
    f.wait_caught_up().await;
    let args = ["--read-database", &f.replica, "--max-replica-lag", "10s"];
    f.audit(dir.path(), "lag.csv", &args).expect_code(1);
    f.cleanup().await;
}

/// A primary (the test server itself) given as `--read-database` is refused with exit 2, as
/// is a replica URL of another engine, `--read-database` on SQLite, and `--max-replica-lag`
/// without `--read-database`.
async fn a_primary_is_not_a_replica(backend: Backend) {
    let Some(db) = TestDb::create(backend, "replica_primary").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mapping = dir.path().join("tidemark.toml");
    std::fs::write(&mapping, scenario::mapping_toml("per_member", false)).unwrap();
    let mut conn = db.connect().await;
    exec_all(&mut conn, &scenario::schema_sql()).await;
    let _ = conn.close().await;
    let run = |read: &str| {
        bin::run(
            dir.path(),
            &[
                "audit",
                "--database",
                &db.url,
                "--mapping",
                mapping.to_str().unwrap(),
                "--read-database",
                read,
            ],
        )
    };
    let same = run(&db.url);
    same.expect_code(2);
    let want = match backend {
        Backend::Sqlite => "this engine has no replicas",
        Backend::Postgres => "pg_is_in_recovery() is false",
        Backend::Mysql => "SHOW REPLICA STATUS returns no row",
    };
    assert!(same.stderr.contains(want), "{}", same.stderr);
    let other = match backend {
        Backend::Postgres => "mysql://root@127.0.0.1:1/x",
        _ => "postgres://postgres@127.0.0.1:1/x",
    };
    let other = run(other);
    other.expect_code(2);
    assert!(
        other.stderr.contains("a replica runs its primary's engine"),
        "{}",
        other.stderr
    );
    // A limit without a replica is a mistake, not ignored.
    let args = ["audit", "--database", &db.url, "--max-replica-lag", "5s"];
    let alone = bin::run(dir.path(), &args);
    alone.expect_code(2);
    assert!(alone.stderr.contains("--read-database"), "{}", alone.stderr);
    db.cleanup().await;
}

/// Spider tables (issue 31) are refused by `audit` and `backfill` with exit 2, naming them and
/// pointing at per-shard URLs: the scenarios' schema in a shard database `<name>_s1`, and in
/// `<name>` the mapped tables as Spider tables over it (through the primary's own port).
async fn spider_tables_are_refused() {
    let Some(pair) = pair(Backend::Mysql) else {
        return;
    };
    let mut admin = crate::common::connect(&pair.primary).await;
    let spider: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.ENGINES WHERE ENGINE = 'SPIDER' AND SUPPORT IN ('YES', 'DEFAULT')",
    )
    .fetch_one(&mut admin)
    .await
    .unwrap();
    if spider == 0 {
        assert!(
            std::env::var_os("CI").is_none() || skipped(),
            "the MariaDB primary on the replica pair has no Spider engine and CI is set"
        );
        eprintln!("skipping: no Spider engine on {}", pair.primary);
        return;
    }
    // Databases named tidemark_spider* are not replicated (.ci/replicas.sh).
    let name = crate::common::unique_name("x").replace("tm_x", "tidemark_spider");
    let url = url::Url::parse(&pair.primary).unwrap();
    let port = url.port().unwrap_or(3306);
    let host = url.host_str().unwrap().to_string();
    let mut ddl = vec![
        format!("DROP DATABASE IF EXISTS {name}_s1"),
        format!("DROP DATABASE IF EXISTS {name}"),
        format!("CREATE DATABASE {name}_s1"),
        format!("CREATE DATABASE {name}"),
        format!("USE {name}_s1"),
    ];
    ddl.extend(scenario::schema_sql());
    ddl.push(format!("USE {name}"));
    let tables = ["messages", "members", "unread_counters", "read_receipts"];
    exec_all(&mut admin, &ddl).await;
    for t in tables {
        let rows = sqlx::query(&format!(
            "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = '{name}_s1' AND TABLE_NAME = '{t}' ORDER BY ORDINAL_POSITION"
        ))
        .fetch_all(&mut admin)
        .await
        .unwrap();
        let columns: Vec<String> = rows
            .iter()
            .map(|r| {
                format!(
                    "`{}` {}",
                    tidemark::values::text(r, 0).unwrap().unwrap(),
                    tidemark::values::text(r, 1).unwrap().unwrap()
                )
            })
            .collect();
        if columns.is_empty() {
            continue;
        }
        let create = format!(
            "CREATE TABLE {name}.{t} ({}) ENGINE=SPIDER COMMENT='wrapper \"mysql\", host \"{host}\", port \"{port}\", user \"root\", database \"{name}_s1\", table \"{t}\"'",
            columns.join(", ")
        );
        sqlx::raw_sql(&create).execute(&mut admin).await.unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let mapping = dir.path().join("tidemark.toml");
    std::fs::write(&mapping, scenario::mapping_toml("per_member", false)).unwrap();
    let db_url = on_database(&pair.primary, &name);
    for command in ["audit", "backfill"] {
        let run = bin::run(
            dir.path(),
            &[
                command,
                "--database",
                &db_url,
                "--mapping",
                mapping.to_str().unwrap(),
                "--quiet",
            ],
        );
        run.expect_code(2);
        for part in ["Spider", "messages", "per-shard", "--database"] {
            assert!(
                run.stderr.contains(part),
                "{command}: {part:?} in {}",
                run.stderr
            );
        }
    }
    let drop = vec![
        format!("DROP DATABASE IF EXISTS {name}"),
        format!("DROP DATABASE IF EXISTS {name}_s1"),
    ];
    exec_all(&mut admin, &drop).await;
    let _ = admin.close().await;
}

#[tokio::test]
async fn spider() {
    spider_tables_are_refused().await;
}

mod audit_on_replica {
    use super::*;

    #[tokio::test]
    async fn postgres() {
        audit_on_replica_equals_primary(Backend::Postgres).await;
    }

    #[tokio::test]
    async fn mysql() {
        audit_on_replica_equals_primary(Backend::Mysql).await;
    }
}

mod lagging_replica {
    use super::*;

    #[tokio::test]
    async fn postgres() {
        lagging_replica_is_refused(Backend::Postgres).await;
    }

    #[tokio::test]
    async fn mysql() {
        lagging_replica_is_refused(Backend::Mysql).await;
    }
}

mod not_a_replica {
    use super::*;

    #[tokio::test]
    async fn sqlite() {
        a_primary_is_not_a_replica(Backend::Sqlite).await;
    }

    #[tokio::test]
    async fn postgres() {
        a_primary_is_not_a_replica(Backend::Postgres).await;
    }

    #[tokio::test]
    async fn mysql() {
        a_primary_is_not_a_replica(Backend::Mysql).await;
    }
}
