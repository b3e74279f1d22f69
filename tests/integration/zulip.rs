//! Read flags per message (issue 22, semantics.md "Shape C", `tests/fixtures/zulip/`): a
//! Zulip-shaped database with no stored counter, only `zerver_usermessage.flags` (bit 1 =
//! read), some messages read out of order, an unsubscribed member and an application
//! watermark written before the backfill, run through expand, backfill, audit and
//! `contract --execute` (drop = "nothing") on every backend. The expected values are worked
//! out by hand in the fixture's `expected.md`, not by running tidemark.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::common::{csv, exec_all, on_every_backend, Backend, TestDb};
use crate::common::{int_watermarks as watermarks, statements};
use tidemark::db::Dsn;
use tidemark::gate::GateOptions;
use tidemark::mapping::Mapping;
use tidemark::stages::contract::{self, ContractOptions};
use tidemark::stages::{audit, backfill, expand};

on_every_backend!(zulip_read_flags);

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/zulip")
}

async fn zulip_read_flags(backend: Backend) {
    let Some(db) = TestDb::create(backend, "zulip").await else {
        return;
    };
    let dsn = Dsn::parse(&db.url).unwrap();
    let dialect = dsn.dialect;
    let mut conn = dsn.connect().await.unwrap();
    let dir = fixture_dir();
    exec_all(
        &mut conn,
        &statements(&std::fs::read_to_string(dir.join("schema.sql")).unwrap()),
    )
    .await;
    let mapping = Mapping::load(&crate::common::known_mapping("zulip")).expect("the mapping loads");
    mapping
        .check_predicates(dialect.sql_parser_dialect(), dialect.name())
        .unwrap();
    expand::run(&mut conn, &mapping, dialect, false)
        .await
        .unwrap();
    // The application, dual-writing already, has read hamlet's general up to 108.
    exec_all(
        &mut conn,
        &["INSERT INTO read_watermarks (user_id, conversation_id, last_read_id) VALUES (2, 10, 108)".into()],
    )
    .await;

    // Backfill: expected.md's watermarks and counts.
    let b = backfill::run(&mut conn, &mapping, dialect, &Default::default())
        .await
        .expect("backfill");
    assert_eq!(
        (b.members, b.written, b.advanced, b.unchanged, b.no_evidence),
        (9, 7, 0, 1, 1),
        "{b:?}"
    );
    assert_eq!(b.by_source.get("read_flags"), Some(&8), "{b:?}");
    let flags = b.read_flags.expect("read_flags counts");
    assert_eq!(
        (
            flags.members,
            flags.read_out_of_order,
            flags.unread_marked_read
        ),
        (4, 4, 1)
    );
    assert_eq!(b.unread_changes, 5);
    let rf = |v: i64| (v, "read_flags".to_string());
    let want: BTreeMap<(i64, i64), (i64, String)> = [
        ((10, 1), rf(104)),
        ((10, 2), (108, String::new())),
        ((10, 3), rf(110)),
        ((10, 4), rf(103)),
        ((10, 5), rf(106)),
        ((20, 2), rf(102)),
        ((20, 3), rf(0)),
        ((20, 5), rf(109)),
    ]
    .into_iter()
    .collect();
    assert_eq!(watermarks(&mut conn).await, want, "watermarks");
    let mut out = Vec::new();
    tidemark::render::text::backfill(&mut out, &b, false).unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.contains("  read flags: 4 messages read out of order become unread under the watermarks, 1 messages flagged unread are marked read (4 members;"),
        "{out}"
    );
    let mut json = Vec::new();
    tidemark::render::json::backfill(&mut json, &b, false, &[]).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(
        v["read_flags"],
        serde_json::json!({"members": 4, "read_out_of_order": 4, "unread_marked_read": 1})
    );

    // Audit: exactly expected.md's drifting rows, with the flags' two columns.
    let tmp = tempfile::tempdir().unwrap();
    let report = tmp.path().join("drift.csv");
    let a = audit::run(
        &mut conn,
        &mapping,
        dialect,
        &audit::AuditOptions {
            report: report.clone(),
            ..Default::default()
        },
    )
    .await
    .expect("audit");
    let s = &a.summary;
    assert_eq!(
        (
            s.rows_checked,
            s.drifting_rows,
            s.sum_abs_drift,
            s.max_abs_drift,
            s.passed
        ),
        (8, 5, 8, 3, false)
    );
    assert_eq!(s.by_class["read_out_of_order"], 4);
    assert_eq!(s.by_class["orphan"], 1);
    let file = csv::read(&report);
    assert_eq!(
        file.header,
        "conversation_id,user_id,stored_unread,recomputed_unread,drift,class,last_read_id,watermark_source,read_after_watermark,unread_at_or_before_watermark"
    );
    let rows: Vec<String> = file.rows.iter().map(|r| r.join(",")).collect();
    assert_eq!(
        rows,
        [
            "10,1,1,2,-1,read_out_of_order,104,read_flags,1,0",
            "10,2,2,1,1,read_out_of_order,108,application,0,1",
            "10,4,3,0,3,orphan,103,read_flags,0,0",
            "10,5,1,2,-1,read_out_of_order,106,read_flags,1,0",
            "20,3,1,3,-2,read_out_of_order,0,read_flags,2,0",
        ]
    );

    // The DBA accepts what the report explains: an audit within 5 drifting rows passes.
    let tolerant = audit::AuditOptions {
        report: tmp.path().join("accepted.csv"),
        max_drift_rows: 5,
        checked: tidemark::ledger::records::Checked {
            rows: true,
            ratio: false,
            abs: false,
        },
        ..Default::default()
    };
    let ok = audit::run(&mut conn, &mapping, dialect, &tolerant)
        .await
        .expect("tolerant audit");
    assert!(ok.summary.passed, "{:?}", ok.summary);

    // contract: drop = "nothing"; --execute runs the final audit (same tolerance) and records
    // the gate's decision; nothing is archived or dropped; a second run says it is done.
    let opts = ContractOptions {
        audit_report: Some(tmp.path().join("final.csv")),
        gate: GateOptions {
            accept_tolerance: true,
            ..Default::default()
        },
        ..Default::default()
    };
    let dry = contract::run(&mut conn, &mapping, dialect, &opts)
        .await
        .expect("contract dry run");
    assert!(dry.verdict.as_ref().unwrap().open, "{:?}", dry.verdict);
    assert!(dry.targets.is_empty() && !dry.executed);
    let exec = ContractOptions {
        execute: true,
        ..opts.clone()
    };
    let done = contract::run(&mut conn, &mapping, dialect, &exec)
        .await
        .expect("contract --execute");
    assert!(done.executed && done.dropped.is_empty(), "{done:?}");
    assert!(done.final_audit.is_some(), "{done:?}");
    let id = done.ledger_id.expect("recorded");
    let archived: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tidemark_counter_archive")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(archived, 0);
    // The flags are all still there (their other bits matter to Zulip).
    let flag_rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM zerver_usermessage")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(flag_rows, 43);
    let again = contract::run(&mut conn, &mapping, dialect, &exec)
        .await
        .expect("contract again");
    assert_eq!(
        again.nothing_to_drop.as_deref(),
        Some(format!("already done: contract run #{id} recorded the gate's decision ([contract] drop = \"nothing\": nothing to archive or drop)").as_str())
    );
    drop(conn);
    db.cleanup().await;
}
