//! Least privilege (issue 13, row 2): a user with SELECT only who runs `backfill`, `audit`
//! with its ledger or `contract --execute` gets "permission denied" named as such, with the
//! GRANT that is missing, exit 3 (before: "the ledger table does not exist", exit 2). Two
//! users per server, created by the test and dropped after: one with SELECT on the legacy
//! tables only, one with SELECT on every table (the ledger included). On PostgreSQL and
//! MariaDB (SQLite has no privileges).

use crate::common::{Backend, TestDb};
use crate::scenario;
use sqlx::Executor;
use tidemark::db::Dsn;
use tidemark::mapping::Mapping;
use tidemark::stages::{audit, backfill, expand};

const LEGACY: [&str; 4] = ["messages", "members", "unread_counters", "read_receipts"];
const PASSWORD: &str = "tm-ro-secret";

/// The statements that create the user `name` with SELECT on the legacy tables (and, with
/// `all`, on every table) of database `db`, and the one that drops it.
fn user_sql(backend: Backend, db: &str, name: &str, all: bool) -> (Vec<String>, String) {
    match backend {
        Backend::Postgres => {
            let mut create = vec![
                format!("DROP ROLE IF EXISTS \"{name}\""),
                format!("CREATE ROLE \"{name}\" LOGIN PASSWORD '{PASSWORD}'"),
                format!("GRANT CONNECT ON DATABASE \"{db}\" TO \"{name}\""),
                format!("GRANT USAGE ON SCHEMA public TO \"{name}\""),
            ];
            if all {
                create.push(format!(
                    "GRANT SELECT ON ALL TABLES IN SCHEMA public TO \"{name}\""
                ));
            } else {
                for t in LEGACY {
                    create.push(format!("GRANT SELECT ON \"{t}\" TO \"{name}\""));
                }
            }
            (create, format!("DROP ROLE IF EXISTS \"{name}\""))
        }
        _ => {
            let mut create = vec![
                format!("DROP USER IF EXISTS '{name}'@'%'"),
                format!("CREATE USER '{name}'@'%' IDENTIFIED BY '{PASSWORD}'"),
            ];
            if all {
                create.push(format!("GRANT SELECT ON `{db}`.* TO '{name}'@'%'"));
            } else {
                for t in LEGACY {
                    create.push(format!("GRANT SELECT ON `{db}`.`{t}` TO '{name}'@'%'"));
                }
            }
            (create, format!("DROP USER IF EXISTS '{name}'@'%'"))
        }
    }
}

async fn select_only_is_permission_denied(backend: Backend) {
    let Some(db) = TestDb::create(backend, "privs").await else {
        return;
    };
    let dialect = Dsn::parse(&db.url).unwrap().dialect;
    let mut conn = db.connect().await;
    crate::common::exec_all(&mut conn, &scenario::schema_sql()).await;
    crate::common::exec_all(
        &mut conn,
        &[
            "INSERT INTO messages (conv_id, id, sender_id) VALUES (1, 1, 'u0'), (1, 2, 'u0')".into(),
            "INSERT INTO members (conv_id, user_id) VALUES (1, 'u0'), (1, 'u1')".into(),
            "INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES (1, 'u0', 0), (1, 'u1', 2)".into(),
        ],
    )
    .await;
    let mapping_text = scenario::mapping_toml("per_member", false);
    let mapping = Mapping::parse(&mapping_text, "<privs>").unwrap();
    expand::run(&mut conn, &mapping, dialect, false)
        .await
        .unwrap();
    backfill::run(
        &mut conn,
        &mapping,
        dialect,
        &backfill::BackfillOptions::default(),
    )
    .await
    .unwrap();
    let files = tempfile::tempdir().unwrap();
    audit::run(
        &mut conn,
        &mapping,
        dialect,
        &audit::AuditOptions {
            report: files.path().join("admin.csv"),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let mapping_file = files.path().join("tidemark.toml");
    std::fs::write(&mapping_file, &mapping_text).unwrap();
    let report = files.path().join("r.csv").display().to_string();
    let admin_url = db.url.clone();
    let mut admin = crate::common::connect(&admin_url).await;

    for all in [false, true] {
        let name = format!("tm_ro_{}_{}", std::process::id(), u8::from(all));
        let (create, drop) = user_sql(backend, &db.name, &name, all);
        for s in &create {
            admin.execute(s.as_str()).await.unwrap();
        }
        let mut url = url::Url::parse(&db.url).unwrap();
        url.set_username(&name).unwrap();
        url.set_password(Some(PASSWORD)).unwrap();
        let url = url.to_string();
        let runs: [Vec<&str>; 3] = [
            vec!["backfill", "--quiet"],
            vec!["audit", "--report", &report],
            vec![
                "contract",
                "--execute",
                "--force",
                "--reason",
                "test",
                "--lock-timeout",
                "1s",
                "--audit-report",
                &report,
            ],
        ];
        let mut failures = Vec::new();
        for args in &runs {
            let out = crate::common::bin::command()
                .env_remove("DATABASE_URL")
                .args(args)
                .args(["--database", &url, "--mapping"])
                .arg(&mapping_file)
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            eprintln!(
                "{} {} all={all}: exit {:?}: {stderr}",
                backend.name(),
                args[0],
                out.status.code()
            );
            let ok = out.status.code() == Some(3)
                && stderr.contains("permission denied")
                && stderr.contains("missing: GRANT SELECT")
                && !stderr.contains(PASSWORD);
            if !ok {
                failures.push(format!(
                    "{} ({}): exit {:?}: {stderr}",
                    args[0],
                    if all {
                        "SELECT on all"
                    } else {
                        "SELECT on legacy"
                    },
                    out.status.code()
                ));
            }
        }
        admin.execute(drop.as_str()).await.ok();
        if backend == Backend::Postgres {
            // The role's grants in this database go with it above only once they are revoked.
            let _ = admin
                .execute(format!("DROP OWNED BY \"{name}\"").as_str())
                .await;
            admin.execute(drop.as_str()).await.unwrap();
        }
        assert!(
            failures.is_empty(),
            "{}:\n{}",
            backend.name(),
            failures.join("\n")
        );
    }
    // The counter was not dropped by the refused contract.
    let n: i64 = sqlx::query_scalar("SELECT COUNT(unread_count) FROM unread_counters")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(n, 2);
    drop((conn, admin));
    db.cleanup().await;
}

#[tokio::test]
async fn select_only_is_permission_denied_postgres() {
    select_only_is_permission_denied(Backend::Postgres).await;
}

#[tokio::test]
async fn select_only_is_permission_denied_mysql() {
    select_only_is_permission_denied(Backend::Mysql).await;
}
