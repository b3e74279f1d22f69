//! Least privilege (issue 13): the book's minimal grant per stage (`docs/src/least-privilege.md`) is
//! enough, and the stage after it is refused as "permission denied" (exit 3) until its own
//! grant is added. One user per server, created by the test, its grants added stage by stage:
//! `audit --no-ledger`, then `status` and `plan`, then `backfill`, then `audit` with its
//! ledger and `--store-rows`. On PostgreSQL and MariaDB (SQLite has no privileges).

use sqlx::Connection;

use crate::common::bin::{run, Run};
use crate::common::{exec_all, on_every_backend, Backend, TestDb};
use crate::scenario;

const PASSWORD: &str = "tm-least-pw";
const SCENARIO: &str = "S1b-duplicate-delivery-overcount";

on_every_backend!(servers: each_stage_runs_with_its_documented_grant);

/// The book's GRANT statements (`docs/src/least-privilege.md`) for `stage` (cumulative: run them in order).
fn grants(backend: Backend, db: &str, who: &str, stage: &str) -> Vec<String> {
    let pg = backend == Backend::Postgres;
    let on = |t: &str| {
        if pg {
            format!("\"{t}\"")
        } else {
            format!("`{db}`.`{t}`")
        }
    };
    let grant = |what: &str, tables: &[&str]| -> Vec<String> {
        tables
            .iter()
            .map(|t| format!("GRANT {what} ON {} TO {who}", on(t)))
            .collect()
    };
    match stage {
        "audit --no-ledger" => {
            let mut v = Vec::new();
            if pg {
                v.push(format!("GRANT CONNECT ON DATABASE \"{db}\" TO {who}"));
                v.push(format!("GRANT USAGE ON SCHEMA public TO {who}"));
            }
            v.extend(grant(
                "SELECT",
                &[
                    "messages",
                    "members",
                    "unread_counters",
                    "read_receipts",
                    scenario::WATERMARK_TABLE,
                ],
            ));
            v
        }
        "status" => grant("SELECT", &["tidemark_ledger", "tidemark_schema_history"]),
        "backfill" => {
            let mut v = grant(
                "SELECT, INSERT, UPDATE",
                &[scenario::WATERMARK_TABLE, "tidemark_ledger"],
            );
            if !pg {
                // Last: the test grants it apart, to see the backfill refused without it.
                v.push(format!(
                    "GRANT CREATE TEMPORARY TABLES ON `{db}`.* TO {who}"
                ));
            }
            v
        }
        "audit" => grant("SELECT, INSERT", &["tidemark_drift_rows"]),
        other => panic!("no stage {other}"),
    }
}

async fn each_stage_runs_with_its_documented_grant(backend: Backend) {
    let Some(db) = TestDb::create(backend, "leastpriv").await else {
        return;
    };
    let mut admin = db.connect().await;
    let s = scenario::load_one(&mut admin, SCENARIO).await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("m.toml"), s.mapping_toml()).unwrap();
    run(d, &["expand", "--database", &db.url, "--mapping", "m.toml"]).expect_code(0);

    let name = format!("tm_least_{}", std::process::id());
    let (who, create, drop) = match backend {
        Backend::Postgres => (
            format!("\"{name}\""),
            vec![
                format!("DROP ROLE IF EXISTS \"{name}\""),
                format!("CREATE ROLE \"{name}\" LOGIN PASSWORD '{PASSWORD}'"),
            ],
            vec![
                format!("DROP OWNED BY \"{name}\""),
                format!("DROP ROLE IF EXISTS \"{name}\""),
            ],
        ),
        _ => (
            format!("'{name}'@'%'"),
            vec![
                format!("DROP USER IF EXISTS '{name}'@'%'"),
                format!("CREATE USER '{name}'@'%' IDENTIFIED BY '{PASSWORD}'"),
            ],
            vec![format!("DROP USER IF EXISTS '{name}'@'%'")],
        ),
    };
    exec_all(&mut admin, &create).await;
    let mut url = url::Url::parse(&db.url).unwrap();
    url.set_username(&name).unwrap();
    url.set_password(Some(PASSWORD)).unwrap();
    url.set_host(Some("127.0.0.1")).unwrap();
    std::fs::write(d.join("url.txt"), url.as_str()).unwrap();
    let as_user = |args: &[&str]| -> Run {
        let mut all = args.to_vec();
        all.extend(["--database-file", "url.txt", "--mapping", "m.toml"]);
        run(d, &all)
    };
    let denied = |r: &Run, what: &str| {
        assert_eq!(r.code, Some(3), "{what}: {r:?}");
        assert!(r.stderr.contains("permission denied"), "{what}: {r:?}");
    };

    // Nothing granted yet: even the read-only audit is refused.
    let r = as_user(&["audit", "--no-ledger", "--quiet"]);
    assert_ne!(r.code, Some(0), "{r:?}");
    assert_ne!(r.code, Some(1), "{r:?}");

    exec_all(
        &mut admin,
        &grants(backend, &db.name, &who, "audit --no-ledger"),
    )
    .await;
    as_user(&["audit", "--no-ledger", "--quiet", "--report", "a.csv"]).expect_code(1);
    denied(
        &as_user(&["backfill", "--quiet"]),
        "backfill with the audit grant",
    );
    denied(
        &as_user(&["audit", "--quiet"]),
        "audit (ledger) with the --no-ledger grant",
    );

    exec_all(&mut admin, &grants(backend, &db.name, &who, "status")).await;
    as_user(&["plan"]).expect_code(0);
    let st = as_user(&["status"]);
    assert!(matches!(st.code, Some(0 | 1)), "{st:?}");

    let mut backfill_grants = grants(backend, &db.name, &who, "backfill");
    if backend != Backend::Postgres {
        // MySQL/MariaDB plan each batch in a temporary table: without CREATE TEMPORARY
        // TABLES the backfill is refused before it writes, naming that grant.
        let temp = backfill_grants.pop().unwrap();
        exec_all(&mut admin, &backfill_grants).await;
        let r = as_user(&["backfill", "--quiet"]);
        denied(&r, "backfill without CREATE TEMPORARY TABLES");
        assert!(
            r.stderr
                .contains("missing: GRANT CREATE TEMPORARY TABLES ON"),
            "{r:?}"
        );
        backfill_grants = vec![temp];
    }
    exec_all(&mut admin, &backfill_grants).await;
    as_user(&["backfill", "--quiet"]).expect_code(0);
    // The ledger grant of backfill is the audit's: the audit with its ledger runs.
    as_user(&["audit", "--quiet", "--report", "b.csv"]).expect_code(1);
    denied(
        &as_user(&["audit", "--quiet", "--store-rows", "--report", "c.csv"]),
        "audit --store-rows without the drift rows grant",
    );
    exec_all(&mut admin, &grants(backend, &db.name, &who, "audit")).await;
    as_user(&["audit", "--quiet", "--store-rows", "--report", "c.csv"]).expect_code(1);

    for sql in drop {
        let _ = sqlx::query(&sql).execute(&mut admin).await;
    }
    let _ = admin.close().await;
    db.cleanup().await;
}
