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

on_every_backend!(
    json_and_metrics_equal_the_csv,
    run_time_then_resume,
    scopes_and_stored_rows,
    min_age,
    missing_output_folder
);
on_every_backend!(servers: select_only_user);

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

/// `--report` or `--metrics-file` into a folder that does not exist: exit 3 before the audit
/// runs, the message names the missing folder (not a temporary file), and no report is left.
async fn missing_output_folder(backend: Backend) {
    let Some(db) = TestDb::create(backend, "au_nofolder").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_conn, _, _, mapping) = prepared(&db, dir.path(), 300).await;
    let missing = dir.path().join("missing");
    let report = missing.join("drift.csv");
    let out = tidemark(
        dir.path(),
        &db.url,
        &mapping,
        &["--report", report.to_str().unwrap()],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains(&format!("the folder {} does not exist", missing.display())),
        "{stderr}"
    );
    assert!(
        !stderr.contains("drift.csv."),
        "no temporary file named: {stderr}"
    );

    let metrics = missing.join("m.prom");
    let out = tidemark(
        dir.path(),
        &db.url,
        &mapping,
        &[
            "--report",
            "r.csv",
            "--metrics-file",
            metrics.to_str().unwrap(),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains(&format!("the folder {} does not exist", missing.display())),
        "{stderr}"
    );
    assert!(
        !dir.path().join("r.csv").exists(),
        "checked before the audit runs: no report written"
    );
}

async fn json_and_metrics_equal_the_csv(backend: Backend) {
    let Some(db) = TestDb::create(backend, "au_outputs").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (conn, _, _, mapping) = prepared(&db, dir.path(), 3000).await;
    let out = tidemark(
        dir.path(),
        &db.url,
        &mapping,
        &[
            "--format",
            "json",
            "--report",
            "r.csv",
            "--metrics-file",
            "m.prom",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("--format json prints one JSON object");
    let (rows, by_class) = csv_rows(&dir.path().join("r.csv"));
    assert!(!rows.is_empty());
    assert_eq!(json["drifting_rows"].as_u64(), Some(rows.len() as u64));
    let sum_abs: i64 = rows
        .iter()
        .filter_map(|r| r[4].parse::<i64>().ok())
        .map(i64::abs)
        .sum();
    assert_eq!(json["sum_abs_drift"].as_i64(), Some(sum_abs));
    for (class, n) in &by_class {
        assert_eq!(json["by_class"][class].as_u64(), Some(*n), "{class}");
    }
    // The metrics file: Prometheus text format, the same numbers.
    let prom = std::fs::read_to_string(dir.path().join("m.prom")).unwrap();
    let mut metrics = BTreeMap::new();
    for line in prom.lines().filter(|l| !l.starts_with('#')) {
        let (name, value) = line.rsplit_once(' ').expect("name{labels} value");
        let value: f64 = value.parse().expect("a number");
        metrics.insert(name.to_string(), value);
    }
    let get = |prefix: &str, extra: &str| {
        metrics
            .iter()
            .find(|(k, _)| k.starts_with(&format!("{prefix}{{")) && k.contains(extra))
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("{prefix} {extra} missing in\n{prom}"))
    };
    assert_eq!(
        get("tidemark_audit_drifting_rows_all", ""),
        rows.len() as f64
    );
    assert_eq!(
        get("tidemark_audit_rows_checked", ""),
        json["rows_checked"].as_f64().unwrap()
    );
    assert_eq!(get("tidemark_audit_abs_drift_sum", ""), sum_abs as f64);
    assert_eq!(get("tidemark_audit_passed", ""), 0.0);
    for (class, n) in &by_class {
        assert_eq!(
            get(
                "tidemark_audit_drifting_rows",
                &format!("class=\"{class}\"")
            ),
            *n as f64
        );
    }
    assert!(get("tidemark_audit_timestamp_seconds", "") > 1.7e9);
    drop(conn);
    db.cleanup().await;
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

async fn scopes_and_stored_rows(backend: Backend) {
    let Some(db) = TestDb::create(backend, "au_scope").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut conn, _, _, mapping_path) = prepared(&db, dir.path(), 3000).await;
    let full = tidemark(
        dir.path(),
        &db.url,
        &mapping_path,
        &["--report", "full.csv", "--store-rows"],
    );
    assert_eq!(full.status.code(), Some(1));
    let (all, _) = csv_rows(&dir.path().join("full.csv"));

    // --conversations FROM..TO: exactly the rows of that range.
    let out = tidemark(
        dir.path(),
        &db.url,
        &mapping_path,
        &["--report", "range.csv", "--conversations", "100..400"],
    );
    assert!(matches!(out.status.code(), Some(0 | 1)));
    let (range, _) = csv_rows(&dir.path().join("range.csv"));
    let expected: Vec<_> = all
        .iter()
        .filter(|r| (100..=400).contains(&r[0].parse::<i64>().unwrap()))
        .cloned()
        .collect();
    assert!(!expected.is_empty());
    assert_eq!(range, expected);

    // --sample: deterministic, a subset, stated in the summary.
    let out = tidemark(
        dir.path(),
        &db.url,
        &mapping_path,
        &["--report", "s1.csv", "--sample", "30", "--format", "json"],
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(json["scope"][0].as_str().unwrap().contains("sample 30%"));
    let (s1, _) = csv_rows(&dir.path().join("s1.csv"));
    tidemark(
        dir.path(),
        &db.url,
        &mapping_path,
        &["--report", "s2.csv", "--sample", "30"],
    );
    let (s2, _) = csv_rows(&dir.path().join("s2.csv"));
    assert_eq!(s1, s2, "the same sample twice");
    assert!(
        !s1.is_empty() && s1.len() < all.len(),
        "{} of {}",
        s1.len(),
        all.len()
    );
    assert!(s1.iter().all(|r| all.contains(r)));
    assert!(s1
        .iter()
        .all(|r| (r[0].parse::<i64>().unwrap().abs() % 1000003) * 7919 % 10000 < 3000));

    // --store-rows: the rows are in the ledger; after a fix, status reports it.
    let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tidemark_drift_rows")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(stored, all.len() as i64);
    let fixed = &all[0];
    sqlx::raw_sql(&format!(
        "UPDATE unread_counters SET unread_count = {} WHERE conv_id = {} AND user_id = '{}'",
        fixed[3], fixed[0], fixed[1]
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    tidemark(
        dir.path(),
        &db.url,
        &mapping_path,
        &["--report", "again.csv", "--store-rows"],
    );
    let status = bin::command()
        .args(["status", "--database", &db.url, "--mapping"])
        .arg(&mapping_path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        text.contains("found 0 newly drifting rows and 1 fixed"),
        "{text}"
    );
    drop(conn);
    db.cleanup().await;
}

/// `--no-ledger` needs only SELECT: a user with nothing else audits, and writes nothing.
async fn select_only_user(backend: Backend) {
    let Some(db) = TestDb::create(backend, "au_ro").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut conn, _, _, mapping_path) = prepared(&db, dir.path(), 500).await;
    let user = format!("tm_ro_{}", std::process::id());
    let mut url = url::Url::parse(&db.url).unwrap();
    let setup: Vec<String> = match backend {
        Backend::Postgres => vec![
            format!("DROP ROLE IF EXISTS {user}"),
            format!("CREATE ROLE {user} LOGIN"),
            format!("GRANT CONNECT ON DATABASE \"{}\" TO {user}", db.name),
            format!("GRANT USAGE ON SCHEMA public TO {user}"),
            format!("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {user}"),
        ],
        Backend::Mysql => vec![
            format!("DROP USER IF EXISTS '{user}'@'%'"),
            format!("CREATE USER '{user}'@'%' IDENTIFIED BY 'ro-Secret-1'"),
            format!("GRANT SELECT ON `{}`.* TO '{user}'@'%'", db.name),
        ],
        Backend::Sqlite => unreachable!(),
    };
    for s in &setup {
        sqlx::raw_sql(s).execute(&mut conn).await.unwrap();
    }
    url.set_username(&user).unwrap();
    if backend == Backend::Mysql {
        url.set_password(Some("ro-Secret-1")).unwrap();
    }
    let ro_url = url.to_string();
    let ledger_before: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tidemark_ledger")
        .fetch_one(&mut conn)
        .await
        .unwrap();

    let out = tidemark(
        dir.path(),
        &ro_url,
        &mapping_path,
        &["--no-ledger", "--report", "ro.csv"],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "drift found read-only: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (rows, _) = csv_rows(&dir.path().join("ro.csv"));
    assert!(!rows.is_empty());
    let ledger_after: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tidemark_ledger")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(ledger_before, ledger_after, "--no-ledger writes nothing");
    // Without --no-ledger the same user cannot record the run: a database failure, exit 3.
    let out = tidemark(dir.path(), &ro_url, &mapping_path, &["--report", "ro2.csv"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!String::from_utf8_lossy(&out.stderr).contains("ro-Secret-1"));

    let teardown: Vec<String> = match backend {
        Backend::Postgres => vec![
            format!("REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {user}"),
            format!("REVOKE ALL ON SCHEMA public FROM {user}"),
        ],
        _ => vec![],
    };
    for s in &teardown {
        sqlx::raw_sql(s).execute(&mut conn).await.unwrap();
    }
    drop(conn);
    db.cleanup().await;
    // The role outlives the database: drop it on the server.
    let admin = match backend {
        Backend::Postgres => Backend::Postgres.admin_url(),
        _ => Backend::Mysql.admin_url(),
    }
    .unwrap();
    let mut admin = crate::common::connect(&admin).await;
    let drop = match backend {
        Backend::Postgres => format!("DROP ROLE IF EXISTS {user}"),
        _ => format!("DROP USER IF EXISTS '{user}'@'%'"),
    };
    sqlx::raw_sql(&drop).execute(&mut admin).await.unwrap();
}

/// Check the ledger holds the report's SHA-256 and the mapping fingerprint.
#[tokio::test]
async fn ledger_records_report_hash_and_fingerprint() {
    let Some(db) = TestDb::create(Backend::Sqlite, "au_ledger").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut conn, mapping, _, mapping_path) = prepared(&db, dir.path(), 300).await;
    let out = tidemark(dir.path(), &db.url, &mapping_path, &["--report", "l.csv"]);
    assert_eq!(out.status.code(), Some(1));
    let row = sqlx::query("SELECT report_sha256, mapping_fingerprint, passed FROM tidemark_ledger WHERE stage = 'audit' ORDER BY id DESC LIMIT 1")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    use sha2::Digest;
    let bytes = std::fs::read(dir.path().join("l.csv")).unwrap();
    let sha = tidemark::mapping::hex(&sha2::Sha256::digest(&bytes));
    assert_eq!(tidemark::values::text(&row, 0).unwrap().unwrap(), sha);
    assert_eq!(
        tidemark::values::text(&row, 1).unwrap().unwrap(),
        mapping.fingerprint
    );
    assert_eq!(row.try_get::<i64, _>(2).unwrap(), 0);
    drop(conn);
    db.cleanup().await;
}

/// `--min-age`: conversations with a message younger than the limit are left out and counted.
async fn min_age(backend: Backend) {
    let Some(db) = TestDb::create(backend, "au_minage").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut conn, _, _, _) = prepared(&db, dir.path(), 2000).await;
    // Every message an hour old; the newest message of conversations 1..=50 a moment ago.
    let now = tidemark::values::now_ms() / 1000;
    sqlx::raw_sql(&format!("UPDATE messages SET created_at = {}", now - 3600))
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::raw_sql(&format!(
        "UPDATE messages SET created_at = {now} WHERE conv_id <= 50 AND id = (SELECT MAX(m2.id) FROM (SELECT conv_id, id FROM messages) m2 WHERE m2.conv_id = messages.conv_id)"
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    let text = scenario::mapping_toml("per_member", false).replace(
        "sender = \"sender_id\"",
        "sender = \"sender_id\"\ncreated_at = \"created_at\"",
    );
    let mapping_path = dir.path().join("timed.toml");
    std::fs::write(&mapping_path, text).unwrap();
    let all = tidemark(
        dir.path(),
        &db.url,
        &mapping_path,
        &["--report", "all.csv", "--no-ledger"],
    );
    assert_eq!(all.status.code(), Some(1));
    let out = tidemark(
        dir.path(),
        &db.url,
        &mapping_path,
        &[
            "--report",
            "quiet.csv",
            "--no-ledger",
            "--min-age",
            "10m",
            "--format",
            "json",
        ],
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let recent: i64 = sqlx::query_scalar(&format!(
        "SELECT COUNT(DISTINCT conv_id) FROM messages WHERE created_at > {}",
        now - 600
    ))
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert!(recent > 0);
    assert_eq!(json["left_out_recent"].as_i64(), Some(recent));
    let (all_rows, _) = csv_rows(&dir.path().join("all.csv"));
    let (quiet_rows, _) = csv_rows(&dir.path().join("quiet.csv"));
    let expected: Vec<_> = all_rows
        .iter()
        .filter(|r| r[0].parse::<i64>().unwrap() > 50)
        .cloned()
        .collect();
    assert_eq!(
        quiet_rows, expected,
        "exactly the rows of the quiet conversations"
    );
    assert!(quiet_rows.len() < all_rows.len());
    // Without created_at in the mapping, --min-age is bad input.
    let plain = dir.path().join("plain.toml");
    std::fs::write(&plain, scenario::mapping_toml("per_member", false)).unwrap();
    let out = tidemark(
        dir.path(),
        &db.url,
        &plain,
        &["--no-ledger", "--min-age", "10m"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("created_at"));
    drop(conn);
    db.cleanup().await;
}

/// A scoped audit never opens the contract gate, a reversed range is bad input, and an
/// output path that is not a regular file is refused before anything runs.
#[tokio::test]
async fn scoped_audits_do_not_open_the_gate_and_outputs_are_checked() {
    let Some(db) = TestDb::create(Backend::Sqlite, "au_gate").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (conn, _, _, mapping_path) = prepared(&db, dir.path(), 1000).await;
    assert_eq!(
        tidemark(
            dir.path(),
            &db.url,
            &mapping_path,
            &["--report", "full.csv"]
        )
        .status
        .code(),
        Some(1)
    );
    // A narrow range that happens to be clean passes, but only as a scoped run.
    let (full, _) = csv_rows(&dir.path().join("full.csv"));
    let clean_conv = (1..1000)
        .find(|c| !full.iter().any(|r| r[0] == c.to_string()))
        .unwrap();
    let range = format!("{clean_conv}..{clean_conv}");
    let scoped = tidemark(
        dir.path(),
        &db.url,
        &mapping_path,
        &["--report", "s.csv", "--conversations", &range],
    );
    assert_eq!(
        scoped.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&scoped.stdout)
    );
    let gate = bin::command()
        .current_dir(dir.path())
        .args(["contract", "--database", &db.url, "--mapping"])
        .arg(&mapping_path)
        .output()
        .unwrap();
    assert_eq!(
        gate.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&gate.stdout)
    );
    // Reversed range.
    let out = tidemark(
        dir.path(),
        &db.url,
        &mapping_path,
        &["--conversations", "10..1"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("FROM is after TO"));
    // A symlink as the report: refused, the link left as it was.
    let target = dir.path().join("elsewhere.txt");
    std::fs::write(&target, "keep me").unwrap();
    let link = dir.path().join("link.csv");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let out = tidemark(
        dir.path(),
        &db.url,
        &mapping_path,
        &["--report", "link.csv"],
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me");
    drop(conn);
    db.cleanup().await;
}
