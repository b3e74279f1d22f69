//! The stages run as users script them: the demo, a clean pipeline, audits with and without drift or tolerance, dry runs, `status`, `plan`, and their exit codes.

use super::*;

on_every_backend!(clean_audit_exits_0_all_backends, demo_hint_runs);

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
    demo_copy(dir.path());
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
    demo_copy(dir.path());
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
    demo_copy(dir.path());
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
