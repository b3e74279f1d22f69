//! The one fixture runner (issue 33): a fixture is a folder under `tests/fixtures/NAME/` and
//! every fixture suite (`zulip`, `mattermost`, `total_minus_seen`, `readers`, `synapse`) drives
//! it through the stages with [`Fixture`], keeping only what is particular to it.
//!
//! A fixture folder holds:
//!
//! - the schema and data: `schema.sql`, or per engine `schema.<engine>.sql` (`sqlite`,
//!   `postgres`, `mysql`); a fixture with several files names their stems
//!   ([`Fixture::load_files`]: Synapse's `synapse` and `views`), each read the same way;
//! - the mapping, `tidemark.toml` (its predicates checked for the engine when loaded);
//! - the expected values, worked out by hand in `expected.md`, and where a suite compares whole
//!   tables, as CSV: `expected_watermarks.csv` (`conversation_id,user_id,last_read_id,source`,
//!   the watermark table after the backfill, in any order; an empty source is NULL or the
//!   application's `''`) and `expected_drift.csv` (the audit's drift report, exactly: header and
//!   rows in the report's order). [`Fixture::story`] checks each one the folder has.
//!
//! The stage calls panic with the stage's error: a fixture that does not run is a failed test.

use std::path::{Path, PathBuf};

use sqlx::{AnyConnection, Connection, Row};
use tidemark::db::Dsn;
use tidemark::dialect::Dialect;
use tidemark::mapping::Mapping;
use tidemark::stages::backfill::BackfillSummary;
use tidemark::stages::contract::{self, ContractOptions, ContractOutcome};
use tidemark::stages::{audit, backfill, expand};

use super::{csv, exec_all, statements, Backend, TestDb};

/// `tests/fixtures/NAME`.
pub fn dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The file of `stem` for `backend` in `dir`, or beside the known system's mapping in
/// `contrib/mappings/<folder name>/` (Synapse's views): `<stem>.<engine>.sql` when the folder
/// has one, else `<stem>.sql`.
///
/// # Panics
///
/// When neither exists in either folder.
pub fn sql_file(dir: &Path, stem: &str, backend: Backend) -> PathBuf {
    let known = dir
        .file_name()
        .map(|n| super::known_mapping_file(&n.to_string_lossy(), "x"))
        .and_then(|p| p.parent().map(Path::to_path_buf));
    for folder in std::iter::once(dir.to_path_buf()).chain(known) {
        let per_engine = folder.join(format!("{stem}.{}.sql", backend.name()));
        if per_engine.exists() {
            return per_engine;
        }
        let shared = folder.join(format!("{stem}.sql"));
        if shared.exists() {
            return shared;
        }
    }
    panic!(
        "{}: neither {stem}.{}.sql nor {stem}.sql (nor in contrib/mappings/)",
        dir.display(),
        backend.name()
    )
}

/// The mapping of fixture `name`: its own `tidemark.toml`, else the known system's in
/// `contrib/mappings/NAME/` (the one a DBA of that system starts from).
pub fn mapping_file(name: &str) -> PathBuf {
    let own = dir(name).join("tidemark.toml");
    if own.exists() {
        own
    } else {
        super::known_mapping(name)
    }
}

/// One fixture loaded into a fresh database of one backend.
pub struct Fixture {
    /// The test database (dropped by [`Fixture::finish`]).
    pub db: TestDb,
    /// A connection to it.
    pub conn: AnyConnection,
    /// Its dialect.
    pub dialect: Dialect,
    /// The fixture's mapping (`tidemark.toml`).
    pub mapping: Mapping,
    /// The fixture's folder.
    pub dir: PathBuf,
    /// A temporary folder for reports and other files the stages write.
    pub tmp: tempfile::TempDir,
}

/// What [`Fixture::story`] ran: the backfill's summary, the audit's outcome and its report.
pub struct Story {
    /// The backfill's summary.
    pub backfill: BackfillSummary,
    /// The audit's outcome (report at `Fixture::path("drift.csv")`).
    pub audit: audit::AuditOutcome,
    /// The drift report as read back.
    pub report: csv::CsvFile,
}

impl Fixture {
    /// Loads fixture `name` (its `schema` file) on `backend`; None when the backend is skipped.
    pub async fn load(backend: Backend, name: &str) -> Option<Fixture> {
        Self::load_files(backend, name, &["schema"]).await
    }

    /// Loads fixture `name` on `backend` from the SQL files of `stems`, in order (see
    /// [`sql_file`]), and its mapping, whose predicates are checked for the engine; None when
    /// the backend is skipped.
    pub async fn load_files(backend: Backend, name: &str, stems: &[&str]) -> Option<Fixture> {
        let db = TestDb::create(backend, name).await?;
        let dsn = Dsn::parse(&db.url).expect("test URL");
        let mut conn = dsn.connect().await.expect("connecting");
        let dir = dir(name);
        for stem in stems {
            let file = sql_file(&dir, stem, backend);
            let text = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            exec_all(&mut conn, &statements(&text)).await;
        }
        let mapping = Mapping::load(&mapping_file(name)).expect("the mapping loads");
        mapping
            .check_predicates(dsn.dialect.sql_parser_dialect(), dsn.dialect.name())
            .expect("the mapping's predicates parse");
        Some(Fixture {
            db,
            conn,
            dialect: dsn.dialect,
            mapping,
            dir,
            tmp: tempfile::tempdir().expect("a temporary folder"),
        })
    }

    /// `name` in the fixture's temporary folder.
    pub fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    /// Runs statements on the fixture's database.
    pub async fn exec(&mut self, sql: &[&str]) {
        let sql: Vec<String> = sql.iter().map(|s| s.to_string()).collect();
        exec_all(&mut self.conn, &sql).await;
    }

    /// `SELECT COUNT(*) …` (or any one integer).
    pub async fn count(&mut self, sql: &str) -> i64 {
        sqlx::query_scalar(sql)
            .fetch_one(&mut self.conn)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// `expand` (not a dry run).
    pub async fn expand(&mut self) {
        expand::run(&mut self.conn, &self.mapping, self.dialect, false)
            .await
            .expect("expand");
    }

    /// `backfill` with the default options.
    pub async fn backfill(&mut self) -> BackfillSummary {
        backfill::run(
            &mut self.conn,
            &self.mapping,
            self.dialect,
            &Default::default(),
        )
        .await
        .expect("backfill")
    }

    /// `audit` with `opts`.
    pub async fn audit(&mut self, opts: &audit::AuditOptions) -> audit::AuditOutcome {
        audit::run(&mut self.conn, &self.mapping, self.dialect, opts)
            .await
            .expect("audit")
    }

    /// `contract` with `opts`.
    pub async fn contract(&mut self, opts: &ContractOptions) -> ContractOutcome {
        contract::run(&mut self.conn, &self.mapping, self.dialect, opts)
            .await
            .expect("contract")
    }

    /// The watermark table as text rows `conversation_id,user_id,last_read_id,source` (integers
    /// written in decimal, NULL as empty), sorted.
    pub async fn watermark_rows(&mut self) -> Vec<String> {
        let rows = sqlx::query(
            "SELECT conversation_id, user_id, last_read_id, source FROM read_watermarks",
        )
        .fetch_all(&mut self.conn)
        .await
        .expect("reading read_watermarks");
        let mut out: Vec<String> = rows
            .iter()
            .map(|r| (0..4).map(|i| cell(r, i)).collect::<Vec<_>>().join(","))
            .collect();
        out.sort();
        out
    }

    /// The fixture's story up to the audit, on every fixture the same: `expand`, then
    /// `before_backfill` (what the application wrote meanwhile), `backfill`, the watermarks
    /// against `expected_watermarks.csv` when the folder has one, `audit` with `opts` (its
    /// report always `drift.csv` in [`Fixture::tmp`]) and the report against
    /// `expected_drift.csv` when the folder has one.
    pub async fn story(&mut self, before_backfill: &[&str], opts: audit::AuditOptions) -> Story {
        self.expand().await;
        self.exec(before_backfill).await;
        let backfill = self.backfill().await;
        if let Some(want) = self.expected("expected_watermarks.csv") {
            let mut want: Vec<String> = want.into_iter().skip(1).collect();
            want.sort();
            let got = self.watermark_rows().await;
            assert_eq!(got, want, "{}: watermarks", self.dir.display());
        }
        let report = self.path("drift.csv");
        let audit = self
            .audit(&audit::AuditOptions {
                report: report.clone(),
                ..opts
            })
            .await;
        let file = csv::read(&report);
        if let Some(want) = self.expected("expected_drift.csv") {
            let got: Vec<String> = std::iter::once(file.header.clone())
                .chain(file.rows.iter().map(|r| r.join(",")))
                .collect();
            assert_eq!(got, want, "{}: drift report", self.dir.display());
        }
        Story {
            backfill,
            audit,
            report: file,
        }
    }

    /// The lines of the fixture's file `name` (blank lines left out), None when it has none.
    pub fn expected(&self, name: &str) -> Option<Vec<String>> {
        let text = std::fs::read_to_string(self.dir.join(name)).ok()?;
        Some(
            text.lines()
                .filter(|l| !l.trim().is_empty())
                .map(str::to_string)
                .collect(),
        )
    }

    /// Closes the connection and drops the database.
    pub async fn finish(self) {
        let _ = self.conn.close().await;
        self.db.cleanup().await;
    }
}

/// A cell as text: an integer in decimal, a text as is, NULL as empty.
fn cell(r: &sqlx::any::AnyRow, i: usize) -> String {
    if let Ok(v) = r.try_get::<Option<i64>, _>(i) {
        return v.map(|v| v.to_string()).unwrap_or_default();
    }
    tidemark::values::text(r, i)
        .unwrap_or_else(|e| panic!("column {i}: {e}"))
        .unwrap_or_default()
}
