//! `contract --execute` that fails at the DDL (issue 9: the stage returns a typed outcome the
//! CLI renders; issue 13, row 5): a PostgreSQL view that depends on the counter column makes
//! the DROP fail. The gate names the view and is closed (see `contract_dependents.rs`); forced
//! past it with `--force --reason`, the DROP fails, and the verdict, the final audit and the
//! archive are still printed, with the database's DETAIL naming the view; the exit code is 3,
//! and the column and the archive stay.

use std::path::Path;
use std::process::Command;

use sqlx::{Connection, Row};

use crate::common::{exec_all, Backend, TestDb};
use crate::scenario;

/// A scenario with no drift at all after the backfill.
const CLEAN_SCENARIO: &str = "S3a-multi-device-receipts";

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn tidemark(dir: &Path, args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_tidemark"))
        .args(args)
        .current_dir(dir)
        .env_remove("DATABASE_URL")
        .output()
        .expect("running tidemark");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[track_caller]
fn expect(run: &Run, code: i32) {
    assert_eq!(
        run.code,
        Some(code),
        "exit code\n--- stdout\n{}\n--- stderr\n{}",
        run.stdout,
        run.stderr
    );
}

#[tokio::test]
async fn a_failed_drop_still_shows_the_verdict_the_archive_and_the_detail() {
    let Some(db) = TestDb::create(Backend::Postgres, "contract_detail").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut conn = db.connect().await;
    scenario::load_one(&mut conn, CLEAN_SCENARIO).await;
    std::fs::write(
        dir.path().join("tidemark.toml"),
        scenario::mapping_toml("per_member", false),
    )
    .unwrap();
    let url = db.url.as_str();
    expect(&tidemark(dir.path(), &["expand", "--database", url]), 0);
    expect(
        &tidemark(dir.path(), &["backfill", "--database", url, "--quiet"]),
        0,
    );
    expect(
        &tidemark(
            dir.path(),
            &["audit", "--database", url, "--report", "a.csv", "--quiet"],
        ),
        0,
    );
    exec_all(
        &mut conn,
        &[
            "CREATE VIEW unread_totals AS SELECT SUM(unread_count) AS total FROM unread_counters"
                .to_string(),
        ],
    )
    .await;

    let run = tidemark(
        dir.path(),
        &[
            "contract",
            "--database",
            url,
            "--execute",
            "--quiet",
            "--force",
            "--reason",
            "testing a failed drop",
        ],
    );
    expect(&run, 3);
    let out = &run.stdout;
    assert!(
        out.contains("gate: CLOSED") && out.contains("unread_totals depends on unread_count"),
        "the verdict names the view:\n{out}"
    );
    assert!(out.contains("final audit #"), "the final audit:\n{out}");
    // The final audit's report is written in the working directory, beside the other
    // reports, 0600 (issue 29 row 7: not at a predictable path of the shared /tmp).
    let report = dir.path().join("tidemark-contract-audit.csv");
    let mode = std::fs::metadata(&report)
        .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777);
    assert_eq!(
        mode.ok(),
        Some(0o600),
        "the report in the working directory"
    );
    assert!(
        out.contains("archived") && out.contains("tidemark_counter_archive"),
        "the archive:\n{out}"
    );
    assert!(out.contains("failed: "), "the failure:\n{out}");
    assert!(
        out.contains("database detail: ") && out.contains("unread_totals"),
        "the database's DETAIL names the view:\n{out}"
    );
    assert!(
        run.stderr.contains("tidemark: error: "),
        "the error on stderr:\n{}",
        run.stderr
    );

    // Nothing was lost: the column is still there, and so is the archive.
    let has_column: i64 = sqlx::query(
        "SELECT COUNT(*) AS n FROM information_schema.columns WHERE table_name = 'unread_counters' AND column_name = 'unread_count'",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap()
    .get("n");
    assert_eq!(has_column, 1);
    let archived: i64 = sqlx::query("SELECT COUNT(*) AS n FROM tidemark_counter_archive")
        .fetch_one(&mut conn)
        .await
        .unwrap()
        .get("n");
    assert!(archived > 0);
    conn.close().await.unwrap();
    db.cleanup().await;
}
