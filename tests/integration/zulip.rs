//! Read flags per message (issue 22, semantics.md "Shape C", `tests/fixtures/zulip/`): a
//! Zulip-shaped database with no stored counter, only `zerver_usermessage.flags` (bit 1 =
//! read), some messages read out of order, an unsubscribed member and an application
//! watermark written before the backfill, run through expand, backfill, audit and
//! `contract --execute` (drop = "nothing") on every backend by the fixture runner
//! (`common::fixture`). The expected values are worked out by hand in the fixture's
//! `expected.md` (the watermarks and the drift report also as the folder's expected CSVs), not
//! by running tidemark.

use crate::common::fixture::Fixture;
use crate::common::{on_every_backend, Backend};
use tidemark::gate::GateOptions;
use tidemark::stages::audit;
use tidemark::stages::contract::ContractOptions;

on_every_backend!(zulip_read_flags);

async fn zulip_read_flags(backend: Backend) {
    let Some(mut f) = Fixture::load(backend, "zulip").await else {
        return;
    };
    // The application, dual-writing already, has read hamlet's general up to 108; then the
    // runner's story: backfill (expected_watermarks.csv) and audit (expected_drift.csv: exactly
    // expected.md's drifting rows, with the flags' two columns).
    let story = f
        .story(&["INSERT INTO read_watermarks (user_id, conversation_id, last_read_id) VALUES (2, 10, 108)"], Default::default())
        .await;

    // Backfill: expected.md's counts.
    let b = &story.backfill;
    assert_eq!(
        (b.members, b.written, b.advanced, b.unchanged, b.no_evidence),
        (9, 7, 0, 1, 1),
        "{b:?}"
    );
    assert_eq!(b.by_source.get("read_flags"), Some(&8), "{b:?}");
    let flags = b.read_flags.as_ref().expect("read_flags counts");
    assert_eq!(
        (
            flags.members,
            flags.read_out_of_order,
            flags.unread_marked_read
        ),
        (4, 4, 1)
    );
    assert_eq!(b.unread_changes, 5);
    let mut out = Vec::new();
    tidemark::render::text::backfill(&mut out, b, false).unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.contains("  read flags: 4 messages read out of order become unread under the watermarks, 1 messages flagged unread are marked read (4 members;"),
        "{out}"
    );
    let mut json = Vec::new();
    tidemark::render::json::backfill(&mut json, b, false, &[]).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(
        v["read_flags"],
        serde_json::json!({"members": 4, "read_out_of_order": 4, "unread_marked_read": 1})
    );

    // Audit: expected.md's summary.
    let s = &story.audit.summary;
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

    // The DBA accepts what the report explains: an audit within 5 drifting rows passes.
    let tolerant = audit::AuditOptions {
        report: f.path("accepted.csv"),
        max_drift_rows: 5,
        checked: tidemark::ledger::records::Checked {
            rows: true,
            ratio: false,
            abs: false,
        },
        ..Default::default()
    };
    let ok = f.audit(&tolerant).await;
    assert!(ok.summary.passed, "{:?}", ok.summary);

    // contract: drop = "nothing"; --execute runs the final audit (same tolerance) and records
    // the gate's decision; nothing is archived or dropped; a second run says it is done.
    let opts = ContractOptions {
        audit_report: Some(f.path("final.csv")),
        gate: GateOptions {
            accept_tolerance: true,
            ..Default::default()
        },
        ..Default::default()
    };
    let dry = f.contract(&opts).await;
    assert!(dry.verdict.as_ref().unwrap().open, "{:?}", dry.verdict);
    assert!(dry.targets.is_empty() && !dry.executed);
    let exec = ContractOptions {
        execute: true,
        ..opts.clone()
    };
    let done = f.contract(&exec).await;
    assert!(done.executed && done.dropped.is_empty(), "{done:?}");
    assert!(done.final_audit.is_some(), "{done:?}");
    let id = done.ledger_id.expect("recorded");
    let archived = f
        .count("SELECT COUNT(*) FROM tidemark_counter_archive")
        .await;
    assert_eq!(archived, 0);
    // The flags are all still there (their other bits matter to Zulip).
    let flag_rows = f.count("SELECT COUNT(*) FROM zerver_usermessage").await;
    assert_eq!(flag_rows, 43);
    let again = f.contract(&exec).await;
    assert_eq!(
        again.nothing_to_drop.as_deref(),
        Some(format!("already done: contract run #{id} recorded the gate's decision ([contract] drop = \"nothing\": nothing to archive or drop)").as_str())
    );
    f.finish().await;
}
