//! Shards benchmark (issue 31): the same data in one PostgreSQL database and split by
//! conversation over three, the backfill and the audit timed through the `tidemark` binary
//! (one `--database`, then `--database` three times: the shards run at once).
//!
//! ```text
//! cargo bench --bench shards -- [--members N] [--repeat K] [--seed S]
//! ```
//!
//! The generator's data (`tidemark::generate`, N members, default 200 000) is written to
//! `tm_bench_shards_<pid>` on the server of `TIDEMARK_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`); the three shards are copies of it
//! (`CREATE DATABASE … TEMPLATE`), each keeping the conversations whose key is k modulo 3. Every
//! database is dropped at the end. Before each backfill the watermark table is emptied; each
//! job runs K times (default 3) and the median is printed, with the ratio one database / shards.
//! The audits must find the same drifting rows in one database as in the shards together.

use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use sqlx::Connection;
use tidemark::db::{testing, Dsn};
use tidemark::generate::{generate, GenerateOptions};

/// The tables of the generator's schema and their conversation column.
const TABLES: [&str; 4] = ["messages", "members", "unread_counters", "read_receipts"];

/// Runs the binary with `args` in `dir`; its wall time in seconds and its stdout.
fn tidemark(dir: &std::path::Path, args: &[String], want: &[i32]) -> Result<(f64, String)> {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_tidemark"))
        .args(args)
        .current_dir(dir)
        .env_remove("DATABASE_URL")
        .output()
        .context("running tidemark")?;
    let secs = started.elapsed().as_secs_f64();
    let code = out.status.code().unwrap_or(-1);
    if !want.contains(&code) {
        bail!(
            "tidemark {} exited {code}:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok((secs, String::from_utf8_lossy(&out.stdout).into_owned()))
}

/// The median of `k` runs of `job`, each after `before`.
async fn median<F, B, Fut>(k: usize, mut before: B, mut job: F) -> Result<f64>
where
    F: FnMut() -> Result<f64>,
    B: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let mut secs = Vec::new();
    for _ in 0..k {
        before().await?;
        secs.push(job()?);
    }
    secs.sort_by(f64::total_cmp);
    Ok(secs[secs.len() / 2])
}

/// Empties the watermark table of every database of `urls`.
async fn truncate(urls: &[String]) -> Result<()> {
    for url in urls {
        let mut conn = Dsn::parse(url)?.connect().await?;
        sqlx::raw_sql("TRUNCATE read_watermarks")
            .execute(&mut conn)
            .await?;
        let _ = conn.close().await;
    }
    Ok(())
}

/// `--database URL` for each of `urls`, after `args`.
fn with(args: &[&str], urls: &[String]) -> Vec<String> {
    let mut v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    for url in urls {
        v.extend(["--database".to_string(), url.clone()]);
    }
    v
}

fn flag(name: &str, default: u64) -> Result<u64> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == name) {
        Some(i) => args
            .get(i + 1)
            .context(format!("{name} takes a number"))?
            .parse()
            .context(format!("{name} takes a number")),
        None => Ok(default),
    }
}

async fn bench() -> Result<()> {
    let members = flag("--members", 200_000)?;
    let repeat = flag("--repeat", 3)?.max(1) as usize;
    let seed = flag("--seed", 2024)?;
    let admin_url = testing::admin_url(tidemark::dialect::Dialect::Postgres).context("no URL")?;
    let admin = Dsn::parse(&admin_url)?;
    let mut conn = admin.connect().await?;
    let one = format!("tm_bench_shards_{}", std::process::id());
    let one_dsn = testing::recreate_database(&mut conn, &admin, &one).await?;
    let mut db = one_dsn.connect().await?;
    let opts = GenerateOptions { members, seed };
    let truth = generate(&mut db, one_dsn.dialect, &opts).await?;
    let _ = db.close().await;
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    let mapping = tidemark::legacy_schema::mapping_toml(tidemark::mapping::Shape::PerMember, false);
    std::fs::write(d.join("tidemark.toml"), mapping)?;
    let one_url = vec![one_dsn.expose().to_string()];
    tidemark(d, &with(&["expand"], &one_url), &[0])?;
    let mut shard_urls = Vec::new();
    for k in 0..3 {
        let name = format!("{one}_s{k}");
        sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {name}"))
            .execute(&mut conn)
            .await?;
        sqlx::raw_sql(&format!("CREATE DATABASE {name} TEMPLATE {one}"))
            .execute(&mut conn)
            .await?;
        let dsn = admin.with_database(&name)?;
        let mut s = dsn.connect().await?;
        for table in TABLES {
            let sql = format!("DELETE FROM {table} WHERE conv_id % 3 <> {k}");
            sqlx::raw_sql(&sql).execute(&mut s).await?;
        }
        sqlx::raw_sql("ANALYZE").execute(&mut s).await?;
        let _ = s.close().await;
        shard_urls.push(dsn.expose().to_string());
    }
    let all: Vec<String> = one_url.iter().chain(&shard_urls).cloned().collect();
    let backfill = ["backfill", "--quiet"];
    let t_one = median(
        repeat,
        || truncate(&one_url),
        || tidemark(d, &with(&backfill, &one_url), &[0]).map(|r| r.0),
    )
    .await?;
    let t_shards = median(
        repeat,
        || truncate(&shard_urls),
        || tidemark(d, &with(&backfill, &shard_urls), &[0]).map(|r| r.0),
    )
    .await?;
    let audit = ["audit", "--quiet", "--report", "r.csv", "--format", "json"];
    let nothing = || async { Ok(()) };
    let a_one = median(repeat, nothing, || {
        tidemark(d, &with(&audit, &one_url), &[0, 1]).map(|r| r.0)
    })
    .await?;
    let a_shards = median(repeat, nothing, || {
        tidemark(d, &with(&audit, &shard_urls), &[0, 1]).map(|r| r.0)
    })
    .await?;
    let (_, one_json) = tidemark(d, &with(&audit, &one_url), &[0, 1])?;
    let (_, shards_json) = tidemark(d, &with(&audit, &shard_urls), &[0, 1])?;
    let one_v: serde_json::Value = serde_json::from_str(&one_json)?;
    let shards_v: serde_json::Value = serde_json::from_str(&shards_json)?;
    let drifting = one_v["drifting_rows"].as_u64().unwrap_or(u64::MAX);
    if shards_v["totals"]["drifting_rows"].as_u64() != Some(drifting) {
        bail!(
            "the shards found {} drifting rows, one database {drifting}",
            shards_v["totals"]
        );
    }
    println!("| data | job | one database | 3 shards at once | one / shards |");
    println!("|---|---|---|---|---|");
    println!(
        "| {members} members ({} messages), PostgreSQL | backfill | {t_one:.2} s | {t_shards:.2} s | {:.2}× |",
        truth.messages,
        t_one / t_shards
    );
    println!(
        "| | audit ({drifting} drifting rows) | {a_one:.2} s | {a_shards:.2} s | {:.2}× |",
        a_one / a_shards
    );
    for name in all
        .iter()
        .filter_map(|u| Dsn::parse(u).ok()?.database_name())
    {
        testing::drop_database(&mut conn, &admin, &name).await?;
    }
    let _ = conn.close().await;
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
            eprintln!("shards bench: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
