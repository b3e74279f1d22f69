//! The contract on the fixture beyond the main story: a contract killed between its two drops
//! finished by the next run.

use super::*;

on_every_backend!(contract_resumes_after_a_kill);

/// A contract killed between its two drops (the first column gone, the second archived but
/// not dropped, the ledger row left `running` as a kill leaves it) is finished by the next run:
/// it names the first target as done by the killed run, does not audit again (the value
/// cannot be read without the first column), archives and drops the second, and the archive
/// rows of both runs together equal the values.
async fn contract_resumes_after_a_kill(backend: Backend) {
    let Some(mut f) = Fixture::load(backend, "total_minus_seen").await else {
        return;
    };
    let int = f.dialect.int_cast();
    for sql in repairs() {
        f.exec(&[&sql]).await;
    }
    f.expand().await;
    f.backfill().await;
    let a = f
        .audit(&audit::AuditOptions {
            report: f.path("a.csv"),
            ..Default::default()
        })
        .await;
    assert!(a.summary.passed);
    let totals_sql = format!(
        "SELECT conv_id, CAST(NULL AS {int}), CAST(message_total AS {int}) FROM conversations"
    );
    let seen_sql =
        format!("SELECT conv_id, user_id, CAST(seen_count AS {int}) FROM channel_members");
    let totals = values(&mut f.conn, &totals_sql).await;
    let seen = values(&mut f.conn, &seen_sql).await;
    let (first_id, opts) = first_run_dies_before_its_second_drop(&mut f).await;
    resumed_run_finishes(&mut f, first_id, opts, &totals, &seen).await;
    f.finish().await;
}

/// The first run "dies" before its second drop; a kill leaves its ledger row running. Returns
/// its ledger id and the options of the runs (`--execute`).
async fn first_run_dies_before_its_second_drop(f: &mut Fixture) -> (i64, ContractOptions) {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    let int = f.dialect.int_cast();
    let calls = Arc::new(AtomicU32::new(0));
    let hook_calls = calls.clone();
    let hook: contract::Hook = Arc::new(move || {
        let n = hook_calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            if n == 1 {
                anyhow::bail!("killed before the second drop")
            }
            Ok(())
        })
    });
    let opts = ContractOptions {
        execute: true,
        audit_report: Some(f.path("final.csv")),
        ..Default::default()
    };
    let first = contract::run(
        &mut f.conn,
        &f.mapping,
        f.dialect,
        &ContractOptions {
            before_ddl: Some(hook),
            ..opts.clone()
        },
    )
    .await;
    assert!(first.is_err(), "the first run must fail at its second drop");
    let first_id = f
        .count(&format!(
            "SELECT CAST(MAX(id) AS {int}) FROM tidemark_ledger WHERE stage = 'contract'"
        ))
        .await;
    // A kill leaves the ledger row running.
    f.exec(&[&format!(
        "UPDATE tidemark_ledger SET status = 'running' WHERE id = {first_id}"
    )])
    .await;
    assert!(
        sqlx::raw_sql("SELECT message_total FROM conversations WHERE 1 = 0")
            .execute(&mut f.conn)
            .await
            .is_err()
    );
    assert!(
        sqlx::raw_sql("SELECT seen_count FROM channel_members WHERE 1 = 0")
            .execute(&mut f.conn)
            .await
            .is_ok()
    );
    (first_id, opts)
}

/// The dry run names what is done and what is left; the next run finishes it without a new
/// audit, and the archive rows of both runs together equal the values.
async fn resumed_run_finishes(
    f: &mut Fixture,
    first_id: i64,
    opts: ContractOptions,
    totals: &Values,
    seen: &Values,
) {
    let int = f.dialect.int_cast();
    // The dry run names what is done and what is left; the run finishes it.
    let dry = f
        .contract(&ContractOptions {
            execute: false,
            ..opts.clone()
        })
        .await;
    let ddl = dry.ddl.join("\n");
    assert!(
        ddl.contains(&format!(
            "column conversations.message_total: done by contract run #{first_id}"
        )),
        "{ddl}"
    );
    assert!(dry.verdict.unwrap().open);
    let second = f.contract(&opts).await;
    assert!(second.executed);
    assert!(
        second.final_audit.is_none(),
        "a resumed run does not audit again"
    );
    let second_id = second.ledger_id.unwrap();
    let archive = |id: i64, table: &str, column: &str| {
        format!(
            "SELECT conversation_id, CAST(user_id AS {int}), counter_value FROM tidemark_counter_archive WHERE contract_id = {id} AND counter_table = '{table}' AND counter_column = '{column}'"
        )
    };
    assert_eq!(
        values(
            &mut f.conn,
            &archive(first_id, "conversations", "message_total")
        )
        .await,
        *totals
    );
    assert_eq!(
        values(
            &mut f.conn,
            &archive(second_id, "channel_members", "seen_count")
        )
        .await,
        *seen
    );
    assert!(
        sqlx::raw_sql("SELECT seen_count FROM channel_members WHERE 1 = 0")
            .execute(&mut f.conn)
            .await
            .is_err()
    );
    let again = f
        .contract(&ContractOptions {
            execute: false,
            ..opts
        })
        .await;
    assert!(again.nothing_to_drop.is_some(), "{:?}", again.ddl);
}
