//! What users see, under review (insta snapshots in `tests/integration/snapshots/`): the
//! `--help` of every command, and the statements `tidemark plan` prints for the legacy schema's
//! mapping on each dialect (on PostgreSQL and MySQL/MariaDB against the real servers: `plan`
//! reads the schema).
//!
//! A change in either shows up as a snapshot diff. Accept an intended one with
//! `cargo insta accept` (or `INSTA_UPDATE=always cargo test --test integration snapshot::`) and
//! review the `.snap` diff; see `main.rs`. Under `CI` nothing is written and a difference fails.

use std::path::Path;

use crate::common::bin::{self, Run};
use crate::common::{exec_all, on_every_backend, Backend, TestDb};
use crate::scenario;

/// The commands `tidemark --help` lists (the help of each is snapshotted).
const COMMANDS: [&str; 11] = [
    "demo",
    "inspect",
    "plan",
    "expand",
    "backfill",
    "audit",
    "status",
    "contract",
    "sql",
    "completions",
    "man",
];

/// Runs the binary with a fixed help width (clap wraps at the terminal width, 100 without one).
fn help(args: &[&str]) -> Run {
    let dir = tempfile::tempdir().expect("a temporary directory");
    bin::run_env(dir.path(), args, &[("COLUMNS", "100")])
}

#[test]
fn help_of_every_command() {
    let top = help(&["--help"]);
    top.expect_code(0);
    insta::assert_snapshot!("help", top.stdout);
    // Every command the top-level help lists has its snapshot below (a new command fails here
    // until it is added to COMMANDS).
    let listed: Vec<&str> = top
        .stdout
        .split("Commands:")
        .nth(1)
        .expect("a Commands: section")
        .lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert_eq!(listed, COMMANDS, "the commands of `tidemark --help`");
    for command in COMMANDS {
        let run = help(&[command, "--help"]);
        run.expect_code(0);
        insta::assert_snapshot!(format!("help_{command}"), run.stdout);
    }
}

/// `tidemark plan` on a fresh database holding the legacy schema, with the scenarios' per_member
/// mapping: what expand, backfill and audit would run on this dialect; then, after `tidemark
/// expand`, the contract section again (its DDL needs the ledger). The database URL (unique per
/// run) is replaced by `<database>`.
async fn plan_output(backend: Backend) {
    let Some(db) = TestDb::create(backend, "snap_plan").await else {
        return;
    };
    let mut conn = db.connect().await;
    exec_all(&mut conn, &scenario::schema_sql()).await;
    drop(conn);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mapping = dir.path().join("tidemark.toml");
    std::fs::write(&mapping, scenario::mapping_toml("per_member", false))
        .expect("writing the mapping");
    let before = plan(dir.path(), &db.url);
    before.expect_code(0);
    // After expand the contract section shows the DDL that drops the counter.
    bin::run(
        dir.path(),
        &[
            "expand",
            "--database",
            &db.url,
            "--mapping",
            "tidemark.toml",
        ],
    )
    .expect_code(0);
    let after = plan(dir.path(), &db.url);
    after.expect_code(0);
    let contract = after
        .stdout
        .split("== 4. contract ==")
        .nth(1)
        .expect("a contract section");
    let shown = tidemark::db::Dsn::parse(&db.url).unwrap().to_string();
    let text = format!(
        "{}\n---- after `tidemark expand`: == 4. contract =={contract}",
        before.stdout
    )
    .replace(&shown, "<database>")
    .replace(&db.name, "<database name>");
    insta::assert_snapshot!(format!("plan_{}", backend.name()), text);
    db.cleanup().await;
}

fn plan(dir: &Path, url: &str) -> Run {
    bin::run(
        dir,
        &["plan", "--database", url, "--mapping", "tidemark.toml"],
    )
}

on_every_backend!(plan_output);
