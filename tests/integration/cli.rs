//! The command line as users script it (`shared/spec/interface.md`): the real `tidemark` binary
//! run in a temporary folder, with exact exit codes (0 done / 1 drift / 2 bad input / 3 database
//! or I/O failure) and the key parts of what it prints and writes.
//!
//! Most tests use SQLite files and need no server; the `*_all_backends` tests also run on the
//! PostgreSQL and MySQL/MariaDB servers of `tests/common` (skipped when they do not answer,
//! unless `CI` is set).

use std::path::{Path, PathBuf};

use sqlx::{AnyConnection, Connection, Row};
use tempfile::TempDir;

use crate::common::bin::{run as tidemark, run_env as tidemark_env, Run};
use crate::common::{bin, csv, exec_all, on_every_backend, Backend, TestDb};
use crate::scenario;

/// The per_member CSV header (a contract).
const PER_MEMBER_HEADER: &str =
    "conversation_id,user_id,stored_unread,recomputed_unread,drift,class,last_read_id,watermark_source";

/// A scenario with no drift at all after the backfill.
const CLEAN_SCENARIO: &str = "S3a-multi-device-receipts";

/// The demo's files.
const DEMO_DB: &str = "tidemark-demo.db";
const DEMO_TOML: &str = "tidemark-demo.toml";
const DEMO_CSV: &str = "tidemark-demo-report.csv";

fn tempdir() -> TempDir {
    tempfile::tempdir().expect("creating a temporary directory")
}

/// The header line and data rows of a CSV file (data rows as their raw fields).
fn read_csv(path: &Path) -> (String, Vec<Vec<String>>) {
    let file = csv::read(path);
    (file.header, file.rows)
}

/// Runs `tidemark demo` in `dir` and checks it exits 0.
fn demo(dir: &Path) -> Run {
    let run = tidemark(dir, &["demo"]);
    run.expect_code(0);
    run
}

fn find_scenario(id: &str) -> scenario::Scenario {
    scenario::load_all()
        .expect("loading the scenarios")
        .into_iter()
        .find(|s| s.id == id)
        .unwrap_or_else(|| panic!("scenario {id} not found"))
}

/// A SQLite connection to `dir/file` (created when missing).
async fn sqlite_conn(dir: &Path, file: &str) -> AnyConnection {
    sqlx::any::install_default_drivers();
    let url = format!("sqlite:{}?mode=rwc", dir.join(file).display());
    AnyConnection::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("connecting to {url}: {e}"))
}

/// Loads the legacy schema (and the data of scenario `id`, if given) into `dir/file` and
/// writes the scenario mapping (per_member) to `dir/tidemark.toml`. Returns the relative URL
/// to hand to the binary (which runs in `dir`).
async fn sqlite_scenario_db(dir: &Path, file: &str, id: Option<&str>) -> String {
    let mut conn = sqlite_conn(dir, file).await;
    exec_all(&mut conn, &scenario::schema_sql()).await;
    if let Some(id) = id {
        exec_all(&mut conn, &scenario::data_sql(&find_scenario(id), 0)).await;
    }
    conn.close().await.expect("closing");
    write_mapping(
        dir,
        "tidemark.toml",
        &scenario::mapping_toml("per_member", false),
    );
    format!("sqlite:{file}")
}

fn write_mapping(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("writing a mapping file");
    path
}

/// Whether a table exists in a SQLite database.
async fn sqlite_table_exists(conn: &mut AnyConnection, table: &str) -> bool {
    let row = sqlx::query("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?")
        .bind(table)
        .fetch_one(&mut *conn)
        .await
        .expect("querying sqlite_master");
    row.try_get::<i64, _>(0).expect("a count") > 0
}

async fn count_rows(conn: &mut AnyConnection, table: &str) -> i64 {
    let row = sqlx::query(&format!("SELECT COUNT(*) FROM {table}"))
        .fetch_one(&mut *conn)
        .await
        .unwrap_or_else(|e| panic!("counting {table}: {e}"));
    row.try_get::<i64, _>(0).expect("a count")
}

/// The scenario mapping with one line replaced (panics when `from` is not in it).
fn mapping_with(from: &str, to: &str) -> String {
    let base = scenario::mapping_toml("per_member", false);
    assert!(base.contains(from), "{from:?} not in the mapping:\n{base}");
    base.replacen(from, to, 1)
}

// ---------------------------------------------------------------------------------------------
// 1. demo

#[test]
fn demo_creates_database_mapping_and_report_and_reruns() {
    let dir = tempdir();
    let run = demo(dir.path());
    for f in [DEMO_DB, DEMO_TOML, DEMO_CSV] {
        assert!(dir.path().join(f).is_file(), "{f} missing after demo");
    }
    let (header, rows) = read_csv(&dir.path().join(DEMO_CSV));
    assert_eq!(header, PER_MEMBER_HEADER);
    assert!(
        !rows.is_empty(),
        "the demo injects drift: the report has rows"
    );
    assert!(
        run.stdout.contains(DEMO_CSV),
        "demo names its report:\n{}",
        run.stdout
    );
    // The demo's mapping is a valid mapping file for the binary.
    let mapping = std::fs::read_to_string(dir.path().join(DEMO_TOML)).unwrap();
    tidemark::mapping::Mapping::parse(&mapping, DEMO_TOML).expect("the demo mapping parses");

    // Again in the same folder: the database is recreated, not appended to.
    demo(dir.path());
    let (header2, rows2) = read_csv(&dir.path().join(DEMO_CSV));
    assert_eq!(header2, PER_MEMBER_HEADER);
    assert_eq!(rows2, rows, "a second demo reports the same drift");
}

// ---------------------------------------------------------------------------------------------
// 2. drifting audit -> 1

#[test]
fn audit_of_demo_drift_exits_1_in_text_and_json() {
    let dir = tempdir();
    demo(dir.path());
    let db = format!("sqlite:{DEMO_DB}");

    let run = tidemark(
        dir.path(),
        &[
            "audit",
            "--database",
            &db,
            "--mapping",
            DEMO_TOML,
            "--report",
            "r.csv",
        ],
    );
    run.expect_code(1);
    assert!(run.stdout.contains("drifting"), "{}", run.stdout);
    assert!(run.stdout.contains("FAIL"), "{}", run.stdout);
    let (header, rows) = read_csv(&dir.path().join("r.csv"));
    assert_eq!(header, PER_MEMBER_HEADER);
    assert!(!rows.is_empty());
    let drifting_text = format!("{} drifting", rows.len());
    assert!(
        run.stdout.contains(&drifting_text),
        "stdout should say {drifting_text:?}:\n{}",
        run.stdout
    );

    let run = tidemark(
        dir.path(),
        &[
            "audit",
            "--database",
            &db,
            "--mapping",
            DEMO_TOML,
            "--report",
            "j.csv",
            "--format",
            "json",
        ],
    );
    run.expect_code(1);
    let summary: serde_json::Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", run.stdout));
    let (_, json_rows) = read_csv(&dir.path().join("j.csv"));
    assert_eq!(
        summary["drifting_rows"].as_u64(),
        Some(json_rows.len() as u64)
    );
    assert_eq!(summary["passed"], serde_json::Value::Bool(false));
    assert_eq!(
        json_rows, rows,
        "text and json audits write the same report"
    );
}

// ---------------------------------------------------------------------------------------------
// 3. clean audit -> 0, tolerance -> 0

/// Loads the clean scenario into `db`, writes its mapping to `dir/tidemark.toml`, and runs
/// expand, backfill and audit through the binary: every one exits 0 and the report has only
/// its header.
async fn clean_pipeline(db: &TestDb, dir: &Path) {
    let mut conn = db.connect().await;
    exec_all(&mut conn, &scenario::schema_sql()).await;
    exec_all(
        &mut conn,
        &scenario::data_sql(&find_scenario(CLEAN_SCENARIO), 0),
    )
    .await;
    conn.close().await.expect("closing");
    write_mapping(
        dir,
        "tidemark.toml",
        &scenario::mapping_toml("per_member", false),
    );
    let url = db.url.as_str();
    let name = db.backend.name();

    let run = tidemark(dir, &["expand", "--database", url]);
    run.expect_code(0);
    let run = tidemark(dir, &["backfill", "--database", url, "--quiet"]);
    run.expect_code(0);
    let run = tidemark(
        dir,
        &[
            "audit",
            "--database",
            url,
            "--report",
            "clean.csv",
            "--quiet",
        ],
    );
    run.expect_code(0);
    assert!(run.stdout.contains("PASS"), "{name}: {}", run.stdout);
    assert!(run.stdout.contains(" 0 drifting"), "{name}: {}", run.stdout);
    let text = std::fs::read_to_string(dir.join("clean.csv")).expect("the report");
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        vec![PER_MEMBER_HEADER],
        "{name}: a clean audit's report is its header only"
    );
}

#[tokio::test]
async fn clean_audit_exits_0_with_header_only_report_sqlite() {
    let dir = tempdir();
    let url = sqlite_scenario_db(dir.path(), "clean.db", Some(CLEAN_SCENARIO)).await;
    for args in [
        vec!["expand", "--database", &url],
        vec!["backfill", "--database", &url, "--quiet"],
    ] {
        tidemark(dir.path(), &args).expect_code(0);
    }
    let run = tidemark(
        dir.path(),
        &["audit", "--database", &url, "--report", "clean.csv"],
    );
    run.expect_code(0);
    assert!(run.stdout.contains("PASS"), "{}", run.stdout);
    let text = std::fs::read_to_string(dir.path().join("clean.csv")).unwrap();
    assert_eq!(text.lines().collect::<Vec<_>>(), vec![PER_MEMBER_HEADER]);

    let run = tidemark(
        dir.path(),
        &[
            "audit",
            "--database",
            &url,
            "--report",
            "clean.json.csv",
            "--format",
            "json",
        ],
    );
    run.expect_code(0);
    let summary: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!(summary["drifting_rows"].as_u64(), Some(0));
    assert_eq!(summary["passed"], serde_json::Value::Bool(true));
}

on_every_backend!(clean_audit_exits_0_all_backends);

async fn clean_audit_exits_0_all_backends(backend: Backend) {
    let Some(db) = TestDb::create(backend, "cli_clean").await else {
        return;
    };
    let dir = tempdir();
    clean_pipeline(&db, dir.path()).await;
    db.cleanup().await;
}

#[test]
fn audit_within_tolerance_exits_0() {
    let dir = tempdir();
    demo(dir.path());
    let db = format!("sqlite:{DEMO_DB}");
    let run = tidemark(
        dir.path(),
        &[
            "audit",
            "--database",
            &db,
            "--mapping",
            DEMO_TOML,
            "--report",
            "t.csv",
            "--max-drift-rows",
            "1000",
            "--max-drift-ratio",
            "1",
            "--max-abs-drift",
            "100000",
        ],
    );
    run.expect_code(0);
    assert!(run.stdout.contains("PASS"), "{}", run.stdout);
    // Within tolerance still reports every drifting row.
    let (_, rows) = read_csv(&dir.path().join("t.csv"));
    assert!(!rows.is_empty());

    // One tolerance too tight is enough to fail.
    let run = tidemark(
        dir.path(),
        &[
            "audit",
            "--database",
            &db,
            "--mapping",
            DEMO_TOML,
            "--report",
            "t2.csv",
            "--max-drift-rows",
            "1000",
            "--max-drift-ratio",
            "1",
            "--max-abs-drift",
            "1",
        ],
    );
    run.expect_code(1);
}

// ---------------------------------------------------------------------------------------------
// 4. bad input -> 2

/// Checks a run exited 2 with a `file:line:col:` location for `file` and every `needles` in
/// stderr.
#[track_caller]
fn assert_mapping_error(run: &Run, file: &str, needles: &[&str]) {
    run.expect_code(2);
    let prefix = format!("{file}:");
    let at = run
        .stderr
        .find(&prefix)
        .unwrap_or_else(|| panic!("stderr does not name {file}:\n{}", run.stderr));
    let rest = &run.stderr[at + prefix.len()..];
    let mut parts = rest.splitn(3, ':');
    let line = parts.next().unwrap_or_default();
    let col = parts.next().unwrap_or_default();
    assert!(
        line.parse::<u32>().is_ok() && col.parse::<u32>().is_ok(),
        "stderr has no {file}:line:col: location:\n{}",
        run.stderr
    );
    for n in needles {
        assert!(
            run.stderr.contains(n),
            "stderr lacks {n:?}:\n{}",
            run.stderr
        );
    }
}

#[tokio::test]
async fn mapping_with_unknown_key_exits_2_naming_key() {
    let dir = tempdir();
    let url = sqlite_scenario_db(dir.path(), "m.db", Some(CLEAN_SCENARIO)).await;
    write_mapping(
        dir.path(),
        "bad.toml",
        &mapping_with(
            "sender = \"sender_id\"\n",
            "sender = \"sender_id\"\nsendr = \"x\"\n",
        ),
    );
    let run = tidemark(
        dir.path(),
        &[
            "audit",
            "--database",
            &url,
            "--mapping",
            "bad.toml",
            "--report",
            "x.csv",
        ],
    );
    assert_mapping_error(&run, "bad.toml", &["sendr"]);
    assert!(!dir.path().join("x.csv").exists(), "no report on bad input");
    // Same for the stages that write.
    for cmd in ["expand", "backfill", "status"] {
        let run = tidemark(
            dir.path(),
            &[cmd, "--database", &url, "--mapping", "bad.toml"],
        );
        assert_mapping_error(&run, "bad.toml", &["sendr"]);
    }
}

#[tokio::test]
async fn mapping_with_invalid_identifier_exits_2_naming_key() {
    let dir = tempdir();
    let url = sqlite_scenario_db(dir.path(), "m.db", Some(CLEAN_SCENARIO)).await;
    write_mapping(
        dir.path(),
        "bad.toml",
        &mapping_with("conversation = \"conv_id\"", "conversation = \"conv id\""),
    );
    let run = tidemark(
        dir.path(),
        &[
            "audit",
            "--database",
            &url,
            "--mapping",
            "bad.toml",
            "--report",
            "x.csv",
        ],
    );
    // The first `conversation` key is in [messages], on line 4, value at column 16.
    assert_mapping_error(&run, "bad.toml", &["conversation", "bad.toml:4:16:"]);
}

#[tokio::test]
async fn mapping_toml_syntax_error_exits_2() {
    let dir = tempdir();
    let url = sqlite_scenario_db(dir.path(), "m.db", None).await;
    write_mapping(dir.path(), "bad.toml", "[messages]\ntable = \n");
    let run = tidemark(
        dir.path(),
        &["expand", "--database", &url, "--mapping", "bad.toml"],
    );
    assert_mapping_error(&run, "bad.toml", &["bad.toml:2:"]);
}

#[tokio::test]
async fn missing_mapping_file_exits_2() {
    let dir = tempdir();
    let url = sqlite_scenario_db(dir.path(), "m.db", None).await;
    let run = tidemark(
        dir.path(),
        &["audit", "--database", &url, "--mapping", "nowhere.toml"],
    );
    run.expect_code(2);
    assert!(run.stderr.contains("nowhere.toml"), "{}", run.stderr);
    // The default mapping file name, absent too.
    std::fs::remove_file(dir.path().join("tidemark.toml")).unwrap();
    let run = tidemark(dir.path(), &["status", "--database", &url]);
    run.expect_code(2);
    assert!(run.stderr.contains("tidemark.toml"), "{}", run.stderr);
}

/// Mapping values naming tables, columns or predicates the database does not have: (replace
/// this, with this line, the mapping key the error must name, its value).
const MISSING_COLUMNS: [(&str, &str, &str, &str); 6] = [
    (
        "sender = \"sender_id\"",
        "sender = \"nope\"",
        "messages.sender",
        "nope",
    ),
    (
        "column = \"unread_count\"",
        "column = \"nope_count\"",
        "counter.column",
        "nope_count",
    ),
    (
        "column = \"message_id\"",
        "column = \"nope_id\"",
        "evidence[1].column",
        "nope_id",
    ),
    (
        "table = \"read_receipts\"",
        "table = \"nope_receipts\"",
        "evidence[1].table",
        "nope_receipts",
    ),
    (
        "active = \"active = 1\"",
        "active = \"nope_flag = 1\"",
        "members.active",
        "nope_flag = 1",
    ),
    (
        "join_position = \"join_position\"",
        "join_position = \"nope_position\"",
        "members.join_position",
        "nope_position",
    ),
];

/// For each of [`MISSING_COLUMNS`]: after an expand with the good mapping, backfill and audit
/// with the broken one exit 2 naming the mapping key with its file:line:col and value
/// (`nocol.toml:12:10: members.active = "nope_flag = 1" does not match the database: …`), and
/// write no report. Mismatches are collected and reported together.
async fn missing_column_exits_2(dir: &Path, url: &str, label: &str) {
    write_mapping(
        dir,
        "good.toml",
        &scenario::mapping_toml("per_member", false),
    );
    tidemark(
        dir,
        &["expand", "--database", url, "--mapping", "good.toml"],
    )
    .expect_code(0);
    let mut failures = Vec::new();
    for (from, to, key, value) in MISSING_COLUMNS {
        let mapping = mapping_with(from, to);
        write_mapping(dir, "nocol.toml", &mapping);
        let want = format!(
            "{}: {key} = {value:?} does not match the database: ",
            crate::common::value_at("nocol.toml", &mapping, to)
        );
        for cmd in ["backfill", "audit"] {
            let run = tidemark(
                dir,
                &[
                    cmd,
                    "--database",
                    url,
                    "--mapping",
                    "nocol.toml",
                    "--report",
                    "x.csv",
                    "--quiet",
                ]
                .into_iter()
                .filter(|a| cmd == "audit" || !matches!(*a, "--report" | "x.csv"))
                .collect::<Vec<_>>(),
            );
            if run.code != Some(2) || !run.stderr.contains(&want) {
                failures.push(format!(
                    "{label}: `tidemark {cmd}` with {to}: exit {:?} (want 2 and {want:?})\n    stdout: {}\n    stderr: {}",
                    run.code,
                    run.stdout.lines().next().unwrap_or_default(),
                    run.stderr.trim()
                ));
            }
        }
        if dir.join("x.csv").exists() {
            failures.push(format!("{label}: audit with {to} wrote a report"));
            let _ = std::fs::remove_file(dir.join("x.csv"));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[tokio::test]
async fn mapping_column_missing_in_database_exits_2_sqlite() {
    let dir = tempdir();
    let url = sqlite_scenario_db(dir.path(), "m.db", Some(CLEAN_SCENARIO)).await;
    missing_column_exits_2(dir.path(), &url, "sqlite").await;
}

// SQLite has a test of its own above.
on_every_backend!(servers: mapping_column_missing_in_database_exits_2_servers);

async fn mapping_column_missing_in_database_exits_2_servers(backend: Backend) {
    let Some(db) = TestDb::create(backend, "cli_nocol").await else {
        return;
    };
    let mut conn = db.connect().await;
    exec_all(&mut conn, &scenario::schema_sql()).await;
    exec_all(
        &mut conn,
        &scenario::data_sql(&find_scenario(CLEAN_SCENARIO), 0),
    )
    .await;
    conn.close().await.expect("closing");
    let dir = tempdir();
    missing_column_exits_2(dir.path(), &db.url, backend.name()).await;
    db.cleanup().await;
}

#[test]
fn no_database_exits_2() {
    let dir = tempdir();
    write_mapping(
        dir.path(),
        "tidemark.toml",
        &scenario::mapping_toml("per_member", false),
    );
    for cmd in ["expand", "backfill", "audit", "status"] {
        let run = tidemark(dir.path(), &[cmd]);
        run.expect_code(2);
        assert!(run.stderr.contains("DATABASE_URL"), "{cmd}: {}", run.stderr);
    }
    // An empty DATABASE_URL is no database either.
    let run = tidemark_env(dir.path(), &["status"], &[("DATABASE_URL", "")]);
    run.expect_code(2);
}

#[test]
fn unknown_url_scheme_exits_2_without_password() {
    let dir = tempdir();
    write_mapping(
        dir.path(),
        "tidemark.toml",
        &scenario::mapping_toml("per_member", false),
    );
    let run = tidemark(
        dir.path(),
        &[
            "audit",
            "--database",
            "oracle://scott:Tiger123@db.example:1521/chat",
        ],
    );
    run.expect_code(2);
    assert!(run.stderr.contains("oracle"), "{}", run.stderr);
    assert!(
        !run.stderr.contains("Tiger123"),
        "password leaked: {}",
        run.stderr
    );
    assert!(
        !run.stdout.contains("Tiger123"),
        "password leaked: {}",
        run.stdout
    );
}

#[test]
fn bad_usage_exits_2() {
    let dir = tempdir();
    let cases: [&[&str]; 5] = [
        &["audit", "--no-such-flag"],
        &["no-such-command"],
        &[],
        &["audit", "--format", "yaml"],
        &["audit", "--max-drift-ratio", "2"],
    ];
    for args in cases {
        let run = tidemark(dir.path(), args);
        assert_eq!(run.code, Some(2), "tidemark {args:?}: {}", run.stderr);
        assert!(
            !run.stderr.is_empty(),
            "tidemark {args:?}: nothing on stderr"
        );
    }
    // --help and --version are not errors.
    tidemark(dir.path(), &["--help"]).expect_code(0);
    tidemark(dir.path(), &["--version"]).expect_code(0);
}

// ---------------------------------------------------------------------------------------------
// 5. unreachable server -> 3, password redacted

#[track_caller]
fn assert_redacted_failure(run: &Run, shown: &str, secret: &str) {
    run.expect_code(3);
    assert!(
        run.stderr.contains(shown),
        "stderr should show {shown:?}:\n{}",
        run.stderr
    );
    assert!(
        !run.stderr.contains(secret) && !run.stdout.contains(secret),
        "the password leaked:\n--- stdout\n{}\n--- stderr\n{}",
        run.stdout,
        run.stderr
    );
}

#[test]
fn unreachable_postgres_exits_3_with_password_redacted() {
    let dir = tempdir();
    write_mapping(
        dir.path(),
        "valid.toml",
        &scenario::mapping_toml("per_member", false),
    );
    let url = "postgres://alice:SuperSecret99@127.0.0.1:1/db";
    for cmd in ["audit", "expand", "backfill", "status"] {
        let run = tidemark(
            dir.path(),
            &[cmd, "--database", url, "--mapping", "valid.toml"],
        );
        assert_redacted_failure(&run, "alice:***@127.0.0.1:1", "SuperSecret99");
    }
}

#[test]
fn unreachable_mysql_exits_3_with_password_redacted() {
    let dir = tempdir();
    write_mapping(
        dir.path(),
        "valid.toml",
        &scenario::mapping_toml("per_member", false),
    );
    for url in [
        "mysql://alice:SuperSecret99@127.0.0.1:1/db",
        "mariadb://alice:SuperSecret99@127.0.0.1:1/db",
    ] {
        let run = tidemark(
            dir.path(),
            &["audit", "--database", url, "--mapping", "valid.toml"],
        );
        assert_redacted_failure(&run, "alice:***@127.0.0.1:1", "SuperSecret99");
    }
}

#[test]
fn unreachable_server_from_database_url_env_exits_3_redacted() {
    let dir = tempdir();
    write_mapping(
        dir.path(),
        "tidemark.toml",
        &scenario::mapping_toml("per_member", false),
    );
    for url in [
        "postgres://alice:SuperSecret99@127.0.0.1:1/db",
        "mysql://alice:SuperSecret99@127.0.0.1:1/db",
    ] {
        let run = tidemark_env(dir.path(), &["audit"], &[("DATABASE_URL", url)]);
        assert_redacted_failure(&run, "alice:***@127.0.0.1:1", "SuperSecret99");
    }
}

#[test]
fn password_in_query_string_is_redacted() {
    let dir = tempdir();
    write_mapping(
        dir.path(),
        "tidemark.toml",
        &scenario::mapping_toml("per_member", false),
    );
    let run = tidemark(
        dir.path(),
        &[
            "audit",
            "--database",
            "postgres://alice@127.0.0.1:1/db?password=SuperSecret99",
        ],
    );
    assert_redacted_failure(&run, "alice@127.0.0.1:1", "SuperSecret99");
}

#[test]
fn missing_sqlite_file_exits_3() {
    let dir = tempdir();
    write_mapping(
        dir.path(),
        "tidemark.toml",
        &scenario::mapping_toml("per_member", false),
    );
    let run = tidemark(
        dir.path(),
        &["status", "--database", "sqlite:does-not-exist.db"],
    );
    run.expect_code(3);
    assert!(
        !dir.path().join("does-not-exist.db").exists(),
        "a read-only command must not create the database file"
    );
}

// ---------------------------------------------------------------------------------------------
// 6. expand

#[tokio::test]
async fn expand_dry_run_prints_ddl_and_changes_nothing() {
    let dir = tempdir();
    let url = sqlite_scenario_db(dir.path(), "e.db", None).await;
    let run = tidemark(dir.path(), &["expand", "--database", &url, "--dry-run"]);
    run.expect_code(0);
    assert!(run.stdout.contains("CREATE TABLE"), "{}", run.stdout);
    assert!(
        run.stdout.contains(scenario::WATERMARK_TABLE),
        "{}",
        run.stdout
    );

    let mut conn = sqlite_conn(dir.path(), "e.db").await;
    assert!(
        !sqlite_table_exists(&mut conn, scenario::WATERMARK_TABLE).await,
        "expand --dry-run created the watermark table"
    );
    conn.close().await.unwrap();

    // A second dry run still has everything pending.
    let run = tidemark(dir.path(), &["expand", "--database", &url, "--dry-run"]);
    run.expect_code(0);
    assert!(run.stdout.contains("CREATE TABLE"), "{}", run.stdout);
}

#[tokio::test]
async fn expand_twice_second_has_nothing_to_apply() {
    let dir = tempdir();
    let url = sqlite_scenario_db(dir.path(), "e.db", None).await;
    let first = tidemark(dir.path(), &["expand", "--database", &url]);
    first.expect_code(0);
    assert!(
        !first.stdout.contains("nothing to apply"),
        "{}",
        first.stdout
    );

    let mut conn = sqlite_conn(dir.path(), "e.db").await;
    assert!(sqlite_table_exists(&mut conn, scenario::WATERMARK_TABLE).await);
    assert_eq!(count_rows(&mut conn, scenario::WATERMARK_TABLE).await, 0);
    conn.close().await.unwrap();

    let second = tidemark(dir.path(), &["expand", "--database", &url]);
    second.expect_code(0);
    assert!(
        second.stdout.contains("nothing to apply"),
        "{}",
        second.stdout
    );
    let dry = tidemark(dir.path(), &["expand", "--database", &url, "--dry-run"]);
    dry.expect_code(0);
    assert!(dry.stdout.contains("nothing to apply"), "{}", dry.stdout);
    assert!(!dry.stdout.contains("CREATE TABLE"), "{}", dry.stdout);
}

// ---------------------------------------------------------------------------------------------
// 7. status

#[test]
fn status_after_demo_shows_the_audit() {
    let dir = tempdir();
    demo(dir.path());
    let db = format!("sqlite:{DEMO_DB}");
    let run = tidemark(
        dir.path(),
        &["status", "--database", &db, "--mapping", DEMO_TOML],
    );
    run.expect_code(0);
    assert!(run.stdout.contains("last audits"), "{}", run.stdout);
    assert!(
        run.stdout.contains("fail"),
        "the demo audit drifts:\n{}",
        run.stdout
    );
    assert!(!run.stdout.contains("never run"), "{}", run.stdout);
    // A finished backfill shows when it finished, and when it started (issue 24: the start
    // time was printed as the finish time).
    let line = run
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("backfill:"))
        .unwrap_or_else(|| panic!("no backfill line:\n{}", run.stdout));
    assert!(
        line.contains(" done at ") && line.contains("(started "),
        "{line}"
    );

    // The same, from DATABASE_URL and the default mapping name.
    std::fs::copy(dir.path().join(DEMO_TOML), dir.path().join("tidemark.toml")).unwrap();
    let env_run = tidemark_env(dir.path(), &["status"], &[("DATABASE_URL", &db)]);
    env_run.expect_code(0);
    assert!(env_run.stdout.contains("last audits"), "{}", env_run.stdout);
}

#[tokio::test]
async fn status_on_fresh_database_says_nothing_ran() {
    let dir = tempdir();
    let url = sqlite_scenario_db(dir.path(), "s.db", Some(CLEAN_SCENARIO)).await;
    let run = tidemark(dir.path(), &["status", "--database", &url]);
    run.expect_code(0);
    assert!(run.stdout.contains("not run"), "{}", run.stdout);
    assert!(run.stdout.contains("never run"), "{}", run.stdout);
    let mut conn = sqlite_conn(dir.path(), "s.db").await;
    assert!(
        !sqlite_table_exists(&mut conn, scenario::WATERMARK_TABLE).await,
        "status wrote to the database"
    );
    conn.close().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// 8. backfill --dry-run

#[tokio::test]
async fn backfill_dry_run_writes_nothing() {
    let dir = tempdir();
    let url = sqlite_scenario_db(dir.path(), "b.db", Some(CLEAN_SCENARIO)).await;
    tidemark(dir.path(), &["expand", "--database", &url]).expect_code(0);

    let run = tidemark(
        dir.path(),
        &["backfill", "--database", &url, "--dry-run", "--quiet"],
    );
    run.expect_code(0);
    assert!(run.stdout.contains("would write"), "{}", run.stdout);
    assert!(run.stdout.contains("dry run"), "{}", run.stdout);
    let mut conn = sqlite_conn(dir.path(), "b.db").await;
    assert_eq!(count_rows(&mut conn, scenario::WATERMARK_TABLE).await, 0);
    conn.close().await.unwrap();

    // The real backfill then writes.
    let run = tidemark(dir.path(), &["backfill", "--database", &url, "--quiet"]);
    run.expect_code(0);
    let mut conn = sqlite_conn(dir.path(), "b.db").await;
    assert!(count_rows(&mut conn, scenario::WATERMARK_TABLE).await > 0);
    conn.close().await.unwrap();
}

#[tokio::test]
async fn backfill_before_expand_exits_nonzero_and_creates_nothing() {
    let dir = tempdir();
    let url = sqlite_scenario_db(dir.path(), "b.db", Some(CLEAN_SCENARIO)).await;
    let run = tidemark(dir.path(), &["backfill", "--database", &url, "--quiet"]);
    assert!(
        matches!(run.code, Some(2) | Some(3)),
        "backfill without the watermark table: exit {:?}\n{}",
        run.code,
        run.stderr
    );
    assert!(
        run.stderr.contains("expand"),
        "should point at expand: {}",
        run.stderr
    );
    let mut conn = sqlite_conn(dir.path(), "b.db").await;
    assert!(!sqlite_table_exists(&mut conn, scenario::WATERMARK_TABLE).await);
    conn.close().await.unwrap();
}

/// `plan` prints every stage's statements and writes nothing.
#[tokio::test]
async fn plan_prints_every_stage_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let demo = bin::command()
        .current_dir(dir.path())
        .env_remove("DATABASE_URL")
        .args(["demo", "--quiet", "--scale", "500"])
        .output()
        .unwrap();
    assert_eq!(demo.status.code(), Some(0));
    let url = format!("sqlite:{}", dir.path().join("tidemark-demo.db").display());
    let count = || async {
        let mut c = <sqlx::AnyConnection as sqlx::Connection>::connect(&url)
            .await
            .unwrap();
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tidemark_ledger")
            .fetch_one(&mut c)
            .await
            .unwrap();
        n
    };
    sqlx::any::install_default_drivers();
    let before = count().await;
    let out = bin::command()
        .current_dir(dir.path())
        .env_remove("DATABASE_URL")
        .args([
            "plan",
            "--database",
            &url,
            "--mapping",
            "tidemark-demo.toml",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    for needle in [
        "== 1. expand ==",
        "INSERT INTO \"read_watermarks\"",
        "ROW_NUMBER() OVER",
        "MAX(last_read_id, excluded.last_read_id)",
        "ALTER TABLE \"unread_counters\" DROP COLUMN \"unread_count\"",
        "nothing was changed",
    ] {
        assert!(text.contains(needle), "{needle} missing in:\n{text}");
    }
    assert_eq!(count().await, before, "plan writes nothing");
}

// ---------------------------------------------------------------------------------------------
// Small items from a newcomer's trial (issue 10)

/// `DATABASE_URL` in the environment with `--database-file`: refused (exit 2) naming
/// DATABASE_URL, where clap's conflict check named `--database` (not on the command line at
/// all); with `--database` on the command line the message names `--database`. The file alone
/// (and `sql app`, which reads only the dialect) works.
#[tokio::test]
async fn database_file_conflict_names_where_the_other_url_came_from() {
    let dir = tempdir();
    let url = sqlite_scenario_db(dir.path(), "f.db", Some(CLEAN_SCENARIO)).await;
    std::fs::write(dir.path().join("url.txt"), format!("{url}\n")).unwrap();
    let file_args = ["--database-file", "url.txt"];
    for command in [&["status"][..], &["sql", "app"], &["inspect"]] {
        let mut args: Vec<&str> = command.to_vec();
        args.extend(file_args);
        let env = tidemark_env(dir.path(), &args, &[("DATABASE_URL", &url)]);
        env.expect_code(2);
        assert!(
            env.stderr.contains("DATABASE_URL"),
            "{args:?}: {}",
            env.stderr
        );
        assert!(!env.stderr.contains("'--database <URL>'"), "{}", env.stderr);
        let mut both = args.clone();
        both.extend(["--database", &url]);
        let flag = tidemark(dir.path(), &both);
        flag.expect_code(2);
        assert!(flag.stderr.contains("--database"), "{}", flag.stderr);
        assert!(!flag.stderr.contains("DATABASE_URL"), "{}", flag.stderr);
    }
    tidemark(dir.path(), &["status", "--database-file", "url.txt"]).expect_code(0);
    let sql = tidemark(dir.path(), &["sql", "app", "--database-file", "url.txt"]);
    sql.expect_code(0);
    assert!(sql.stdout.contains("sqlite dialect"), "{}", sql.stdout);
}

/// A negative (or zero where 1 is the least, as `--cap` and `--max-rows-per-second`) number for a numeric option: exit 2 with a message
/// naming the option and the allowed range, not clap's "unexpected argument '-1'".
#[test]
fn negative_numbers_name_the_option_and_range() {
    let dir = tempdir();
    let cases: &[(&[&str], &str, &str)] = &[
        (&["audit", "--cap", "-1"], "--cap", "1 or more"),
        // `--cap 0` would compare every count as "0+": refused, not read as a cap.
        (&["audit", "--cap", "0"], "--cap", "1 or more"),
        (
            &["audit", "--batch-size", "-5"],
            "--batch-size",
            "1 or more",
        ),
        (&["audit", "--batch-size", "0"], "--batch-size", "1 or more"),
        (
            &["audit", "--max-drift-rows", "-2"],
            "--max-drift-rows",
            "0 or more",
        ),
        (
            &["audit", "--max-abs-drift", "-2"],
            "--max-abs-drift",
            "0 or more",
        ),
        (
            &["backfill", "--batch-size", "-5"],
            "--batch-size",
            "1 or more",
        ),
        (&["backfill", "--retries", "-1"], "--retries", "0 or more"),
        (
            &["backfill", "--max-rows-per-second", "-3"],
            "--max-rows-per-second",
            "above 0",
        ),
        // 0 is refused, not silently read as "no throttle".
        (
            &["backfill", "--max-rows-per-second", "0"],
            "--max-rows-per-second",
            "above 0",
        ),
        (
            &["contract", "--batch-size", "-1"],
            "--batch-size",
            "1 or more",
        ),
        (
            &["contract", "--lock-retries", "-1"],
            "--lock-retries",
            "0 or more",
        ),
        (
            &["contract", "--min-clean-audits", "-1"],
            "--min-clean-audits",
            "1 or more",
        ),
        (&["demo", "--scale", "-3"], "--scale", "1 or more"),
        (&["sql", "app", "--page", "-1"], "--page", "from 1 to 1000"),
        (
            &["sql", "app", "--page", "1001"],
            "--page",
            "from 1 to 1000",
        ),
    ];
    for (args, option, range) in cases {
        let run = tidemark(dir.path(), args);
        assert_eq!(run.code, Some(2), "tidemark {args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains(&format!("'{option} <")) && run.stderr.contains(range),
            "tidemark {args:?}: {}",
            run.stderr
        );
        assert!(
            !run.stderr.contains("unexpected argument"),
            "{}",
            run.stderr
        );
    }
}

/// `status` (and `plan`) take `-q` / `--quiet` like the other commands.
#[tokio::test]
async fn status_takes_quiet() {
    let dir = tempdir();
    let url = sqlite_scenario_db(dir.path(), "q.db", Some(CLEAN_SCENARIO)).await;
    for flag in ["-q", "--quiet"] {
        let run = tidemark(dir.path(), &["status", flag, "--database", &url]);
        run.expect_code(0);
        assert!(run.stdout.contains("never run"), "{}", run.stdout);
        assert!(run.stderr.is_empty(), "{}", run.stderr);
    }
    tidemark(dir.path(), &["plan", "-q", "--database", &url]).expect_code(0);
}

/// The demo's closing hint is a command that works on what the demo left: on SQLite the audit
/// of the original (its counter kept: exit 1, drift), on a server `status` (the contract dropped
/// that database's counter, where the old hint's audit exited 2). The run names the files it
/// writes and replaces; on a server they are named for the database.
async fn demo_hint_runs(backend: Backend) {
    let Some(db) = TestDb::create(backend, "demo_hint").await else {
        return;
    };
    let dir = tempdir();
    let mut args = vec!["demo", "--quiet", "--scale", "300"];
    if backend != Backend::Sqlite {
        args.extend(["--database", &db.url]);
    }
    let run = tidemark(dir.path(), &args);
    run.expect_code(0);
    let files = run
        .stdout
        .lines()
        .find(|l| l.starts_with("This run writes, replacing them"))
        .unwrap_or_else(|| panic!("no list of files:\n{}", run.stdout));
    let stem = if backend == Backend::Sqlite {
        "tidemark-demo".to_string()
    } else {
        format!("tidemark-demo-{}", db.name)
    };
    for suffix in [".toml", "-report.csv", "-archive.csv"] {
        let name = format!("{stem}{suffix}");
        assert!(files.contains(&name), "{name} not in: {files}");
        assert!(dir.path().join(&name).exists(), "{name} not written");
    }
    let hint = run
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("Try: tidemark "))
        .unwrap_or_else(|| panic!("no hint:\n{}", run.stdout));
    let hint_args: Vec<&str> = hint.split_whitespace().collect();
    let (want_command, want_code) = if backend == Backend::Sqlite {
        ("audit", 1)
    } else {
        ("status", 0)
    };
    assert_eq!(hint_args[0], want_command, "{hint}");
    // The hint prints the URL redacted (no password here, so it is the URL itself).
    let rerun = tidemark(dir.path(), &hint_args);
    rerun.expect_code(want_code);
    db.cleanup().await;
}

on_every_backend!(demo_hint_runs);
