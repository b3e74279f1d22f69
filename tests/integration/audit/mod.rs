//! The audit as a release gate and a scheduled job (issue "The audit as a release gate and a
//! scheduled job"): JSON and metrics outputs agree with the CSV; `--run-time` stops with exit 4
//! and `--resume` finishes the same run with the same report as a straight run; scopes;
//! `--store-rows`; and an audit under a SELECT-only database user with `--no-ledger`.

use crate::common::{bin, csv, on_every_backend, Backend, TestDb};
use crate::scenario;
use sqlx::{AnyConnection, Row};
use std::collections::BTreeMap;
use std::path::Path;
use tidemark::db::Dsn;
use tidemark::generate::{generate, GenerateOptions};
use tidemark::mapping::Mapping;
use tidemark::stages::{audit, backfill, expand};

mod outputs;
mod scopes;

/// A generated database, expanded and backfilled; returns the mapping file's path too.
async fn prepared(
    db: &TestDb,
    dir: &Path,
    members: u64,
) -> (AnyConnection, Mapping, Dsn, std::path::PathBuf) {
    let dsn = Dsn::parse(&db.url).unwrap();
    let mut conn = db.connect().await;
    generate(
        &mut conn,
        dsn.dialect,
        &GenerateOptions { members, seed: 7 },
    )
    .await
    .unwrap();
    let text = scenario::mapping_toml("per_member", false);
    let path = dir.join("tidemark.toml");
    std::fs::write(&path, &text).unwrap();
    let mapping = Mapping::parse(&text, "tidemark.toml").unwrap();
    expand::run(&mut conn, &mapping, dsn.dialect, false)
        .await
        .unwrap();
    backfill::run(
        &mut conn,
        &mapping,
        dsn.dialect,
        &backfill::BackfillOptions::default(),
    )
    .await
    .unwrap();
    (conn, mapping, dsn, path)
}

fn tidemark(dir: &Path, url: &str, mapping: &Path, args: &[&str]) -> std::process::Output {
    bin::command()
        .current_dir(dir)
        .env_remove("DATABASE_URL")
        .arg("audit")
        .args(["--database", url, "--mapping"])
        .arg(mapping)
        .arg("--quiet")
        .args(args)
        .output()
        .unwrap()
}

/// The CSV report's data rows, and their count per class.
fn csv_rows(path: &Path) -> (Vec<Vec<String>>, BTreeMap<String, u64>) {
    let rows = csv::read(path).rows;
    let mut by_class = BTreeMap::new();
    for r in &rows {
        *by_class.entry(r[5].clone()).or_insert(0u64) += 1;
    }
    (rows, by_class)
}

async fn run_time_then_resume(backend: Backend) {
    let Some(db) = TestDb::create(backend, "au_resume").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut conn, mapping, dsn, mapping_path) = prepared(&db, dir.path(), 2000).await;
    // A straight run for comparison.
    let straight = audit::run(
        &mut conn,
        &mapping,
        dsn.dialect,
        &audit::AuditOptions {
            report: dir.path().join("straight.csv"),
            batch_size: 200,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(straight.summary.batches > 3);
    // The same audit in parts: every part stops after its first batch.
    let args = [
        "--report",
        "parts.csv",
        "--batch-size",
        "200",
        "--max-drift-rows",
        "100000",
        "--max-drift-ratio",
        "1",
        "--max-abs-drift",
        "100000",
    ];
    let first = tidemark(
        dir.path(),
        &db.url,
        &mapping_path,
        &[&args[..], &["--run-time", "0s"]].concat(),
    );
    assert_eq!(
        first.status.code(),
        Some(4),
        "incomplete: {}",
        String::from_utf8_lossy(&first.stdout)
    );
    assert!(
        !dir.path().join("parts.csv").exists(),
        "no report under the final name before the last part"
    );
    assert!(String::from_utf8_lossy(&first.stdout).contains("--resume"));
    assert!(
        String::from_utf8_lossy(&first.stdout).contains("INCOMPLETE: stopped at --run-time after"),
        "--run-time named as what stopped it: {}",
        String::from_utf8_lossy(&first.stdout)
    );
    let mut parts = 1;
    loop {
        let out = tidemark(
            dir.path(),
            &db.url,
            &mapping_path,
            &[&args[..], &["--run-time", "0s", "--resume"]].concat(),
        );
        parts += 1;
        match out.status.code() {
            Some(4) => continue,
            Some(0) => break,
            other => panic!(
                "part {parts}: exit {other:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }
    assert_eq!(parts as u64, straight.summary.batches, "one batch per part");
    let (a, _) = csv_rows(&dir.path().join("straight.csv"));
    let (b, _) = csv_rows(&dir.path().join("parts.csv"));
    assert_eq!(
        a, b,
        "the report of the resumed run equals the straight run's"
    );
    assert!(!dir.path().join("parts.csv.partial").exists());
    // The ledger's summary covers all parts.
    let row = sqlx::query("SELECT summary, status FROM tidemark_ledger WHERE stage = 'audit' ORDER BY id DESC LIMIT 1")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    let summary: serde_json::Value =
        serde_json::from_str(&tidemark::values::text(&row, 0).unwrap().unwrap()).unwrap();
    assert_eq!(tidemark::values::text(&row, 1).unwrap().unwrap(), "done");
    assert_eq!(summary["parts"].as_u64(), Some(parts as u64));
    assert_eq!(
        summary["rows_checked"].as_u64(),
        Some(straight.summary.rows_checked)
    );
    assert_eq!(
        summary["drifting_rows"].as_u64(),
        Some(straight.summary.drifting_rows)
    );
    assert_eq!(
        summary["by_class"],
        serde_json::to_value(&straight.summary.by_class).unwrap()
    );
    // A resume with other options is refused.
    let out = tidemark(
        dir.path(),
        &db.url,
        &mapping_path,
        &[
            "--report",
            "parts.csv",
            "--batch-size",
            "200",
            "--run-time",
            "0s",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let out = tidemark(
        dir.path(),
        &db.url,
        &mapping_path,
        &["--report", "other.csv", "--resume"],
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("other options"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(conn);
    db.cleanup().await;
}

on_every_backend!(run_time_then_resume);
