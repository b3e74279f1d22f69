//! Per-test databases on real servers (and SQLite files) for the integration tests.
//!
//! - `TIDEMARK_TEST_BACKENDS`: comma list of `sqlite`, `postgres`, `mysql` (default: all three);
//!   a backend not in the list is skipped.
//! - `TIDEMARK_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`) and
//!   `TIDEMARK_TEST_MYSQL_URL` (default `mysql://root@127.0.0.1:3306/test`): admin URLs of the
//!   servers; each test creates its own database there (`tm_<label>_<pid>_<n>`) and drops it.
//! - A server that does not answer skips its tests with a note on stderr, except when `CI` is
//!   set: then a missing server fails the run.
//!
//! One test on every backend: write `async fn name(backend: Backend)` and list it in
//! [`on_every_backend!`], which makes the tests `name::sqlite`, `name::postgres` and
//! `name::mysql`. The built binary is run through [`bin`], CSV files are read through [`csv`];
//! connections, URL redaction and the scratch databases come from `tidemark::db` (its
//! `testing` module is shared with `benches/pipeline.rs`).

use std::sync::atomic::{AtomicU64, Ordering};

use std::time::Duration;

use sqlx::any::AnyConnectOptions;
use sqlx::{AnyConnection, ConnectOptions, Connection};
use tidemark::db::{testing, Dsn};

pub mod bin;
pub mod csv;
pub mod faults;
pub mod model;
pub mod page;

/// A database server kind the suites run against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A SQLite file in a temporary directory.
    Sqlite,
    /// A PostgreSQL server.
    Postgres,
    /// A MySQL or MariaDB server.
    Mysql,
}

impl Backend {
    /// Every backend.
    pub const ALL: [Backend; 3] = [Backend::Sqlite, Backend::Postgres, Backend::Mysql];

    /// The name used in `TIDEMARK_TEST_BACKENDS` and in messages.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
            Backend::Mysql => "mysql",
        }
    }

    /// Whether `TIDEMARK_TEST_BACKENDS` (default: all) selects this backend.
    pub fn enabled(self) -> bool {
        match std::env::var("TIDEMARK_TEST_BACKENDS") {
            Ok(list) if !list.trim().is_empty() => list.split(',').any(|item| {
                let item = item.trim().to_ascii_lowercase();
                match self {
                    Backend::Sqlite => item == "sqlite",
                    Backend::Postgres => matches!(item.as_str(), "postgres" | "postgresql" | "pg"),
                    Backend::Mysql => matches!(item.as_str(), "mysql" | "mariadb"),
                }
            }),
            _ => true,
        }
    }

    /// The admin URL of the server (None for SQLite).
    pub fn admin_url(self) -> Option<String> {
        tidemark::db::testing::admin_url(match self {
            Backend::Sqlite => tidemark::dialect::Dialect::Sqlite,
            Backend::Postgres => tidemark::dialect::Dialect::Postgres,
            Backend::Mysql => tidemark::dialect::Dialect::Mysql,
        })
    }
}

/// Opens one connection (10 s timeout), the URL parsed, redacted and scrubbed by
/// `tidemark::db::Dsn`. Unlike `Dsn::connect` it sets no session options, and its future is
/// `Send` (tests open connections inside spawned tasks).
///
/// Errors: a message naming the redacted URL and the driver's (scrubbed) reason.
pub async fn try_connect(url: &str) -> Result<AnyConnection, String> {
    sqlx::any::install_default_drivers();
    let dsn = Dsn::parse(url).map_err(|e| format!("{e:#}"))?;
    let options: AnyConnectOptions = dsn
        .expose()
        .parse::<AnyConnectOptions>()
        .map_err(|e| format!("bad URL {dsn}: {}", dsn.scrub(&e.to_string())))?
        .disable_statement_logging();
    match tokio::time::timeout(
        Duration::from_secs(10),
        AnyConnection::connect_with(&options),
    )
    .await
    {
        Err(_) => Err(format!("{dsn}: no answer within 10 s")),
        Ok(Err(e)) => Err(format!("{dsn}: {}", dsn.scrub(&e.to_string()))),
        Ok(Ok(conn)) => Ok(conn),
    }
}

/// Opens one connection or panics with the redacted reason.
pub async fn connect(url: &str) -> AnyConnection {
    try_connect(url)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {e}"))
}

/// Runs each statement in order (as raw SQL: no prepared statement), panicking with the
/// failing statement (its first 300 characters) and the error.
pub async fn exec_all(conn: &mut AnyConnection, statements: &[String]) {
    for sql in statements {
        if let Err(e) = sqlx::raw_sql(sql).execute(&mut *conn).await {
            let head: String = sql.chars().take(300).collect();
            panic!("statement failed: {e}\n  {head}");
        }
    }
}

/// A database made for one test: a SQLite file in a temporary directory, or a database of its
/// own on the PostgreSQL / MySQL server. Call [`TestDb::cleanup`] at the end; if the test panics
/// first, `Drop` still drops the server database (best effort).
pub struct TestDb {
    /// URL of the test database.
    pub url: String,
    /// Which backend.
    pub backend: Backend,
    /// The database name on the server (the file name for SQLite).
    pub name: String,
    admin_url: Option<String>,
    dir: Option<tempfile::TempDir>,
    cleaned: bool,
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A database name unique to this process and call: `tm_<label>_<pid>_<n>`, label reduced to
/// `[a-z0-9_]` and cut so the whole name stays under 60 characters.
pub fn unique_name(label: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let suffix = format!("_{}_{n}", std::process::id());
    let mut clean: String = label
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '_'
            }
        })
        .collect();
    let room = 59 - "tm_".len() - suffix.len();
    clean.truncate(room);
    format!("tm_{clean}{suffix}")
}

/// A server is missing: panic under CI, else note it and skip.
fn unavailable(backend: Backend, reason: &str) -> Option<TestDb> {
    if std::env::var_os("CI").is_some() {
        panic!(
            "{} test server unavailable and CI is set (a missing server must fail CI): {reason}",
            backend.name()
        );
    }
    eprintln!("skipping {}: {reason}", backend.name());
    None
}

impl TestDb {
    /// Makes a fresh database for a test named `label`. None (with a note on stderr) when the
    /// backend is not selected, or when its server does not answer and `CI` is not set.
    ///
    /// # Panics
    ///
    /// When the server does not answer and `CI` is set, or it answers but refuses to create the
    /// database.
    pub async fn create(backend: Backend, label: &str) -> Option<TestDb> {
        if !backend.enabled() {
            eprintln!("skipping {}: not in TIDEMARK_TEST_BACKENDS", backend.name());
            return None;
        }
        let name = unique_name(label);
        let Some(admin_url) = backend.admin_url() else {
            let dir = tempfile::tempdir().expect("creating a temporary directory");
            let path = dir.path().join(format!("{name}.db"));
            return Some(TestDb {
                url: format!("sqlite:{}?mode=rwc", path.display()),
                backend,
                name,
                admin_url: None,
                dir: Some(dir),
                cleaned: false,
            });
        };
        let admin = Dsn::parse(&admin_url).expect("the admin URL parses");
        let mut conn = match admin.connect().await {
            Ok(conn) => conn,
            Err(reason) => return unavailable(backend, &format!("{reason:#}")),
        };
        let url = testing::recreate_database(&mut conn, &admin, &name)
            .await
            .unwrap_or_else(|e| panic!("{}: {e:#}", backend.name()));
        let _ = conn.close().await;
        Some(TestDb {
            url: url.expose().to_string(),
            backend,
            name,
            admin_url: Some(admin_url),
            dir: None,
            cleaned: false,
        })
    }

    /// A new connection to the test database.
    pub async fn connect(&self) -> AnyConnection {
        connect(&self.url).await
    }

    /// Drops the database (server) or removes the directory (SQLite). Close this test's
    /// connections first (PostgreSQL forces them closed anyway).
    ///
    /// # Panics
    ///
    /// When the server refuses the `DROP DATABASE`.
    pub async fn cleanup(mut self) {
        self.cleaned = true;
        if let Some(admin_url) = &self.admin_url {
            let admin = Dsn::parse(admin_url).expect("the admin URL parses");
            let mut conn = connect(admin_url).await;
            testing::drop_database(&mut conn, &admin, &self.name)
                .await
                .unwrap_or_else(|e| panic!("{}: {e:#}", self.backend.name()));
            let _ = conn.close().await;
        }
        if let Some(dir) = self.dir.take() {
            let _ = dir.close();
        }
    }
}

impl Drop for TestDb {
    /// Best effort when [`TestDb::cleanup`] was not reached (a failing test): drop the server
    /// database from a helper thread with its own runtime. Errors are ignored.
    fn drop(&mut self) {
        if self.cleaned {
            return;
        }
        let (Some(admin_url), name) = (self.admin_url.clone(), self.name.clone()) else {
            return;
        };
        let handle = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                let Ok(admin) = Dsn::parse(&admin_url) else {
                    return;
                };
                if let Ok(mut conn) = admin.connect().await {
                    let _ = testing::drop_database(&mut conn, &admin, &name).await;
                    let _ = conn.close().await;
                }
            });
        });
        let _ = handle.join();
    }
}

/// Expands each listed `async fn name(backend: Backend)` into a module `name` of tests, one per
/// backend: `name::sqlite`, `name::postgres`, `name::mysql` (the one way to run a test on every
/// backend). Each test skips itself through [`TestDb::create`] when its backend is not selected.
///
/// - `on_every_backend!(a, b)`: `#[tokio::test]` on SQLite, PostgreSQL and MySQL/MariaDB.
/// - `on_every_backend!(multi_thread: a, b)`: the same on a two-worker multi-thread runtime.
/// - `on_every_backend!(servers: a, b)`: PostgreSQL and MySQL/MariaDB only (what SQLite cannot
///   have, such as database users).
macro_rules! on_every_backend {
    (multi_thread: $($name:ident),+ $(,)?) => {
        $(
            $crate::common::on_every_backend!(
                @expand [tokio::test(flavor = "multi_thread", worker_threads = 2)] $name
                [sqlite Sqlite, postgres Postgres, mysql Mysql]
            );
        )+
    };
    (servers: $($name:ident),+ $(,)?) => {
        $(
            $crate::common::on_every_backend!(
                @expand [tokio::test] $name [postgres Postgres, mysql Mysql]
            );
        )+
    };
    (@expand [$attr:meta] $name:ident [$($test:ident $variant:ident),+]) => {
        mod $name {
            $(
                #[$attr]
                async fn $test() {
                    super::$name($crate::common::Backend::$variant).await
                }
            )+
        }
    };
    ($($name:ident),+ $(,)?) => {
        $(
            $crate::common::on_every_backend!(
                @expand [tokio::test] $name [sqlite Sqlite, postgres Postgres, mysql Mysql]
            );
        )+
    };
}
pub(crate) use on_every_backend;

/// `file:line:col` of the value on the mapping line `line` (e.g. `column = "nope"`, the whole
/// line as written) of the mapping text `mapping` saved as `file`: where tidemark's messages
/// place a mapping key's value (1-based; the column of the value's first character).
///
/// # Panics
///
/// When `mapping` has no such line, or has it more than once.
pub fn value_at(file: &str, mapping: &str, line: &str) -> String {
    let found: Vec<(usize, &str)> = mapping
        .lines()
        .enumerate()
        .filter(|(_, l)| l.trim() == line)
        .collect();
    assert_eq!(found.len(), 1, "{line:?} once in the mapping:\n{mapping}");
    let (n, text) = found[0];
    let eq = text.find('=').expect("a key = value line");
    let value = eq + 1 + (text[eq + 1..].len() - text[eq + 1..].trim_start().len());
    format!("{file}:{}:{}", n + 1, value + 1)
}

/// The statements of a SQL file (each ends with `;` at the end of a line; `--` lines skipped).
pub fn statements(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("--") || line.trim().is_empty() {
            continue;
        }
        current.push_str(line);
        current.push('\n');
        if line.trim_end().ends_with(';') {
            out.push(
                std::mem::take(&mut current)
                    .trim_end()
                    .trim_end_matches(';')
                    .to_string(),
            );
        }
    }
    out
}

/// The watermark table of a fixture with integer keys: (conversation, user) ->
/// (last_read_id, source).
pub async fn int_watermarks(
    conn: &mut AnyConnection,
) -> std::collections::BTreeMap<(i64, i64), (i64, String)> {
    use sqlx::Row;
    sqlx::query("SELECT conversation_id, user_id, last_read_id, source FROM read_watermarks")
        .fetch_all(&mut *conn)
        .await
        .unwrap()
        .iter()
        .map(|r| {
            (
                (r.try_get(0).unwrap(), r.try_get(1).unwrap()),
                (
                    r.try_get(2).unwrap(),
                    tidemark::values::text(r, 3).unwrap().unwrap_or_default(),
                ),
            )
        })
        .collect()
}

/// Rows for the legacy schema (`tidemark::legacy_schema`): conversations 1 and 2, each with
/// four messages from `a` (positions `first(conv) + 1 ..= first(conv) + 4`) and members `a`,
/// `b`, `c`, one counter row each: 0 for `a` (the sender), `unread` for `b` and `c`.
pub fn two_small_conversations(first: impl Fn(i64) -> i64, unread: i64) -> Vec<String> {
    let mut sql = Vec::new();
    for conv in 1..=2i64 {
        for id in 1..=4i64 {
            sql.push(format!(
                "INSERT INTO messages (conv_id, id, sender_id) VALUES ({conv}, {}, 'a')",
                first(conv) + id
            ));
        }
        for user in ["a", "b", "c"] {
            sql.push(format!(
                "INSERT INTO members (conv_id, user_id, active) VALUES ({conv}, '{user}', 1)"
            ));
            let unread = if user == "a" { 0 } else { unread };
            sql.push(format!(
                "INSERT INTO unread_counters (conv_id, user_id, unread_count) \
                 VALUES ({conv}, '{user}', {unread})"
            ));
        }
    }
    sql
}

/// The mapping of a known system, `contrib/mappings/<system>/tidemark.toml` (issue 32): the
/// file a DBA of that system starts from, tested here against its fixture in `tests/fixtures/`.
pub fn known_mapping(system: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("contrib/mappings")
        .join(system)
        .join("tidemark.toml")
}

/// A file beside a known system's mapping in `contrib/mappings/<system>/` (Synapse's views).
pub fn known_mapping_file(system: &str, file: &str) -> std::path::PathBuf {
    known_mapping(system).with_file_name(file)
}
