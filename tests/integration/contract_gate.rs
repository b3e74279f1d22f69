//! The contract gate and the contract's safety (issue 29, rows 1, 7, 8 and 10; semantics.md,
//! "The gate before the drop"):
//!
//! - row 1: a function or procedure whose body writes the counter column (a PL/pgSQL trigger
//!   function, which `pg_depend` does not track; a MariaDB stored procedure) closes the gate,
//!   named; a function whose body cannot be read (PostgreSQL `internal`) is a note;
//! - row 7: the final audit's report goes to the working directory (not a predictable path in
//!   `/tmp`), is created 0600, and a file there that belongs to another user is refused
//!   (exit 2) before anything is written;
//! - row 8 (PostgreSQL): a view over a partition's counter closes the gate; `inspect` shows
//!   the partitioned table as one table, not its partitions;
//! - row 10: `contract --execute` drops nothing while a backfill of the mapping runs (exit 3,
//!   naming it), `--force` or not.

use sqlx::{AnyConnection, Connection};
use std::path::Path;
use std::time::Duration;

use crate::common::faults::{self, counter_column_exists, statuses, wait, Fixture};
use crate::common::{bin, exec_all, on_every_backend, Backend, TestDb};
use crate::scenario;

/// A scenario with no drift at all after the backfill.
const CLEAN_SCENARIO: &str = "S3a-multi-device-receipts";

/// The longest a spawned run may take.
const LIMIT: Duration = Duration::from_secs(120);

/// A database with the clean scenario loaded, `setup` run on it, then expand, backfill and a
/// clean audit through the binary (mapping `tidemark.toml` in the returned folder).
async fn audited(
    backend: Backend,
    label: &str,
    setup: &[String],
) -> Option<(TestDb, tempfile::TempDir, AnyConnection)> {
    let db = TestDb::create(backend, label).await?;
    let dir = tempfile::tempdir().unwrap();
    let mut conn = db.connect().await;
    scenario::load_one(&mut conn, CLEAN_SCENARIO).await;
    exec_all(&mut conn, setup).await;
    std::fs::write(
        dir.path().join("tidemark.toml"),
        scenario::mapping_toml("per_member", false),
    )
    .unwrap();
    let url = db.url.as_str();
    bin::run(dir.path(), &["expand", "--database", url]).expect_code(0);
    bin::run(dir.path(), &["backfill", "--database", url, "--quiet"]).expect_code(0);
    bin::run(
        dir.path(),
        &["audit", "--database", url, "--report", "a.csv", "--quiet"],
    )
    .expect_code(0);
    Some((db, dir, conn))
}

/// `contract` (dry run) in `dir`; its exit code is `want`; returns its standard output.
fn dry_run(dir: &Path, url: &str, want: i32) -> String {
    let run = bin::run(dir, &["contract", "--database", url]);
    run.expect_code(want);
    run.stdout
}

on_every_backend!(servers: a_routine_that_writes_the_counter_closes_the_gate);

/// Row 1. PostgreSQL: a PL/pgSQL trigger function on `messages` that bumps the counter is in
/// no `pg_depend` row; before the fix the gate was open and `--execute` dropped the column,
/// after which every INSERT INTO messages failed. MariaDB: a stored procedure that writes the
/// counter (triggers were found already). Now the gate closes naming the routine; a function
/// that names the column of another table (messages.unread_count) does not close it, and an
/// `internal` function (its body is a symbol, not SQL) is a note.
async fn a_routine_that_writes_the_counter_closes_the_gate(backend: Backend) {
    let Some((db, dir, mut conn)) = audited(backend, "gate_routine", &[]).await else {
        return;
    };
    let (url, dir) = (db.url.as_str(), dir.path());
    let (other, writer, name) = match backend {
        Backend::Postgres => (
            vec![
                "CREATE FUNCTION count_messages() RETURNS trigger LANGUAGE plpgsql AS $$ \
                 BEGIN UPDATE messages SET unread_count = 0 WHERE id = NEW.id; RETURN NEW; END $$"
                    .to_string(),
                "CREATE FUNCTION tm_abs(integer) RETURNS integer LANGUAGE internal AS 'int4abs'"
                    .to_string(),
            ],
            vec![
                "CREATE FUNCTION bump_unread() RETURNS trigger LANGUAGE plpgsql AS $$ \
                 BEGIN UPDATE unread_counters SET unread_count = unread_count + 1 \
                 WHERE conv_id = NEW.conv_id; RETURN NEW; END $$"
                    .to_string(),
                "CREATE TRIGGER bump AFTER INSERT ON messages FOR EACH ROW \
                 EXECUTE FUNCTION bump_unread()"
                    .to_string(),
            ],
            "function public.bump_unread()".to_string(),
        ),
        _ => (
            vec!["CREATE PROCEDURE count_messages(m BIGINT) \
                 UPDATE messages SET unread_count = 0 WHERE id = m"
                .to_string()],
            vec!["CREATE PROCEDURE bump_unread(c BIGINT) \
                 UPDATE unread_counters SET unread_count = unread_count + 1 WHERE conv_id = c"
                .to_string()],
            format!("procedure {}.bump_unread", db.name),
        ),
    };
    exec_all(&mut conn, &other).await;
    let open = dry_run(dir, url, 0);
    assert!(open.contains("gate: OPEN"), "{open}");
    assert!(!open.contains("count_messages"), "{open}");
    if backend == Backend::Postgres {
        assert!(
            open.contains("function public.tm_abs(integer) (language internal): tidemark cannot read its body"),
            "the unreadable body is a note:\n{open}"
        );
    }

    exec_all(&mut conn, &writer).await;
    let closed = dry_run(dir, url, 1);
    assert!(closed.contains("gate: CLOSED"), "{closed}");
    assert!(
        closed.contains(&format!(
            "{name} depends on unread_count: drop or change it first"
        )),
        "the reason names the routine:\n{closed}"
    );
    let refused = bin::run(
        dir,
        &["contract", "--database", url, "--execute", "--quiet"],
    );
    refused.expect_code(1);
    assert!(counter_column_exists(&mut conn, backend).await);
    // The application still works: a message insert bumps the counter (PostgreSQL's trigger).
    if backend == Backend::Postgres {
        exec_all(
            &mut conn,
            &["INSERT INTO messages (conv_id, id, sender_id) VALUES (1, 999999, 'x')".to_string()],
        )
        .await;
    }
    conn.close().await.unwrap();
    db.cleanup().await;
}

/// The statements that make `unread_counters` a table range-partitioned on `conv_id` (two
/// partitions, `unread_counters_lo` below 100000 and `unread_counters_hi`) holding the same
/// rows.
fn partitioned_counters() -> Vec<String> {
    [
        "ALTER TABLE unread_counters RENAME TO uc_old",
        "CREATE TABLE unread_counters (conv_id BIGINT NOT NULL, user_id VARCHAR(64) NOT NULL, \
         unread_count INT NULL, PRIMARY KEY (conv_id, user_id)) PARTITION BY RANGE (conv_id)",
        "CREATE TABLE unread_counters_lo PARTITION OF unread_counters \
         FOR VALUES FROM (MINVALUE) TO (100000)",
        "CREATE TABLE unread_counters_hi PARTITION OF unread_counters \
         FOR VALUES FROM (100000) TO (MAXVALUE)",
        "INSERT INTO unread_counters SELECT * FROM uc_old",
        "DROP TABLE uc_old",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Row 8 (PostgreSQL): a view over a partition's counter column was not found (the gate was
/// open, and `--execute` archived and then failed on the DDL); now it closes the gate, named.
/// `inspect` proposed each partition as a table of its own; now the partitioned table is one.
#[tokio::test]
async fn a_view_over_a_partition_closes_the_gate() {
    let setup = partitioned_counters();
    let Some((db, dir, mut conn)) = audited(Backend::Postgres, "gate_partition", &setup).await
    else {
        return;
    };
    let (url, dir) = (db.url.as_str(), dir.path());
    let n = faults::scalar(&mut conn, "SELECT COUNT(*) FROM unread_counters_lo").await;
    assert!(n > 0, "the low partition holds rows: {n}");
    let open = dry_run(dir, url, 0);
    assert!(open.contains("gate: OPEN"), "{open}");

    exec_all(
        &mut conn,
        &["CREATE VIEW lo_badges AS SELECT conv_id, user_id, unread_count FROM unread_counters_lo"
            .to_string()],
    )
    .await;
    let closed = dry_run(dir, url, 1);
    assert!(
        closed.contains("view public.lo_badges depends on unread_count: drop or change it first"),
        "the view over the partition is named:\n{closed}"
    );
    bin::run(
        dir,
        &["contract", "--database", url, "--execute", "--quiet"],
    )
    .expect_code(1);
    assert!(counter_column_exists(&mut conn, Backend::Postgres).await);

    let inspect = bin::run(dir, &["inspect", "--database", url]);
    assert!(matches!(inspect.code, Some(0 | 1)), "inspect: {inspect:?}");
    let out = format!("{}{}", inspect.stdout, inspect.stderr);
    assert!(out.contains("unread_counters"), "{out}");
    assert!(
        !out.contains("unread_counters_lo") && !out.contains("unread_counters_hi"),
        "no partition is shown as a table:\n{out}"
    );
    conn.close().await.unwrap();
    db.cleanup().await;
}

on_every_backend!(final_audit_report_stays_private);

/// Row 7: the final audit's report went to `/tmp/tidemark-contract-<fp>-audit.csv`, a path
/// any local user could create first (the report was then written through and kept their
/// ownership). Now: a file of another user at the report's path is refused (exit 2, named,
/// nothing written: no contract run in the ledger, the column still there); without it the
/// report is written in the working directory, mode 0600, owned by the runner.
async fn final_audit_report_stays_private(backend: Backend) {
    let Some((db, dir, mut conn)) = audited(backend, "gate_report", &[]).await else {
        return;
    };
    let (url, dir) = (db.url.as_str(), dir.path());
    let report = dir.join("tidemark-contract-audit.csv");
    let me = std::fs::metadata(dir).map(|m| std::os::unix::fs::MetadataExt::uid(&m));
    if me.as_ref().is_ok_and(|uid| *uid == 0) {
        // Root can give the planted file to another user (65534: nobody).
        std::fs::write(&report, "planted").unwrap();
        std::os::unix::fs::chown(&report, Some(65534), Some(65534)).unwrap();
        let refused = bin::run(
            dir,
            &["contract", "--database", url, "--execute", "--quiet"],
        );
        refused.expect_code(2);
        assert!(
            refused.stderr.contains(&format!("{}", report.display()))
                || refused.stderr.contains("tidemark-contract-audit.csv"),
            "the file is named:\n{}",
            refused.stderr
        );
        assert!(
            refused.stderr.contains("another user"),
            "{}",
            refused.stderr
        );
        assert_eq!(std::fs::read_to_string(&report).unwrap(), "planted");
        assert!(statuses(&mut conn, "contract").await.is_empty());
        assert!(counter_column_exists(&mut conn, backend).await);
        std::fs::remove_file(&report).unwrap();
    } else {
        eprintln!("not root: the planted file of another user is not tried");
    }

    let done = bin::run(
        dir,
        &["contract", "--database", url, "--execute", "--quiet"],
    );
    done.expect_code(0);
    let meta = std::fs::symlink_metadata(&report).expect("the report is in the working folder");
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    assert!(meta.file_type().is_file());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(meta.uid(), std::fs::metadata(dir).unwrap().uid());
    assert!(!counter_column_exists(&mut conn, backend).await);
    assert!(
        faults::files(dir).iter().all(|f| !f.ends_with(".tmp")),
        "no temporary file left: {:?}",
        faults::files(dir)
    );
    conn.close().await.unwrap();
    db.cleanup().await;
}

on_every_backend!(no_drop_while_a_backfill_runs);

/// Row 10: `contract --execute --force --reason x` while a backfill of the same mapping runs
/// dropped the column under it. Now the contract takes the backfill's runner lock: with a
/// backfill waiting on its pause file, `--execute` exits 3 naming the running backfill, with
/// and without `--force`, and the column stays; once the backfill ends, the drop goes on.
async fn no_drop_while_a_backfill_runs(backend: Backend) {
    let Some((db, dir, conn)) = audited(backend, "gate_backfill", &[]).await else {
        return;
    };
    let _ = conn.close().await;
    let f = Fixture::with_mapping(db, &scenario::mapping_toml("per_member", false));
    drop(dir);
    let mut admin = f.connect().await;
    let pause = f.path().join("pause");
    std::fs::write(&pause, "").unwrap();
    let child = f.spawn(
        &[
            "backfill",
            "--quiet",
            "--pause-file",
            pause.to_str().unwrap(),
        ],
        &[],
    );
    let started = std::time::Instant::now();
    while statuses(&mut admin, "backfill").await.len() < 2 {
        assert!(
            started.elapsed() < LIMIT,
            "the second backfill never started"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for force in [true, false] {
        let mut args = vec!["contract", "--execute", "--quiet"];
        if force {
            args.extend(["--force", "--reason", "testing the runner lock"]);
        }
        let refused = f.run(&args);
        refused.expect_code(3);
        assert!(
            refused
                .stderr
                .contains("a backfill of this mapping is running"),
            "the running backfill is named (force: {force}):\n{}",
            refused.stderr
        );
        assert!(
            refused.stderr.contains("tidemark:backfill:"),
            "the lock is named:\n{}",
            refused.stderr
        );
        assert!(counter_column_exists(&mut admin, backend).await);
    }
    std::fs::remove_file(&pause).unwrap();
    wait(child, LIMIT).expect_code(0);
    f.run(&["audit", "--report", "b.csv", "--quiet"])
        .expect_code(0);
    f.run(&["contract", "--execute", "--quiet"]).expect_code(0);
    assert!(!counter_column_exists(&mut admin, backend).await);
    admin.close().await.unwrap();
    f.db.cleanup().await;
}

/// Row 1 (MariaDB/MySQL): a stored routine whose body this session may not read (root defined
/// it; the user has every right on the database but none on `mysql.proc`, so
/// `information_schema.ROUTINES` shows its body as NULL) cannot be checked: the gate stays
/// open (nothing proves the routine uses the column) and the output says so, naming it.
#[tokio::test]
async fn a_routine_the_session_cannot_read_is_a_note() {
    let Some((db, dir, mut conn)) = audited(Backend::Mysql, "gate_unreadable", &[]).await else {
        return;
    };
    let dir = dir.path();
    let user = format!("tm_gate_{}", std::process::id());
    exec_all(
        &mut conn,
        &[
            "CREATE PROCEDURE hidden_bump(c BIGINT) \
             UPDATE unread_counters SET unread_count = unread_count + 1 WHERE conv_id = c"
                .to_string(),
            format!("DROP USER IF EXISTS '{user}'@'%'"),
            format!("CREATE USER '{user}'@'%' IDENTIFIED BY 'gate-pw'"),
            format!("GRANT ALL ON `{}`.* TO '{user}'@'%'", db.name),
        ],
    )
    .await;
    let mut url = url::Url::parse(&db.url).unwrap();
    url.set_username(&user).unwrap();
    url.set_password(Some("gate-pw")).unwrap();
    url.set_host(Some("127.0.0.1")).unwrap();
    let run = bin::run(dir, &["contract", "--database", url.as_str()]);
    exec_all(&mut conn, &[format!("DROP USER IF EXISTS '{user}'@'%'")]).await;
    run.expect_code(0);
    assert!(
        run.stdout.contains(&format!(
            "procedure {}.hidden_bump (this session may not read its body): tidemark cannot read its body",
            db.name
        )),
        "the unreadable routine is a note:\n{}",
        run.stdout
    );
    // As root, who may read it, the same routine closes the gate.
    let closed = dry_run(dir, &db.url, 1);
    assert!(
        closed.contains(&format!(
            "procedure {}.hidden_bump depends on unread_count",
            db.name
        )),
        "{closed}"
    );
    conn.close().await.unwrap();
    db.cleanup().await;
}
