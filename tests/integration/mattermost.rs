//! The Mattermost shape (issue 22, `tests/fixtures/mattermost/`): four counters per channel
//! member (`[[counter]]` several times): unread posts and unread root posts as expressions
//! over the channel totals (Mattermost's msgcount is "messages read"), mention counts of all
//! posts and of root posts from a mentions table, run through expand, backfill, audit (drift
//! in each counter: the report's `counter` column, the summary, JSON and metrics per counter)
//! and `contract --execute` (each column archived and dropped) on every backend. The expected
//! values are worked out by hand in the fixture's `expected.md`, not by running tidemark.

use crate::common::statements;
use std::collections::BTreeMap;
use std::path::PathBuf;

use sqlx::{AnyConnection, Row};

use crate::common::{csv, exec_all, on_every_backend, Backend, TestDb};
use tidemark::db::Dsn;
use tidemark::dialect::Dialect;
use tidemark::mapping::Mapping;
use tidemark::stages::contract::{self, ContractOptions};
use tidemark::stages::{audit, backfill, expand};
use tidemark::values::text;

on_every_backend!(mattermost);

const T: i64 = 1_700_000_000_000;
const COLUMNS: [&str; 4] = [
    "msgcount",
    "mentioncount",
    "msgcountroot",
    "mentioncountroot",
];

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mattermost")
}

/// user -> (last_read_id, source) in channel town.
async fn watermarks(conn: &mut AnyConnection) -> BTreeMap<String, (i64, String)> {
    let rows = sqlx::query("SELECT user_id, last_read_id, source FROM read_watermarks")
        .fetch_all(&mut *conn)
        .await
        .unwrap();
    rows.iter()
        .map(|r| {
            (
                text(r, 0).unwrap().unwrap(),
                (
                    r.try_get(1).unwrap(),
                    text(r, 2).unwrap().unwrap_or_default(),
                ),
            )
        })
        .collect()
}

async fn audited(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
    opts: audit::AuditOptions,
) -> audit::AuditSummary {
    audit::run(conn, mapping, dialect, &opts)
        .await
        .expect("audit")
        .summary
}

async fn mattermost(backend: Backend) {
    let Some(db) = TestDb::create(backend, "mm").await else {
        return;
    };
    let dsn = Dsn::parse(&db.url).unwrap();
    let dialect = dsn.dialect;
    let int = dialect.int_cast();
    let mut conn = dsn.connect().await.unwrap();
    let dir = fixture_dir();
    exec_all(
        &mut conn,
        &statements(&std::fs::read_to_string(dir.join("schema.sql")).unwrap()),
    )
    .await;
    let mapping =
        Mapping::load(&crate::common::known_mapping("mattermost")).expect("the mapping loads");
    mapping
        .check_predicates(dialect.sql_parser_dialect(), dialect.name())
        .unwrap();
    assert_eq!(mapping.counters.len(), 4);
    expand::run(&mut conn, &mapping, dialect, false)
        .await
        .unwrap();

    // Backfill: expected.md's watermarks (dan's from the first counter, msg).
    let b = backfill::run(&mut conn, &mapping, dialect, &Default::default())
        .await
        .expect("backfill");
    assert_eq!(b.members, 4, "{b:?}");
    let want: BTreeMap<String, (i64, String)> = [
        ("ann", T + 3000, "timestamp"),
        ("bob", T + 5000, "timestamp"),
        ("cat", T + 1000, "timestamp"),
        ("dan", T + 3000, "counter"),
    ]
    .into_iter()
    .map(|(u, w, s)| (u.to_string(), (w, s.to_string())))
    .collect();
    assert_eq!(watermarks(&mut conn).await, want, "watermarks");

    // Audit: expected.md's drifting rows, each counter's.
    let tmp = tempfile::tempdir().unwrap();
    let report = tmp.path().join("drift.csv");
    let metrics = tmp.path().join("audit.prom");
    let s = audited(
        &mut conn,
        &mapping,
        dialect,
        audit::AuditOptions {
            report: report.clone(),
            metrics_file: Some(metrics.clone()),
            ..Default::default()
        },
    )
    .await;
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
    let file = csv::read(&report);
    assert_eq!(
        file.header,
        "conversation_id,user_id,stored_unread,recomputed_unread,drift,class,last_read_id,watermark_source,counter"
    );
    let rows: Vec<String> = file.rows.iter().map(|r| r.join(",")).collect();
    let w = |d: i64| T + d;
    assert_eq!(
        rows,
        [
            format!(
                "town,ann,4,2,2,own_messages_counted,{},timestamp,msg",
                w(3000)
            ),
            format!("town,cat,0,2,-2,cleared,{},timestamp,msg_root", w(1000)),
            format!("town,cat,1,2,-1,undercount,{},timestamp,mention", w(1000)),
            format!(
                "town,dan,2,1,1,own_messages_counted,{},counter,mention",
                w(3000)
            ),
            format!(
                "town,dan,2,1,1,excluded_counted,{},counter,mention_root",
                w(3000)
            ),
        ]
    );
    // Metrics: each drift gauge once per counter, labelled.
    let prom = std::fs::read_to_string(&metrics).unwrap();
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
    tidemark::render::json::audit(&mut json, &s).unwrap();
    let json: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(json["counters"][3]["name"], "mention_root");
    assert_eq!(json["counters"][3]["by_class"]["excluded_counted"], 1);
    assert_eq!(json["counters"][2]["mentions"], true);
    let mut out = Vec::new();
    tidemark::render::text::audit(&mut out, &s).unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.contains("  counter mention (mentioncount, mentions): 4 rows checked, 2 drifting; sum |drift| 2, largest |drift| 1: FAIL"),
        "{out}"
    );

    // The gate stays closed while any counter drifts.
    let opts = ContractOptions {
        audit_report: Some(tmp.path().join("final.csv")),
        lock_timeout: std::time::Duration::from_secs(2),
        ..Default::default()
    };
    let closed = contract::run(&mut conn, &mapping, dialect, &opts)
        .await
        .expect("contract dry run");
    assert!(!closed.verdict.unwrap().open);

    // Repair one counter but not the others: still failing, on the others alone.
    exec_all(
        &mut conn,
        &["UPDATE channelmembers SET msgcount = 5 WHERE userid = 'ann'".into()],
    )
    .await;
    let s = audited(
        &mut conn,
        &mapping,
        dialect,
        audit::AuditOptions {
            report: tmp.path().join("half.csv"),
            ..Default::default()
        },
    )
    .await;
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
        exec_all(&mut conn, &[sql.to_string()]).await;
    }
    let clean = audited(
        &mut conn,
        &mapping,
        dialect,
        audit::AuditOptions {
            report: tmp.path().join("clean.csv"),
            ..Default::default()
        },
    )
    .await;
    assert!(clean.passed, "{:?}", clean);
    assert!(clean.counters.iter().all(|c| c.passed));
    let dry = contract::run(&mut conn, &mapping, dialect, &opts)
        .await
        .expect("contract dry run");
    assert!(dry.verdict.as_ref().unwrap().open, "{:?}", dry.verdict);
    assert_eq!(dry.targets.len(), 4);

    // --execute: each column archived per member, then dropped.
    let done = contract::run(
        &mut conn,
        &mapping,
        dialect,
        &ContractOptions {
            execute: true,
            ..opts.clone()
        },
    )
    .await
    .expect("contract --execute");
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
        .fetch_all(&mut conn)
        .await
        .unwrap();
        let got: Vec<i64> = rows.iter().map(|r| r.try_get(1).unwrap()).collect();
        assert_eq!(got, want, "{column}");
        let sql = format!("SELECT {column} FROM channelmembers WHERE 1 = 0");
        assert!(
            sqlx::raw_sql(&sql).execute(&mut conn).await.is_err(),
            "channelmembers.{column} is still there"
        );
    }
    // The channel totals and the last-viewed times stay.
    let kept: i64 = sqlx::query_scalar(&format!(
        "SELECT CAST(COUNT(lastviewedat) AS {int}) FROM channelmembers"
    ))
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(kept, 3);
    drop(conn);
    db.cleanup().await;
}
