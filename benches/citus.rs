//! Citus benchmark (issue 31, the Citus bullets): the same data on plain PostgreSQL and on a
//! Citus cluster, the backfill, the audit and the contract timed through the `tidemark` binary.
//!
//! ```text
//! TIDEMARK_CITUS_URL=postgres://postgres@127.0.0.1:5433/test \
//!   cargo bench --bench citus -- [--conversations N,N..] [--repeat K]
//! ```
//!
//! Data (the scenario schema of `tidemark::legacy_schema`, as `tests/integration/citus.rs`): N
//! conversations (default 1 000 and 4 000) × 30 members × 40 messages, every 17th message
//! deleted, every 23rd member gone, receipts for two members in three, counters equal to the
//! unread count with drift injected. Plain: a database `tm_bench_citus_<pid>` on the server of
//! `TIDEMARK_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`), dropped at
//! the end. Citus: the database of `TIDEMARK_CITUS_URL` (its chat and tidemark tables are
//! replaced), the chat tables distributed by `conv_id` over 32 shards and colocated with
//! `messages`, on every worker the coordinator lists (`pg_dist_node`) at the time.
//!
//! Each repetition (K, default 3) loads the data afresh and runs `expand` (not timed), then
//! times `backfill --chunk-time 0s` (fixed batches), `audit` and `contract --execute`; the
//! medians are printed as a markdown table with the ratio Citus / plain. Both databases must
//! end with the same watermarks (checked: the count and the sum of `last_read_id`).

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use sqlx::{AnyConnection, Connection, Row};
use tidemark::db::{testing, Dsn};
use tidemark::legacy_schema as scenario;
use tidemark::mapping::Shape;

/// Members per conversation and messages per conversation.
const MEMBERS: u64 = 30;
const MESSAGES: u64 = 40;

/// The timed jobs, in order: their label and arguments (after `--database URL`).
const JOBS: [(&str, &[&str]); 3] = [
    ("backfill", &["backfill", "--quiet", "--chunk-time", "0s"]),
    (
        "audit",
        &[
            "audit",
            "--quiet",
            "--report",
            "r.csv",
            "--max-drift-rows",
            "10000000",
            "--max-drift-ratio",
            "1",
            "--max-abs-drift",
            "100000",
        ],
    ),
    (
        "contract",
        &[
            "contract",
            "--quiet",
            "--execute",
            "--accept-tolerance",
            "--archive",
            "a.csv",
            "--audit-report",
            "f.csv",
        ],
    ),
];

/// Runs the binary with `args` and `--database url` in `dir`; its wall time in seconds.
fn tidemark(dir: &Path, args: &[&str], url: &str) -> Result<f64> {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_tidemark"))
        .args(args)
        .args(["--database", url])
        .current_dir(dir)
        .env_remove("DATABASE_URL")
        .output()
        .context("running tidemark")?;
    let secs = started.elapsed().as_secs_f64();
    if out.status.code() != Some(0) {
        bail!(
            "tidemark {} exited {:?}:\n{}{}",
            args.join(" "),
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(secs)
}

/// The statements that fill the scenario schema with `convs` conversations (the same on both).
fn load_sql(convs: u64) -> Vec<String> {
    [
        format!(
            "INSERT INTO messages (conv_id, id, sender_id, is_deleted, is_system, created_at, unread_count) \
             SELECT c, i, 'u' || ((c + i) % {MEMBERS} + 1), CASE WHEN i % 17 = 0 THEN 1 ELSE 0 END, 0, \
                    1600000000 + c * 100 + i, (c + i) % 5 \
             FROM generate_series(1, {convs}) c, generate_series(1, {MESSAGES}) i"
        ),
        format!(
            "INSERT INTO members (conv_id, user_id, active, join_position) \
             SELECT c, 'u' || u, CASE WHEN u % 23 = 0 THEN 0 ELSE 1 END, NULL \
             FROM generate_series(1, {convs}) c, generate_series(1, {MEMBERS}) u"
        ),
        format!(
            "INSERT INTO read_receipts (conv_id, user_id, message_id) \
             SELECT c, 'u' || u, (c + u) % {MESSAGES} + 1 \
             FROM generate_series(1, {convs}) c, generate_series(1, {MEMBERS}) u WHERE u % 3 <> 0"
        ),
        format!(
            "INSERT INTO unread_counters (conv_id, user_id, unread_count) \
             SELECT mb.conv_id, mb.user_id, \
                    (SELECT COUNT(*) FROM messages m WHERE m.conv_id = mb.conv_id AND m.is_deleted = 0 \
                       AND m.is_system = 0 AND m.sender_id <> mb.user_id \
                       AND m.id > COALESCE((SELECT MAX(r.message_id) FROM read_receipts r \
                                            WHERE r.conv_id = mb.conv_id AND r.user_id = mb.user_id), \
                                           (mb.conv_id + 7) % {MESSAGES})) \
                    + CASE WHEN (mb.conv_id * 50 + length(mb.user_id)) % 137 = 0 THEN 1 ELSE 0 END \
             FROM members mb"
        ),
        "ANALYZE".to_string(),
    ]
    .to_vec()
}

async fn exec(conn: &mut AnyConnection, sql: &str) -> Result<()> {
    sqlx::raw_sql(sql)
        .execute(&mut *conn)
        .await
        .with_context(|| format!("running {sql}"))?;
    Ok(())
}

/// Replaces the tables of `url` with the scenario's, distributed when `citus`, and loads them.
async fn load(url: &str, citus: bool, convs: u64) -> Result<()> {
    let mut conn = Dsn::parse(url)?.connect().await?;
    exec(
        &mut conn,
        "DROP TABLE IF EXISTS messages, members, unread_counters, read_receipts, read_watermarks, \
         tidemark_ledger, tidemark_counter_archive, tidemark_drift_rows, tidemark_schema_history CASCADE",
    )
    .await?;
    for sql in scenario::schema_sql() {
        exec(&mut conn, &sql).await?;
    }
    if citus {
        exec(&mut conn, "SET citus.shard_count = 32").await?;
        for (table, with) in [
            ("messages", "default"),
            ("members", "messages"),
            ("unread_counters", "messages"),
            ("read_receipts", "messages"),
        ] {
            let sql = format!(
                "SELECT create_distributed_table('{table}', 'conv_id', colocate_with => '{with}')"
            );
            exec(&mut conn, &sql).await?;
        }
    }
    for sql in load_sql(convs) {
        exec(&mut conn, &sql).await?;
    }
    let _ = conn.close().await;
    Ok(())
}

/// The count and sum of `last_read_id` of the watermark table of `url`.
async fn watermarks(url: &str) -> Result<(i64, i64)> {
    let mut conn = Dsn::parse(url)?.connect().await?;
    let row = sqlx::query(
        "SELECT CAST(COUNT(*) AS BIGINT), CAST(COALESCE(SUM(last_read_id), 0) AS BIGINT) FROM read_watermarks",
    )
    .fetch_one(&mut conn)
    .await?;
    let _ = conn.close().await;
    Ok((row.get(0), row.get(1)))
}

/// The number of active workers the coordinator of `url` lists.
async fn workers(url: &str) -> Result<i64> {
    let mut conn = Dsn::parse(url)?.connect().await?;
    let row = sqlx::query(
        "SELECT CAST(COUNT(*) AS BIGINT) FROM pg_dist_node WHERE noderole = 'primary' AND groupid <> 0 AND isactive",
    )
    .fetch_one(&mut conn)
    .await?;
    let _ = conn.close().await;
    Ok(row.get(0))
}

/// The medians of the jobs' times over `repeat` fresh loads of `url`, and the watermarks left.
async fn run(url: &str, citus: bool, convs: u64, repeat: usize) -> Result<(Vec<f64>, (i64, i64))> {
    let mut times = vec![Vec::new(); JOBS.len()];
    let mut left = (0, 0);
    for _ in 0..repeat {
        load(url, citus, convs).await?;
        let dir = tempfile::tempdir()?;
        let mapping = scenario::mapping_toml(Shape::PerMember, false).replace(
            "sender = \"sender_id\"\n",
            "sender = \"sender_id\"\ncreated_at = \"created_at\"\n",
        );
        std::fs::write(dir.path().join("tidemark.toml"), mapping)?;
        tidemark(dir.path(), &["expand", "--quiet"], url)?;
        for (i, (_, args)) in JOBS.iter().enumerate() {
            if i == 2 {
                left = watermarks(url).await?;
            }
            times[i].push(tidemark(dir.path(), args, url)?);
        }
    }
    let medians = times
        .into_iter()
        .map(|mut t| {
            t.sort_by(f64::total_cmp);
            t[t.len() / 2]
        })
        .collect();
    Ok((medians, left))
}

fn flag(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1).cloned()
}

async fn bench() -> Result<()> {
    let citus_url = std::env::var("TIDEMARK_CITUS_URL").context("set TIDEMARK_CITUS_URL")?;
    let repeat: usize = flag("--repeat").unwrap_or("3".into()).parse()?;
    let sizes: Vec<u64> = flag("--conversations")
        .unwrap_or("1000,4000".into())
        .split(',')
        .map(|s| s.parse().context("--conversations takes numbers: N,N"))
        .collect::<Result<_>>()?;
    let admin_url = testing::admin_url(tidemark::dialect::Dialect::Postgres).context("no URL")?;
    let admin = Dsn::parse(&admin_url)?;
    let mut conn = admin.connect().await?;
    let name = format!("tm_bench_citus_{}", std::process::id());
    let plain = testing::recreate_database(&mut conn, &admin, &name).await?;
    let plain_url = plain.expose().to_string();
    let result = table(&citus_url, &plain_url, &sizes, repeat).await;
    testing::drop_database(&mut conn, &admin, &name).await?;
    let _ = conn.close().await;
    result
}

/// Prints the table: for each size of `sizes`, the medians of the jobs on both.
async fn table(citus_url: &str, plain_url: &str, sizes: &[u64], repeat: usize) -> Result<()> {
    let n = workers(citus_url).await?;
    println!("| data | job | plain PostgreSQL | Citus ({n} workers, 32 shards) | Citus / plain |");
    println!("|---|---|---|---|---|");
    for &convs in sizes {
        let (p, p_left) = run(plain_url, false, convs, repeat.max(1)).await?;
        let (c, c_left) = run(citus_url, true, convs, repeat.max(1)).await?;
        if p_left != c_left {
            bail!("watermarks differ: plain {p_left:?}, Citus {c_left:?}");
        }
        for (i, (job, _)) in JOBS.iter().enumerate() {
            let data = match i {
                0 => format!(
                    "{convs} conv × {MEMBERS} members × {MESSAGES} messages ({} watermarks)",
                    p_left.0
                ),
                _ => String::new(),
            };
            println!(
                "| {data} | {job} | {:.2} s | {:.2} s | {:.1}× |",
                p[i],
                c[i],
                c[i] / p[i]
            );
        }
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    match runtime.block_on(bench()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("citus bench: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
