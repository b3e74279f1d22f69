//! `tidemark demo`: a small legacy chat database in which every per-member fault of the seed
//! articles occurs (the scenarios of `scenarios.json`, each in conversations of its own), its
//! mapping file, and the whole pipeline on it, printed like a DBA's runbook. The demo checks
//! its own audit against the scenarios' expected rows and exits 3 when they differ, so it is
//! also a self-test.

use anyhow::{Context, Result};
use std::collections::BTreeSet;
use std::path::Path;

use crate::cli::{print_audit, print_backfill, print_expand, print_status};
use crate::db::Dsn;
use crate::error::EXIT_OK;
use crate::mapping::Mapping;
use crate::scenario::{self, Scenario};
use crate::stages::{audit, backfill, expand, status};

/// Conversation ids of scenario i are shifted by (i + 1) * CONV_STRIDE.
const CONV_STRIDE: i64 = 100;

/// The scenarios the demo loads: per_member ones without a cap (the capped one shares its data
/// with its uncapped twin).
fn demo_scenarios() -> Result<Vec<Scenario>> {
    Ok(scenario::load_all()?
        .into_iter()
        .filter(|s| !s.is_per_message() && s.options.cap.is_none())
        .collect())
}

/// Builds the demo database at `db_path` (replacing an earlier one), writes its mapping file
/// and report beside it, and runs expand, backfill, audit and status.
///
/// Returns exit code 0 when the audit found exactly the injected drift.
/// Errors (exit 3): the folder is not writable, or the audit disagrees with the scenarios.
pub async fn run(db_path: &Path) -> Result<u8> {
    let dir = db_path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let stem = db_path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("tidemark-demo");
    let mapping_path = dir.join(format!("{stem}.toml"));
    let report_path = dir.join(format!("{stem}-report.csv"));
    for suffix in ["", "-wal", "-shm"] {
        let p = dir.join(format!(
            "{}{suffix}",
            db_path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("tidemark-demo.db")
        ));
        if p.exists() {
            std::fs::remove_file(&p)
                .with_context(|| format!("removing the old demo database {}", p.display()))?;
        }
    }
    let scenarios = demo_scenarios()?;
    let dsn = Dsn::sqlite_file(db_path, true);
    let mut conn = dsn.connect().await?;

    println!("== 0. the legacy database ==");
    println!(
        "{} holds a chat schema with unread counters (unread_counters.unread_count),",
        db_path.display()
    );
    println!("read receipts, and one group of conversations per fault of the seed articles:");
    for stmt in scenario::schema_sql() {
        sqlx::raw_sql(&stmt).execute(&mut conn).await?;
    }
    for (i, s) in scenarios.iter().enumerate() {
        let offset = (i as i64 + 1) * CONV_STRIDE;
        for stmt in scenario::data_sql(s, offset) {
            sqlx::raw_sql(&stmt).execute(&mut conn).await?;
        }
        let convs: BTreeSet<i64> = s.members.iter().map(|m| m.conv + offset).collect();
        println!("  conversations {:?}: {} (seed {})", convs, s.id, s.seed);
    }
    let mapping_text = scenario::mapping_toml(scenario::SHAPE_PER_MEMBER, false);
    std::fs::write(&mapping_path, &mapping_text)
        .with_context(|| format!("writing {}", mapping_path.display()))?;
    let mapping = Mapping::parse(&mapping_text, &mapping_path.display().to_string())?;
    println!(
        "mapping written to {} (what the tables and columns mean)",
        mapping_path.display()
    );

    println!("\n== 1. expand: create the watermark table and the ledger ==");
    let report = expand::run(&mut conn, &mapping, dsn.dialect, false).await?;
    print_expand(&report, &dsn);
    // The application already writes watermarks for some members (scenario S3b).
    for (i, s) in scenarios.iter().enumerate() {
        for stmt in scenario::existing_watermarks_sql(
            s,
            (i as i64 + 1) * CONV_STRIDE,
            scenario::WATERMARK_TABLE,
        ) {
            sqlx::raw_sql(&stmt).execute(&mut conn).await?;
        }
    }

    println!("\n== 2. backfill: each last_read_id from the best evidence (receipts, then the counter) ==");
    let summary = backfill::run(
        &mut conn,
        &mapping,
        dsn.dialect,
        &backfill::BackfillOptions::default(),
    )
    .await?;
    print_backfill(&summary, false);

    println!("\n== 3. audit: recompute unread from the watermarks and classify the drift ==");
    let opts = audit::AuditOptions {
        report: report_path.clone(),
        ..Default::default()
    };
    let outcome = audit::run(&mut conn, &mapping, dsn.dialect, &opts).await?;
    print_audit(&outcome.summary);

    println!("\n== 4. status ==");
    let st = status::run(&mut conn, &mapping, dsn.dialect).await?;
    print_status(&st, &dsn, &mapping);

    // Self-test: the report must hold exactly the scenarios' expected rows.
    let expected: BTreeSet<(i64, String, String)> = scenarios
        .iter()
        .enumerate()
        .flat_map(|(i, s)| {
            let offset = (i as i64 + 1) * CONV_STRIDE;
            s.expected.audit.iter().map(move |r| {
                (
                    r.conv + offset,
                    r.user.clone().unwrap_or_default(),
                    r.class.clone(),
                )
            })
        })
        .collect();
    let mut found = BTreeSet::new();
    let mut reader = csv::Reader::from_path(&report_path)?;
    for rec in reader.records() {
        let rec = rec?;
        found.insert((
            rec[0].parse::<i64>()?,
            rec[1].to_string(),
            rec[5].to_string(),
        ));
    }
    println!("\n== what the audit found, beside the injected faults ==");
    for (conv, user, class) in &expected {
        let mark = if found.contains(&(*conv, user.clone(), class.clone())) {
            "found"
        } else {
            "MISSED"
        };
        println!("  {mark:<6} conversation {conv:>5} user {user:<6} {class}");
    }
    for extra in found.difference(&expected) {
        println!(
            "  EXTRA  conversation {:>5} user {:<6} {}",
            extra.0, extra.1, extra.2
        );
    }
    if found != expected {
        anyhow::bail!(
            "the audit's report differs from the injected drift (see MISSED / EXTRA above)"
        );
    }
    println!(
        "\nEvery injected fault was found and classified, and nothing else drifts.\nNext: read {} and try `tidemark audit --database sqlite:{} --mapping {}`.",
        report_path.display(),
        db_path.display(),
        mapping_path.display()
    );
    println!("(The audit exits 1 on drift; this demo exits 0 because it found exactly the drift it injected.)");
    Ok(EXIT_OK)
}
