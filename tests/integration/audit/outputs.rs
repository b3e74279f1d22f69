//! The audit's outputs: a missing output folder, JSON and metrics equal to the CSV, the ledger's report hash and fingerprint, scoped audits that do not open the gate.

use super::*;

on_every_backend!(missing_output_folder, json_and_metrics_equal_the_csv);

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
