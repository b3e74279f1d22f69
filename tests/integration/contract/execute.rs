//! `contract --execute`: the column (or table) dropped, the archive equal to the dropped values (table and CSV), a second run a no-op.

use super::*;

on_every_backend!(multi_thread: execute_drops_the_column_per_member, execute_drops_the_column_per_message, execute_drops_a_table_of_its_own);

async fn execute_drops_the_column_per_member(backend: Backend) {
    let Some(mut s) = setup(backend, "exec_member", "per_member").await else {
        return;
    };
    let (audit_id, _) = s.audit().await;
    let before = s.values("per_member").await;
    assert_eq!(before.len(), 9);
    let csv = s.dir.path().join("archive.csv");
    let opts = ContractOptions {
        execute: true,
        archive_csv: Some(csv.clone()),
        audit_report: None,
        ..s.opts()
    };
    let o = s.contract(&opts).await.unwrap();
    check_done(&mut s, &o, "per_member", &before, audit_id).await;
    assert!(!s.column_exists("unread_counters", "unread_count").await);
    assert!(s.column_exists("unread_counters", "user_id").await);
    assert_eq!(s.count("SELECT COUNT(*) FROM unread_counters").await, 9);
    // The final audit's report went next to the archive.
    assert!(s.dir.path().join("tidemark-contract-audit.csv").exists());
    // The CSV holds the same values.
    let from_csv = read_csv(&csv);
    assert_eq!(from_csv, before);
    let a = o.archive.as_ref().unwrap();
    assert_eq!(a.csv.as_deref(), Some(csv.display().to_string().as_str()));
    assert_eq!(a.csv_sha256.as_ref().unwrap().len(), 64);
    s.finish().await;
}

async fn execute_drops_the_column_per_message(backend: Backend) {
    let Some(mut s) = setup(backend, "exec_message", "per_message").await else {
        return;
    };
    let (audit_id, passed) = s.audit().await;
    assert!(passed, "the per-message data audits clean");
    let before = s.values("per_message").await;
    assert_eq!(before.len(), 8);
    // --drop-table: the messages table is never dropped.
    let err = s
        .contract(&ContractOptions {
            drop_table: true,
            ..s.opts()
        })
        .await
        .unwrap_err();
    assert_eq!(tidemark::cli::Outcome::code_of(&err), 2, "{err:#}");
    let o = s
        .contract(&ContractOptions {
            execute: true,
            ..s.opts()
        })
        .await
        .unwrap();
    check_done(&mut s, &o, "per_message", &before, audit_id).await;
    assert!(!s.column_exists("messages", "unread_count").await);
    assert_eq!(s.count("SELECT COUNT(*) FROM messages").await, 8);
    s.finish().await;
}

async fn execute_drops_a_table_of_its_own(backend: Backend) {
    let Some(mut s) = setup(backend, "exec_table", "per_member").await else {
        return;
    };
    let (audit_id, _) = s.audit().await;
    let before = s.values("per_member").await;
    let opts = ContractOptions {
        execute: true,
        drop_table: true,
        ..s.opts()
    };
    let dry = s
        .contract(&ContractOptions {
            execute: false,
            ..opts.clone()
        })
        .await
        .unwrap();
    assert!(
        dry.ddl.iter().any(|l| l.starts_with("DROP TABLE")),
        "{:?}",
        dry.ddl
    );
    let o = s.contract(&opts).await.unwrap();
    check_done(&mut s, &o, "per_member", &before, audit_id).await;
    assert!(
        !tidemark::db::catalog::table_exists(&mut s.conn, s.dialect, "unread_counters")
            .await
            .unwrap()
    );
    s.finish().await;
}
