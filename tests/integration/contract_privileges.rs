//! `contract` by a user who may read and write everything tidemark needs but not change the
//! counter's table (issue 13, "Least privilege"): the dry run names the missing grant, and
//! `--execute` is refused as "permission denied" naming the GRANT (exit 3) before the final
//! audit, the archive or the DDL write anything. With the grant (MariaDB `ALTER` and `LOCK TABLES`; PostgreSQL
//! membership in the owning role) the same command drops the column. On PostgreSQL and
//! MariaDB (SQLite has no privileges).

use sqlx::Connection;

use crate::common::faults::{counter_column_exists, scalar, statuses, Fixture};
use crate::common::{exec_all, on_every_backend, Backend, TestDb};
use crate::scenario;

const PASSWORD: &str = "tm-ddl-pw";
const SCENARIO: &str = "S1b-duplicate-delivery-overcount";

on_every_backend!(servers: contract_without_alter_is_refused_before_the_archive);

/// The SQL that makes the test user `user` (who may read and write the rows of database
/// `name` but not alter its tables), that drops it, and that grants it the DDL, in order; with
/// the user as the grants name it. `owner` is the PostgreSQL role that owns the tables.
fn user_statements(
    backend: Backend,
    user: &str,
    name: &str,
    owner: &str,
) -> (String, Vec<String>, Vec<String>, Vec<String>) {
    match backend {
        Backend::Postgres => {
            let who = format!("\"{user}\"");
            (
                who.clone(),
                vec![
                    format!("DROP ROLE IF EXISTS {who}"),
                    format!("CREATE ROLE {who} LOGIN PASSWORD '{PASSWORD}'"),
                    format!("GRANT CONNECT ON DATABASE \"{name}\" TO {who}"),
                    format!("GRANT USAGE ON SCHEMA public TO {who}"),
                    format!("GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA public TO {who}"),
                ],
                vec![
                    format!("DROP OWNED BY {who}"),
                    format!("DROP ROLE IF EXISTS {who}"),
                ],
                // The tables belong to the admin role: membership in it is the right to alter.
                vec![format!("GRANT \"{owner}\" TO {who}")],
            )
        }
        _ => {
            let who = format!("'{user}'@'%'");
            (
                who.clone(),
                vec![
                    format!("DROP USER IF EXISTS {who}"),
                    format!("CREATE USER {who} IDENTIFIED BY '{PASSWORD}'"),
                    format!("GRANT SELECT, INSERT, UPDATE ON `{name}`.* TO {who}"),
                ],
                vec![format!("DROP USER IF EXISTS {who}")],
                vec![
                    format!("GRANT ALTER ON `{name}`.`unread_counters` TO {who}"),
                    format!("GRANT LOCK TABLES ON `{name}`.* TO {who}"),
                ],
            )
        }
    }
}

async fn contract_without_alter_is_refused_before_the_archive(backend: Backend) {
    let Some(db) = TestDb::create(backend, "ddlpriv").await else {
        return;
    };
    let mut admin = db.connect().await;
    let s = scenario::load_one(&mut admin, SCENARIO).await;
    let name = db.name.clone();
    let f = Fixture::with_mapping(db, &s.mapping_toml());
    f.run(&["backfill", "--quiet"]).expect_code(0);

    let user = format!("tm_ddl_{}", std::process::id());
    let owner: String = match backend {
        Backend::Postgres => sqlx::query_scalar("SELECT CAST(current_user AS TEXT)")
            .fetch_one(&mut admin)
            .await
            .unwrap(),
        _ => String::new(),
    };
    let (who, create, drop, grant_ddl) = user_statements(backend, &user, &name, &owner);
    exec_all(&mut admin, &create).await;
    if backend == Backend::Mysql {
        // On a Galera node the runner lock is a row of tidemark_lock, created on first use:
        // by the admin here, the user then needs only to write its rows (README).
        let mut conn = f.connect().await;
        if tidemark::dialect::mysql::galera::is_galera(&mut conn)
            .await
            .unwrap()
        {
            let lock = tidemark::lock::RunnerLock::acquire(
                &mut conn,
                tidemark::dialect::Dialect::Mysql,
                "tidemark:test:create",
            )
            .await
            .unwrap();
            lock.release(&mut conn).await.unwrap();
            exec_all(
                &mut admin,
                &[format!("GRANT DELETE ON `{name}`.`tidemark_lock` TO {who}")],
            )
            .await;
        }
        let _ = conn.close().await;
    }
    let mut url = url::Url::parse(&f.db.url).unwrap();
    url.set_username(&user).unwrap();
    url.set_password(Some(PASSWORD)).unwrap();
    std::fs::write(f.path().join("url.txt"), url.as_str()).unwrap();
    let as_user = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--database-file", "url.txt", "--mapping", "m.toml"]);
        crate::common::bin::run(f.path(), &all)
    };

    // The dry run says what is missing.
    let dry = as_user(&["contract"]);
    assert!(
        dry.stdout.contains("permission denied") && dry.stdout.contains("missing: GRANT"),
        "the dry run names the missing grant: {dry:?}"
    );
    // --execute is refused before anything is written.
    let ledger_before = statuses(&mut admin, "audit").await.len();
    let run = as_user(&[
        "contract",
        "--execute",
        "--quiet",
        "--force",
        "--reason",
        "privilege test",
    ]);
    run.expect_code(3);
    assert!(
        run.stderr.contains("permission denied")
            && run.stderr.contains("missing: GRANT")
            && run.stderr.contains(&who)
            && !run.stderr.contains(PASSWORD),
        "{run:?}"
    );
    eprintln!("{}: {}", backend.name(), run.stderr.trim());
    assert_eq!(
        scalar(&mut admin, "SELECT COUNT(*) FROM tidemark_counter_archive").await,
        0,
        "no archive"
    );
    assert_eq!(
        statuses(&mut admin, "audit").await.len(),
        ledger_before,
        "no final audit"
    );
    assert!(
        statuses(&mut admin, "contract").await.is_empty(),
        "no contract run"
    );
    assert!(counter_column_exists(&mut admin, backend).await);

    // With the grant, the same command drops the column. (MariaDB: ALTER alone is not
    // enough, the DDL runs under LOCK TABLES; the dry run names that grant next.)
    for (i, grant) in grant_ddl.iter().enumerate() {
        if i > 0 {
            let dry = as_user(&["contract"]);
            assert!(
                dry.stdout.contains("missing: GRANT LOCK TABLES"),
                "the dry run names the next missing grant: {dry:?}"
            );
        }
        exec_all(&mut admin, std::slice::from_ref(grant)).await;
    }
    let dry = as_user(&["contract"]);
    assert!(!dry.stdout.contains("permission denied"), "{dry:?}");
    as_user(&[
        "contract",
        "--execute",
        "--quiet",
        "--force",
        "--reason",
        "privilege test",
    ])
    .expect_code(0);
    assert!(!counter_column_exists(&mut admin, backend).await);

    for sql in drop {
        let _ = sqlx::query(&sql).execute(&mut admin).await;
    }
    let _ = admin.close().await;
    f.db.cleanup().await;
}
