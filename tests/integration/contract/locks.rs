//! A lock held by another connection after the archive and before the DDL, and a permutation after the archive: the column and the archive stay intact.

use super::*;

on_every_backend!(multi_thread: lock_after_archive_keeps_column_and_archive, a_permutation_after_the_archive_stops_the_drop);

/// The statement another connection runs to hold a lock that the archive does not need but the
/// DDL does.
fn blocking_lock(backend: Backend) -> Vec<&'static str> {
    match backend {
        // ACCESS SHARE: the archive reads on; the DROP needs ACCESS EXCLUSIVE.
        Backend::Postgres => vec!["BEGIN", "LOCK TABLE unread_counters IN ACCESS SHARE MODE"],
        // A shared metadata lock until COMMIT: LOCK TABLES … WRITE waits for it.
        Backend::Mysql => vec!["START TRANSACTION", "SELECT COUNT(*) FROM unread_counters"],
        // The write lock: BEGIN IMMEDIATE waits busy_timeout for it.
        Backend::Sqlite => vec!["BEGIN IMMEDIATE"],
    }
}

/// One statement, boxed with an explicit lifetime: a `Send` future that runs sqlx on a
/// connection it borrows must be (the "Executor is not general enough" limitation).
fn exec_boxed<'c>(
    conn: &'c mut AnyConnection,
    sql: &'static str,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), sqlx::Error>> + Send + 'c>> {
    use sqlx::Executor;
    Box::pin(async move { conn.execute(sql).await.map(|_| ()) })
}

async fn lock_after_archive_keeps_column_and_archive(backend: Backend) {
    let Some(mut s) = setup(backend, "lock_fail", "per_member").await else {
        return;
    };
    let (audit_id, _) = s.audit().await;
    let before = s.values("per_member").await;
    let held: Arc<tokio::sync::Mutex<Option<AnyConnection>>> = Arc::default();
    let hook: contract::Hook = {
        let held = held.clone();
        let url = s.db.url.clone();
        Arc::new(move || {
            let held = held.clone();
            let url = url.clone();
            Box::pin(async move {
                let mut other = crate::common::connect(&url).await;
                for sql in blocking_lock(backend) {
                    exec_boxed(&mut other, sql).await?;
                }
                *held.lock().await = Some(other);
                Ok(())
            })
        })
    };
    let opts = ContractOptions {
        execute: true,
        lock_retries: 1,
        before_ddl: Some(hook),
        archive_csv: Some(s.dir.path().join("a.csv")),
        ..s.opts()
    };
    let started = std::time::Instant::now();
    let err = s.contract(&opts).await.unwrap_err();
    assert_eq!(tidemark::cli::Outcome::code_of(&err), 3, "{err:#}");
    assert!(tidemark::lock::is_lock_wait(&err), "a lock wait: {err:#}");
    assert!(format!("{err:#}").contains("intact"), "{err:#}");
    assert!(started.elapsed() >= Duration::from_secs(2), "retried once");
    // The lock is still held: look from a third connection... then release it.
    if let Some(mut other) = held.lock().await.take() {
        let _ = sqlx::raw_sql("ROLLBACK").execute(&mut other).await;
    }
    assert!(s.column_exists("unread_counters", "unread_count").await);
    assert_eq!(s.values("per_member").await, before);
    let contracts = s.contracts().await;
    let (failed_id, status, _, summary) = contracts.last().unwrap().clone();
    if backend == Backend::Sqlite {
        // The other connection's write lock also kept the ledger from recording the failure.
        assert!(status == "failed" || status == "running", "{status}");
    } else {
        assert_eq!(status, "failed");
        assert!(
            summary["error"].as_str().unwrap().contains("intact"),
            "{summary}"
        );
    }
    let (archived, _) = s.archived(failed_id, "per_member").await;
    assert_eq!(archived, before, "the archive of the failed run is intact");
    assert_eq!(read_csv(&s.dir.path().join("a.csv")), before);

    // Without the lock, the same command completes.
    let o = s
        .contract(&ContractOptions {
            before_ddl: None,
            ..opts
        })
        .await
        .unwrap();
    check_done(&mut s, &o, "per_member", &before, audit_id).await;
    assert!(!s.column_exists("unread_counters", "unread_count").await);
    s.finish().await;
}

/// Issue 25 row 7: two counters swapped after the archive was verified and before the DDL
/// (rows, non-NULL values, sum and sum of squares all unchanged): the check inside the lock
/// compares the archive with the column row by row, so the drop stops (exit 3), the column
/// keeps the values as they are now, and the archive those of before.
async fn a_permutation_after_the_archive_stops_the_drop(backend: Backend) {
    let Some(mut s) = setup(backend, "permutation", "per_member").await else {
        return;
    };
    let (_, passed) = s.audit().await;
    assert!(passed);
    let before = s.values("per_member").await;
    assert_eq!(before[&(2, "u1".to_string())], Some(8));
    assert_eq!(before[&(2, "u2".to_string())], Some(5));
    let hook: contract::Hook = {
        let url = s.db.url.clone();
        Arc::new(move || {
            let url = url.clone();
            Box::pin(async move {
                let mut other = crate::common::connect(&url).await;
                exec_boxed(
                    &mut other,
                    "UPDATE unread_counters SET unread_count = CASE user_id WHEN 'u1' THEN 5 ELSE 8 END WHERE conv_id = 2 AND user_id IN ('u1', 'u2')",
                )
                .await?;
                Ok(())
            })
        })
    };
    let opts = ContractOptions {
        execute: true,
        before_ddl: Some(hook),
        ..s.opts()
    };
    let err = s.contract(&opts).await.unwrap_err();
    let msg = format!("{err:#}");
    assert_eq!(tidemark::cli::Outcome::code_of(&err), 3, "{msg}");
    assert!(
        msg.contains("unread_counters.unread_count changed after it was archived")
            && msg.contains("nothing was dropped"),
        "{msg}"
    );
    assert!(s.column_exists("unread_counters", "unread_count").await);
    let mut swapped = before.clone();
    swapped.insert((2, "u1".into()), Some(5));
    swapped.insert((2, "u2".into()), Some(8));
    assert_eq!(s.values("per_member").await, swapped);
    let (id, status, _, _) = s.contracts().await.last().unwrap().clone();
    assert_eq!(status, "failed");
    assert_eq!(s.archived(id, "per_member").await.0, before);
    s.finish().await;
}
