//! Helpers of the fault suite (`faults/`, issue 13): a generated database with its mapping
//! and `expand` applied, the binary run in the background, the tidemark session found and
//! killed on the server, a second connection holding locks, and what the database holds
//! (watermarks, ledger, counters, archive) read back for comparison.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sqlx::{AnyConnection, Connection, Row};
use tidemark::db::Dsn;
use tidemark::generate::{generate, GenerateOptions};

use super::bin::{self, Run};
use super::{Backend, TestDb};

/// Member rows of a generated fault database: enough batches to stop in the middle of.
pub const MEMBERS: u64 = 1500;
/// The generator's seed (the same rows in the faulted and in the baseline database).
pub const SEED: u64 = 1313;

/// A generated database, its folder (mapping `m.toml`) and its URL; `expand` applied.
pub struct Fixture {
    /// The database.
    pub db: TestDb,
    /// The folder the binary runs in (the mapping is `m.toml` there).
    pub dir: tempfile::TempDir,
}

impl Fixture {
    /// A database with the generated fleet of [`MEMBERS`] rows (seed [`SEED`]), the scenario
    /// mapping and `expand` applied. None when the backend is skipped.
    pub async fn generated(backend: Backend, label: &str) -> Option<Fixture> {
        let db = TestDb::create(backend, label).await?;
        let dsn = Dsn::parse(&db.url).unwrap();
        let mut conn = dsn.connect().await.unwrap();
        generate(
            &mut conn,
            dsn.dialect,
            &GenerateOptions {
                members: MEMBERS,
                seed: SEED,
            },
        )
        .await
        .unwrap();
        let _ = conn.close().await;
        Some(Fixture::with_mapping(
            db,
            &crate::scenario::mapping_toml("per_member", false),
        ))
    }

    /// A fixture over an already loaded database `db`, with `mapping` written and `expand` run.
    pub fn with_mapping(db: TestDb, mapping: &str) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("m.toml"), mapping).unwrap();
        let f = Fixture { db, dir };
        f.run(&["expand"]).expect_code(0);
        f
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `args` with `--database URL --mapping m.toml` after them.
    fn full_args<'a>(&'a self, args: &[&'a str]) -> Vec<&'a str> {
        let mut all = args.to_vec();
        all.extend(["--database", self.db.url.as_str(), "--mapping", "m.toml"]);
        all
    }

    /// Runs `tidemark args… --database URL --mapping m.toml` to its end.
    pub fn run(&self, args: &[&str]) -> Run {
        bin::run(self.path(), &self.full_args(args))
    }

    /// Starts `tidemark args… --database URL --mapping m.toml` in the background (its output
    /// captured), with extra environment `env`.
    pub fn spawn(&self, args: &[&str], env: &[(&str, &str)]) -> Child {
        let mut cmd = bin::command();
        cmd.args(self.full_args(args))
            .current_dir(self.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.spawn().expect("starting tidemark")
    }

    /// A new connection to the database.
    pub async fn connect(&self) -> AnyConnection {
        self.db.connect().await
    }
}

/// Waits for `child` to end (at most `limit`) and returns what it left; kills it (and panics)
/// past the limit.
pub fn wait(child: Child, limit: Duration) -> Run {
    let started = Instant::now();
    let mut child = child;
    loop {
        if child.try_wait().expect("waiting for tidemark").is_some() {
            return child.wait_with_output().expect("reading its output").into();
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let out: Run = child.wait_with_output().unwrap().into();
            panic!("tidemark did not end within {limit:?}: {out:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends `signal` (`TERM`, `INT`, `KILL`) to `child` with kill(1).
pub fn signal(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .status()
        .expect("running kill");
    assert!(status.success(), "kill -{signal} {}", child.id());
}

/// One integer from `sql` (0 when the query fails, e.g. the table is not there yet).
pub async fn scalar(conn: &mut AnyConnection, sql: &str) -> i64 {
    sqlx::query_scalar::<_, i64>(sql)
        .fetch_one(&mut *conn)
        .await
        .unwrap_or(0)
}

/// Every watermark as `conversation|user|last_read_id|source`, in key order.
pub async fn watermarks(conn: &mut AnyConnection) -> Vec<String> {
    sqlx::query(
        "SELECT conversation_id AS c, user_id AS u, last_read_id AS w, source AS s \
         FROM read_watermarks ORDER BY conversation_id, user_id",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap()
    .iter()
    .map(|r| {
        format!(
            "{}|{}|{}|{}",
            r.get::<i64, _>("c"),
            r.get::<String, _>("u"),
            r.get::<i64, _>("w"),
            r.get::<String, _>("s")
        )
    })
    .collect()
}

/// The ledger as `(id, stage, status)`, in id order.
pub async fn ledger(conn: &mut AnyConnection) -> Vec<(i64, String, String)> {
    sqlx::query("SELECT id, stage, status FROM tidemark_ledger ORDER BY id")
        .fetch_all(&mut *conn)
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get("id"), r.get("stage"), r.get("status")))
        .collect()
}

/// The statuses of the ledger's runs of `stage`, in id order.
pub async fn statuses(conn: &mut AnyConnection, stage: &str) -> Vec<String> {
    ledger(conn)
        .await
        .into_iter()
        .filter(|(_, s, _)| s == stage)
        .map(|(_, _, status)| status)
        .collect()
}

/// Every counter as `conversation|user|value` (empty for NULL), in key order.
pub async fn counters(conn: &mut AnyConnection) -> Vec<String> {
    keyed_rows(
        conn,
        "SELECT conv_id AS c, user_id AS u, unread_count AS n FROM unread_counters ORDER BY conv_id, user_id",
    )
    .await
}

/// The archive rows of contract run `id` as `conversation|user|value`, in key order.
pub async fn archived(conn: &mut AnyConnection, id: i64) -> Vec<String> {
    keyed_rows(
        conn,
        &format!(
            "SELECT conversation_id AS c, user_id AS u, counter_value AS n FROM tidemark_counter_archive \
             WHERE contract_id = {id} ORDER BY conversation_id, user_id"
        ),
    )
    .await
}

/// The rows of `sql` (columns c: conversation, u: user, n: an INT or BIGINT value or NULL) as
/// `c|u|n`, NULL as empty, in the query's order.
async fn keyed_rows(conn: &mut AnyConnection, sql: &str) -> Vec<String> {
    sqlx::query(sql)
        .fetch_all(&mut *conn)
        .await
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{}|{}|{}",
                r.get::<i64, _>("c"),
                r.get::<String, _>("u"),
                r.try_get::<Option<i32>, _>("n")
                    .ok()
                    .flatten()
                    .map(i64::from)
                    .or_else(|| r.try_get::<Option<i64>, _>("n").ok().flatten())
                    .map(|v| v.to_string())
                    .unwrap_or_default()
            )
        })
        .collect()
}

/// Whether `unread_counters.unread_count` is still there.
pub async fn counter_column_exists(conn: &mut AnyConnection, backend: Backend) -> bool {
    let sql = match backend {
        Backend::Sqlite => {
            "SELECT COUNT(*) FROM pragma_table_info('unread_counters') WHERE name = 'unread_count'"
        }
        Backend::Postgres => {
            "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = current_schema() \
             AND table_name = 'unread_counters' AND column_name = 'unread_count'"
        }
        Backend::Mysql => {
            "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() \
             AND TABLE_NAME = 'unread_counters' AND COLUMN_NAME = 'unread_count'"
        }
    };
    scalar(conn, sql).await > 0
}

/// The server's id of this connection (PostgreSQL backend pid, MySQL connection id).
pub async fn session_id(conn: &mut AnyConnection, backend: Backend) -> i64 {
    let sql = match backend {
        Backend::Postgres => "SELECT CAST(pg_backend_pid() AS BIGINT)",
        Backend::Mysql => "SELECT CAST(CONNECTION_ID() AS SIGNED)",
        Backend::Sqlite => panic!("SQLite has no server sessions"),
    };
    sqlx::query_scalar(sql).fetch_one(&mut *conn).await.unwrap()
}

/// The server session of database `db` (not one of `mine`) that waits for a lock now: a
/// PostgreSQL backend with `wait_event_type = 'Lock'`, a MariaDB/MySQL connection in an
/// InnoDB lock wait or waiting for a metadata lock, or running an INSERT into the watermark
/// table for 2 s or more: MariaDB 10.11 leaves out of INNODB_TRX the transaction of the
/// backfill's INSERT … SELECT from its temporary plan table while SHOW ENGINE INNODB STATUS
/// shows it in LOCK WAIT (seen with the set-based backfill; the state says "Sending data").
pub async fn waiting_session(
    admin: &mut AnyConnection,
    backend: Backend,
    db: &str,
    mine: &[i64],
) -> Option<i64> {
    let mine: Vec<String> = mine.iter().map(|m| m.to_string()).collect();
    let not_mine = mine.join(", ");
    let sql = match backend {
        Backend::Postgres => format!(
            "SELECT CAST(pid AS BIGINT) FROM pg_stat_activity WHERE datname = '{db}' \
             AND wait_event_type = 'Lock' AND pid NOT IN ({not_mine}) LIMIT 1"
        ),
        Backend::Mysql => format!(
            "SELECT CAST(p.ID AS SIGNED) FROM information_schema.PROCESSLIST p \
             WHERE p.DB = '{db}' AND p.ID NOT IN ({not_mine}) AND (p.STATE LIKE 'Waiting for%lock%' \
             OR p.ID IN (SELECT trx_mysql_thread_id FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT') \
             OR (p.COMMAND IN ('Query', 'Execute') AND p.TIME >= 2 AND p.INFO LIKE 'INSERT INTO%read_watermarks%')) \
             LIMIT 1"
        ),
        Backend::Sqlite => return None,
    };
    sqlx::query_scalar::<_, i64>(&sql)
        .fetch_optional(&mut *admin)
        .await
        .unwrap()
}

/// Ends server session `id` from `admin`: `pg_terminate_backend`, or `KILL`.
pub async fn kill_session(admin: &mut AnyConnection, backend: Backend, id: i64) {
    let sql = match backend {
        Backend::Postgres => format!("SELECT pg_terminate_backend({id})"),
        Backend::Mysql => format!("KILL {id}"),
        Backend::Sqlite => panic!("SQLite has no server sessions"),
    };
    sqlx::raw_sql(&sql).execute(&mut *admin).await.unwrap();
}

/// The statements that make a second connection hold a lock on `table` that blocks writes
/// (and, with `block_reads`, reads) until ROLLBACK: PostgreSQL `LOCK TABLE` in SHARE (writes)
/// or ACCESS EXCLUSIVE mode; MySQL/MariaDB every row and gap `FOR UPDATE` (writes) or
/// `LOCK TABLES … WRITE` (reads, a metadata lock); SQLite `BEGIN IMMEDIATE` (the write lock).
pub fn hold_lock_sql(backend: Backend, table: &str, block_reads: bool) -> Vec<String> {
    match (backend, block_reads) {
        (Backend::Postgres, false) => {
            vec!["BEGIN".into(), format!("LOCK TABLE {table} IN SHARE MODE")]
        }
        (Backend::Postgres, true) => vec![
            "BEGIN".into(),
            format!("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"),
        ],
        (Backend::Mysql, false) => vec![
            "START TRANSACTION".into(),
            format!("SELECT COUNT(*) FROM (SELECT * FROM {table} FOR UPDATE) t"),
        ],
        (Backend::Mysql, true) => vec![format!("LOCK TABLES {table} WRITE")],
        (Backend::Sqlite, _) => vec!["BEGIN IMMEDIATE".into()],
    }
}

/// The statements that make a second connection hold row locks on the watermarks of every
/// conversation after `after` until ROLLBACK: the application's watermarks for those members,
/// inserted and not committed (a backfill's upsert of the same keys waits for them).
/// PostgreSQL and MySQL/MariaDB.
pub fn hold_rows_sql(backend: Backend, after: i64) -> Vec<String> {
    // A key a running backfill wrote meanwhile is skipped, not an error.
    let (begin, insert, tail) = match backend {
        Backend::Postgres => ("BEGIN", "INSERT", " ON CONFLICT DO NOTHING"),
        _ => ("START TRANSACTION", "INSERT IGNORE", ""),
    };
    vec![
        begin.to_string(),
        format!(
            "{insert} INTO read_watermarks (user_id, conversation_id, last_read_id, source) \
             SELECT user_id, conv_id, 0, 'application' FROM unread_counters WHERE conv_id > {after}{tail}"
        ),
    ]
}

/// What ends a lock taken with [`hold_lock_sql`].
pub fn release_lock_sql(backend: Backend, block_reads: bool) -> &'static str {
    match (backend, block_reads) {
        (Backend::Mysql, true) => "UNLOCK TABLES",
        _ => "ROLLBACK",
    }
}

/// The files in `dir` (names), sorted.
pub fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A small tmpfs mounted at a new folder (unmounted on drop), or None when this process may
/// not mount one (not root): the caller falls back to a file-size limit.
pub struct SmallDisk {
    /// Where it is mounted.
    pub path: PathBuf,
    _dir: tempfile::TempDir,
}

impl SmallDisk {
    /// Mounts a tmpfs of `bytes` (rounded up to pages by the kernel).
    pub fn mount(bytes: u64) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().ok()?;
        let path = dir.path().join("disk");
        std::fs::create_dir(&path).ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(&path)
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        ok.then_some(SmallDisk { path, _dir: dir })
    }
}

/// The file [`SmallDisk::fill`] writes.
pub const FILLER: &str = "filler";

impl SmallDisk {
    /// Fills the disk: writes [`FILLER`] until the file system refuses (ENOSPC).
    pub fn fill(&self) {
        use std::io::Write;
        let mut file = std::fs::File::create(self.path.join(FILLER)).unwrap();
        let block = [b'x'; 512];
        while file.write_all(&block).and_then(|_| file.flush()).is_ok() {}
        let _ = file.sync_all();
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.path).status();
    }
}
