//! The Mattermost shape (issue 22, `tests/fixtures/mattermost/`): four counters per channel
//! member (`[[counter]]` several times): unread posts and unread root posts as expressions
//! over the channel totals (Mattermost's msgcount is "messages read"), mention counts of all
//! posts and of root posts from a mentions table, run through expand, backfill, audit (drift
//! in each counter: the report's `counter` column, the summary, JSON and metrics per counter)
//! and `contract --execute` (each column archived and dropped) on every backend by the
//! fixture runner (`common::fixture`). The expected values are worked out by hand in the
//! fixture's `expected.md` (the watermarks and the drift report also as the folder's expected
//! CSVs), not by running tidemark.

use sqlx::Row;

use crate::common::fixture::Fixture;
use crate::common::{on_every_backend, Backend};
use tidemark::stages::audit;
use tidemark::stages::contract::ContractOptions;

on_every_backend!(mattermost);

const COLUMNS: [&str; 4] = [
    "msgcount",
    "mentioncount",
    "msgcountroot",
    "mentioncountroot",
];

/// An audit's summary, its report at `file` in the fixture's temporary folder.
async fn audited(f: &mut Fixture, file: &str) -> audit::AuditSummary {
    let opts = audit::AuditOptions {
        report: f.path(file),
        ..Default::default()
    };
    f.audit(&opts).await.summary
}

async fn mattermost(backend: Backend) {
    let Some(mut f) = Fixture::load(backend, "mattermost").await else {
        return;
    };
    assert_eq!(f.mapping.counters.len(), 4);
    // The runner's story: backfill (expected_watermarks.csv: dan's from the first counter,
    // msg) and audit (expected_drift.csv: expected.md's drifting rows, each counter's).
    let metrics = f.path("audit.prom");
    let story = f
        .story(
            &[],
            audit::AuditOptions {
                metrics_file: Some(metrics.clone()),
                ..Default::default()
            },
        )
        .await;
    assert_eq!(story.backfill.members, 4, "{:?}", story.backfill);
    assert_eq!(
        story.report.header,
        "conversation_id,user_id,stored_unread,recomputed_unread,drift,class,last_read_id,watermark_source,counter"
    );
    let s = story.audit.summary;
    assert_eq!((s.rows_checked, s.drifting_rows, s.passed), (16, 5, false));
    let per_counter: Vec<(&str, u64, u64, bool)> = s
        .counters
        .iter()
        .map(|c| (c.name.as_str(), c.rows_checked, c.drifting_rows, c.passed))
        .collect();
    assert_eq!(
        per_counter,
        [
            ("msg", 4, 1, false),
            ("msg_root", 4, 1, false),
            ("mention", 4, 2, false),
            ("mention_root", 4, 1, false),
        ]
    );
    assert_eq!(s.counters[2].by_class["undercount"], 1);
    assert_eq!(s.counters[2].by_class["own_messages_counted"], 1);
    assert_eq!(
        s.crossed,
        [
            "counter msg: drifting rows 1 > --max-drift-rows 0",
            "counter msg: drift ratio 0.250000 > --max-drift-ratio 0",
            "counter msg: largest |drift| 2 > --max-abs-drift 0",
            "counter msg_root: drifting rows 1 > --max-drift-rows 0",
            "counter msg_root: drift ratio 0.250000 > --max-drift-ratio 0",
            "counter msg_root: largest |drift| 2 > --max-abs-drift 0",
            "counter mention: drifting rows 2 > --max-drift-rows 0",
            "counter mention: drift ratio 0.500000 > --max-drift-ratio 0",
            "counter mention: largest |drift| 1 > --max-abs-drift 0",
            "counter mention_root: drifting rows 1 > --max-drift-rows 0",
            "counter mention_root: drift ratio 0.250000 > --max-drift-ratio 0",
            "counter mention_root: largest |drift| 1 > --max-abs-drift 0",
        ]
    );
    outputs_per_counter(&s, &metrics);
    repair_and_contract(&mut f).await;
    f.finish().await;
}

/// The metrics, the JSON and the text of the first audit, per counter.
fn outputs_per_counter(s: &audit::AuditSummary, metrics: &std::path::Path) {
    // Metrics: each drift gauge once per counter, labelled.
    let prom = std::fs::read_to_string(metrics).unwrap();
    for (counter, n) in [
        ("msg", 1),
        ("msg_root", 1),
        ("mention", 2),
        ("mention_root", 1),
    ] {
        assert!(
            prom.lines()
                .any(|l| l.starts_with("tidemark_audit_drifting_rows_all{")
                    && l.contains(&format!("counter=\"{counter}\"}}"))
                    && l.ends_with(&format!(" {n}"))),
            "{prom}"
        );
    }
    assert!(
        prom.contains(",counter=\"mention\",class=\"undercount\"} 1"),
        "{prom}"
    );
    assert!(
        prom.contains(",counter=\"msg\"} 0") && prom.contains("tidemark_audit_passed{"),
        "{prom}"
    );
    // JSON: the `counters` list; the text: one line per counter.
    let mut json = Vec::new();
    tidemark::render::json::audit(&mut json, s).unwrap();
    let json: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(json["counters"][3]["name"], "mention_root");
    assert_eq!(json["counters"][3]["by_class"]["excluded_counted"], 1);
    assert_eq!(json["counters"][2]["mentions"], true);
    let mut out = Vec::new();
    tidemark::render::text::audit(&mut out, s).unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.contains("  counter mention (mentioncount, mentions): 4 rows checked, 2 drifting; sum |drift| 2, largest |drift| 1: FAIL"),
        "{out}"
    );
}

/// The gate closed while any counter drifts; the counters repaired one by one (expected.md);
/// then `contract --execute` archives each column per member and drops it.
async fn repair_and_contract(f: &mut Fixture) {
    let int = f.dialect.int_cast();
    // The gate stays closed while any counter drifts.
    let opts = ContractOptions {
        audit_report: Some(f.path("final.csv")),
        lock_timeout: std::time::Duration::from_secs(2),
        ..Default::default()
    };
    let closed = f.contract(&opts).await;
    assert!(!closed.verdict.unwrap().open);

    // Repair one counter but not the others: still failing, on the others alone.
    f.exec(&["UPDATE channelmembers SET msgcount = 5 WHERE userid = 'ann'"])
        .await;
    let s = audited(f, "half.csv").await;
    assert!(!s.passed);
    assert!(
        s.counters[0].passed && !s.counters[1].passed,
        "{:?}",
        s.counters
    );
    assert!(!s.crossed.iter().any(|c| c.starts_with("counter msg:")));

    // Repair the rest (expected.md), then a clean audit: the gate opens.
    for sql in [
        "UPDATE channelmembers SET msgcountroot = 2, mentioncount = 2 WHERE userid = 'cat'",
        "UPDATE channelmembers SET mentioncount = 1, mentioncountroot = 1 WHERE userid = 'dan'",
    ] {
        f.exec(&[sql]).await;
    }
    let clean = audited(f, "clean.csv").await;
    assert!(clean.passed, "{:?}", clean);
    assert!(clean.counters.iter().all(|c| c.passed));
    let dry = f.contract(&opts).await;
    assert!(dry.verdict.as_ref().unwrap().open, "{:?}", dry.verdict);
    assert_eq!(dry.targets.len(), 4);

    // --execute: each column archived per member, then dropped.
    let done = f
        .contract(&ContractOptions {
            execute: true,
            ..opts.clone()
        })
        .await;
    assert!(done.executed, "{:?}", done.notes);
    let id = done.ledger_id.unwrap();
    let sums: Vec<(i64, String, String)> = done
        .target_archives
        .iter()
        .map(|t| {
            (
                t.checksum.rows,
                t.checksum.sum.clone(),
                t.checksum.sum_squares.clone(),
            )
        })
        .collect();
    assert_eq!(
        sums,
        [
            (4, "19".into(), "95".into()),
            (4, "5".into(), "7".into()),
            (4, "12".into(), "38".into()),
            (4, "3".into(), "5".into()),
        ]
    );
    for (column, want) in
        COLUMNS
            .iter()
            .zip([[5, 6, 3, 5], [1, 1, 2, 1], [3, 4, 2, 3], [0, 0, 2, 1]])
    {
        let rows = sqlx::query(&format!(
            "SELECT user_id, CAST(counter_value AS {int}) FROM tidemark_counter_archive WHERE contract_id = {id} AND counter_table = 'channelmembers' AND counter_column = '{column}' ORDER BY user_id"
        ))
        .fetch_all(&mut f.conn)
        .await
        .unwrap();
        let got: Vec<i64> = rows.iter().map(|r| r.try_get(1).unwrap()).collect();
        assert_eq!(got, want, "{column}");
        let sql = format!("SELECT {column} FROM channelmembers WHERE 1 = 0");
        assert!(
            sqlx::raw_sql(&sql).execute(&mut f.conn).await.is_err(),
            "channelmembers.{column} is still there"
        );
    }
    // The channel totals and the last-viewed times stay.
    let kept = f
        .count(&format!(
            "SELECT CAST(COUNT(lastviewedat) AS {int}) FROM channelmembers"
        ))
        .await;
    assert_eq!(kept, 3);
}
