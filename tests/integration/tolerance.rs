//! Tolerances and the audits the gate relies on (issue 13, rows 6, 7 and 8;
//! `shared/spec/interface.md`, `audit`): the real binary on the demo's SQLite database, which
//! holds injected drift.
//!
//! - with no tolerance option any drifting row fails; once any tolerance option is given, only
//!   the limits given are checked (a tolerance given alone is the tolerance), and the ledger
//!   stores the limits not checked as null;
//! - an audit whose scope checks no row exits 2 naming the scope, unless `--allow-empty`;
//! - the gate closes, saying why, when an audit's evidence in the ledger cannot be read (a
//!   renamed key), instead of reading it as a zero tolerance.

use std::path::Path;

use sqlx::{AnyConnection, Connection, Row};

use crate::common::bin::{run as tidemark, Run};

const DEMO_DB: &str = "tidemark-demo.db";
const DEMO_TOML: &str = "tidemark-demo.toml";

/// `tidemark audit` on the demo database with `extra` options.
fn audit(dir: &Path, extra: &[&str]) -> Run {
    let db = format!("sqlite:{DEMO_DB}");
    let mut args = vec![
        "audit",
        "--database",
        &db,
        "--mapping",
        DEMO_TOML,
        "--report",
        "t.csv",
    ];
    args.extend_from_slice(extra);
    tidemark(dir, &args)
}

/// A folder holding the demo's database (drifting counters), mapping and ledger.
fn demo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    tidemark(dir.path(), &["demo"]).expect_code(0);
    dir
}

async fn ledger_conn(dir: &Path) -> AnyConnection {
    sqlx::any::install_default_drivers();
    AnyConnection::connect(&format!("sqlite:{}", dir.join(DEMO_DB).display()))
        .await
        .expect("opening the demo database")
}

/// The options JSON of the newest audit in the ledger.
async fn newest_audit_options(dir: &Path) -> serde_json::Value {
    let mut conn = ledger_conn(dir).await;
    let row = sqlx::query(
        "SELECT options FROM tidemark_ledger WHERE stage = 'audit' ORDER BY id DESC LIMIT 1",
    )
    .fetch_one(&mut conn)
    .await
    .expect("an audit in the ledger");
    serde_json::from_str(&row.get::<String, _>("options")).expect("options JSON")
}

#[tokio::test]
async fn a_tolerance_given_alone_is_the_tolerance() {
    let dir = demo();
    // No tolerance option: any drifting row fails.
    audit(dir.path(), &[]).expect_code(1);
    // One limit given alone: only that one is checked (the ratio and |drift| are not).
    let run = audit(dir.path(), &["--max-drift-rows", "1000000"]);
    run.expect_code(0);
    assert!(run.stdout.contains("PASS"), "{}", run.stdout);
    let options = newest_audit_options(dir.path()).await;
    assert_eq!(options["max_drift_rows"], 1000000);
    assert!(options["max_drift_ratio"].is_null(), "{options}");
    assert!(options["max_abs_drift"].is_null(), "{options}");
    // The limit given still fails when crossed.
    let run = audit(dir.path(), &["--max-drift-rows", "0"]);
    run.expect_code(1);
    assert!(run.stdout.contains("--max-drift-rows 0"), "{}", run.stdout);
    assert!(!run.stdout.contains("--max-abs-drift"), "{}", run.stdout);
    // The same with the largest |drift| alone.
    audit(dir.path(), &["--max-abs-drift", "1000000"]).expect_code(0);
    // Without options the ledger keeps storing every limit at zero, as it always did.
    audit(dir.path(), &[]).expect_code(1);
    let options = newest_audit_options(dir.path()).await;
    assert_eq!(options["max_drift_rows"], 0);
    assert_eq!(options["max_drift_ratio"], 0.0);
    assert_eq!(options["max_abs_drift"], 0);
}

#[test]
fn an_audit_that_checks_no_row_exits_2() {
    let dir = demo();
    // A range the conversations do not reach: 0 rows checked is an error naming the scope.
    let range = "900000..900010";
    let run = audit(dir.path(), &["--conversations", range]);
    run.expect_code(2);
    assert!(
        run.stderr.contains("checked no row") && run.stderr.contains(range),
        "the message names the scope:\n{}",
        run.stderr
    );
    assert!(run.stderr.contains("--allow-empty"), "{}", run.stderr);
    assert!(!run.stdout.contains("PASS"), "{}", run.stdout);
    // Unless an empty scope is accepted.
    let run = audit(dir.path(), &["--conversations", range, "--allow-empty"]);
    run.expect_code(0);
    assert!(run.stdout.contains("PASS"), "{}", run.stdout);
    // A range written backwards is bad input too.
    let run = audit(dir.path(), &["--conversations", "5..3"]);
    run.expect_code(2);
    assert!(run.stderr.contains("5..3"), "{}", run.stderr);
}

#[tokio::test]
async fn unreadable_evidence_closes_the_gate() {
    let dir = demo();
    let db = format!("sqlite:{DEMO_DB}");
    let contract = |extra: &[&str]| {
        let mut args = vec!["contract", "--database", &db, "--mapping", DEMO_TOML];
        args.extend_from_slice(extra);
        tidemark(dir.path(), &args)
    };
    // A tolerant audit that passes: the gate counts it only with --accept-tolerance.
    audit(
        dir.path(),
        &[
            "--max-drift-rows",
            "1000000",
            "--max-drift-ratio",
            "1",
            "--max-abs-drift",
            "1000000",
        ],
    )
    .expect_code(0);
    let run = contract(&[]);
    run.expect_code(1);
    assert!(run.stdout.contains("--accept-tolerance"), "{}", run.stdout);
    contract(&["--accept-tolerance"]).expect_code(0);

    // The tolerance keys renamed in the ledger: read as zero, the audit would look strict and
    // open the gate. The evidence cannot be read: the gate closes and says why.
    let mut conn = ledger_conn(dir.path()).await;
    sqlx::query(
        "UPDATE tidemark_ledger SET options = REPLACE(REPLACE(REPLACE(options, '\"max_drift_rows\"', '\"rows\"'), '\"max_drift_ratio\"', '\"ratio\"'), '\"max_abs_drift\"', '\"abs\"') WHERE stage = 'audit'",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    for extra in [&[][..], &["--accept-tolerance"][..]] {
        let run = contract(extra);
        run.expect_code(1);
        assert!(
            run.stdout.contains("gate: CLOSED") && run.stdout.contains("cannot be read"),
            "{}",
            run.stdout
        );
        assert!(run.stdout.contains("max_drift_rows"), "{}", run.stdout);
    }
}
