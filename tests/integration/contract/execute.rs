//! `contract --execute`: the column (or table) dropped, the archive equal to the dropped values (table and CSV), a second run a no-op.

use super::*;

on_every_backend!(multi_thread: execute_drops_the_column_per_member, execute_drops_the_column_per_message, execute_drops_a_table_of_its_own);

/// Checks a finished contract: column gone, archive equal to `before`, ledger evidence, second
/// run a no-op.
async fn check_done(
    s: &mut Setup,
    o: &ContractOutcome,
    shape: &str,
    before: &BTreeMap<(i64, String), Option<i64>>,
    relied_on: i64,
) {
    assert!(!o.gate_closed(), "{:?}", o.verdict);
    assert!(o.executed);
    let final_audit = o.final_audit.as_ref().expect("a final audit");
    assert!(final_audit.passed);
    assert!(final_audit.id.unwrap() > relied_on);
    let contract_id = o.ledger_id.unwrap();
    let (archived, audit_ids) = s.archived(contract_id, shape).await;
    assert_eq!(&archived, before, "the archive equals the dropped values");
    assert!(audit_ids.iter().all(|a| *a == final_audit.id));
    let a = o.archive.as_ref().unwrap();
    assert_eq!(a.checksum.rows, before.len() as i64);
    let sum: i64 = before.values().flatten().sum();
    assert_eq!(a.checksum.sum, sum.to_string());

    // The ledger: done, with the evidence.
    let contracts = s.contracts().await;
    let (id, status, passed, summary) = contracts.last().unwrap();
    assert_eq!(*id, contract_id);
    assert_eq!(status, "done");
    assert_eq!(*passed, Some(1));
    // The newest clean audit: `relied_on` or a later one (a failed run's final audit).
    assert!(
        summary["gate"]["relied_on"][0].as_i64().unwrap() >= relied_on,
        "{summary}"
    );
    assert_eq!(summary["final_audit"]["id"].as_i64(), final_audit.id);
    assert_eq!(
        summary["archive"]["checksum"]["rows"].as_i64(),
        Some(before.len() as i64)
    );
    assert!(summary["statements"]["finding"].is_string(), "{summary}");
    assert!(!summary["ddl"].as_array().unwrap().is_empty());
    assert!(summary["forced"].is_null());
    let recent = tidemark::ledger::recent(&mut s.conn, "contract", 1, s.dialect)
        .await
        .unwrap();
    assert_eq!(recent[0].status, "done");
    assert_eq!(
        contract::dropped_by(&mut s.conn, &s.mapping, s.dialect)
            .await
            .unwrap(),
        Some(contract_id)
    );

    // A second run: nothing left to drop.
    let again = s
        .contract(&ContractOptions {
            execute: true,
            ..s.opts()
        })
        .await
        .unwrap();
    assert!(!again.gate_closed());
    assert!(!again.executed);
    let msg = again.nothing_to_drop.expect("nothing to drop");
    assert!(msg.contains(&format!("#{contract_id}")), "{msg}");
    assert_eq!(
        s.contracts().await.len(),
        contracts.len(),
        "a no-op writes nothing"
    );
}

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

fn read_csv(path: &Path) -> BTreeMap<(i64, String), Option<i64>> {
    let file = csv::read(path);
    assert_eq!(file.columns[0], "conversation_id");
    assert_eq!(file.columns[2], "stored_unread");
    file.rows
        .iter()
        .map(|rec| {
            (
                (rec[0].parse().unwrap(), rec[1].to_string()),
                (!rec[2].is_empty()).then(|| rec[2].parse().unwrap()),
            )
        })
        .collect()
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
