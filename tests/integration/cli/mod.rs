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

mod bad_input;
mod pipeline;
mod unreachable;

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

/// Copies into `dir` the files `tidemark demo` writes (its database, mapping and report, each
/// test its own copy: audits and `status` write to the database's ledger). The demo runs once
/// per build of the binary, shared by the tests that start from its result (a demo takes most
/// of a minute on a busy machine): under `cargo test` (threads) and `cargo nextest` (one
/// process per test) alike, the first test to come makes it in
/// `$TMPDIR/tidemark-test-demo-<binary's size and mtime>/` under a lock folder beside it, the
/// others wait for its `done` mark. A lock older than ten minutes is a crashed test's: the
/// waiter then runs a demo of its own. `demo_creates_database_mapping_and_report_and_reruns`
/// runs the demo itself.
fn demo_copy(dir: &Path) {
    let files = shared_demo();
    for entry in std::fs::read_dir(&files).expect("the shared demo's folder") {
        let from = entry.expect("an entry").path();
        if from.is_file() {
            let to = dir.join(from.file_name().expect("a file name"));
            std::fs::copy(&from, &to).unwrap_or_else(|e| panic!("copying {}: {e}", from.display()));
        }
    }
}

/// The folder of the shared demo's files (see [`demo_copy`]).
fn shared_demo() -> PathBuf {
    static FILES: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    FILES.get_or_init(make_shared_demo).clone()
}

fn make_shared_demo() -> PathBuf {
    let meta = std::fs::metadata(bin::PATH).expect("the tidemark binary");
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let root = std::env::temp_dir().join(format!("tidemark-test-demo-{}-{mtime}", meta.len()));
    let (files, done, lock) = (
        root.join("files"),
        root.join("done"),
        root.with_extension("lock"),
    );
    let started = std::time::Instant::now();
    loop {
        if done.exists() {
            return files;
        }
        if std::fs::create_dir(&lock).is_ok() {
            /// Removes the lock folder when the demo is made or its test panics.
            struct Unlock(PathBuf);
            impl Drop for Unlock {
                fn drop(&mut self) {
                    let _ = std::fs::remove_dir(&self.0);
                }
            }
            let _unlock = Unlock(lock.clone());
            let _ = std::fs::remove_dir_all(&root);
            std::fs::create_dir_all(&files).expect("the shared demo's folder");
            demo(&files);
            std::fs::write(&done, "").expect("the shared demo's done mark");
            return files;
        }
        if started.elapsed() > std::time::Duration::from_secs(600) {
            let own = tempfile::tempdir().expect("a temporary folder").keep();
            demo(&own);
            return own;
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
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
