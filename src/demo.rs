//! `tidemark demo`: the whole staged migration on a generated legacy chat database that looks
//! like production (see [`crate::generate`]), printed like a DBA's runbook, with the injected
//! faults as ground truth: the demo ends by setting the audit's classes beside the truth and
//! fails when they differ, so it is also a self-test.
//!
//! Stages: generate → expand → backfill → a dual-write period (the application's own writes:
//! new messages, reads advancing watermarks forward-only, counters kept the legacy way with its
//! faults) → audit → status → contract dry run (the gate is closed: there is drift) → on the
//! demo's own copy, the counters repaired from the report, a clean audit and `contract
//! --execute` (archive, verify, drop).

use anyhow::{bail, Context, Result};
use sqlx::{AnyConnection, Executor};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::cli::{print_audit, print_backfill, print_expand, print_status};
use crate::db::Dsn;
use crate::dialect::Dialect;
use crate::error::{input_error, EXIT_OK};
use crate::generate::{generate, GenerateOptions};
use crate::legacy_schema as scenario;
use crate::mapping::Mapping;
use crate::stages::{audit, backfill, contract, expand, status};

/// Options of the demo.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// SQLite file to create (when no database URL is given).
    pub path: PathBuf,
    /// A PostgreSQL or MariaDB database to run on instead (it must be empty, or a demo's).
    pub database: Option<String>,
    /// Members to generate (rows of the members table).
    pub scale: u64,
    /// Generator seed: the same seed gives the same database.
    pub seed: u64,
    /// No progress bars.
    pub quiet: bool,
}

/// The tables the demo creates (dropped again when the demo runs on its own database twice).
const DEMO_TABLES: &[&str] = &[
    "tidemark_drift_rows",
    "tidemark_counter_archive",
    "tidemark_lock",
    "tidemark_ledger",
    "tidemark_schema_history",
    "read_watermarks",
    "read_receipts",
    "unread_counters",
    "members",
    "messages",
    "tidemark_demo",
];

/// Faults the dual-write period injects, each into a new direct conversation of its own:
/// (class it must be found as, how many).
const DUAL_WRITE_FAULTS: &[(&str, u64)] = &[
    ("overcount", 3),
    ("cleared", 3),
    ("undercount", 3),
    ("negative", 2),
];

/// Runs the demo. Returns 0 when the audit found exactly the injected drift.
///
/// Errors: exit 2 when `--database` names a database that holds tables the demo did not create;
/// exit 3 on database failure, or when the audit and the ground truth differ.
pub async fn run(opts: &DemoOptions) -> Result<u8> {
    let started = Instant::now();
    let (dsn, dir, stem) = match &opts.database {
        Some(url) => (
            Dsn::parse(url)?,
            PathBuf::from("."),
            "tidemark-demo".to_string(),
        ),
        None => {
            let dir = opts
                .path
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
                .to_path_buf();
            let stem = opts
                .path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("tidemark-demo")
                .to_string();
            for suffix in ["", "-wal", "-shm", "-journal"] {
                let p = PathBuf::from(format!("{}{suffix}", opts.path.display()));
                if p.exists() {
                    std::fs::remove_file(&p).with_context(|| {
                        format!("removing the old demo database {}", p.display())
                    })?;
                }
            }
            (Dsn::sqlite_file(&opts.path, true), dir, stem)
        }
    };
    let mapping_path = dir.join(format!("{stem}.toml"));
    let report_path = dir.join(format!("{stem}-report.csv"));
    let mut conn = dsn.connect().await?;
    if dsn.dialect != Dialect::Sqlite {
        reset_server_database(&mut conn, dsn.dialect).await?;
    }

    step("0. the legacy database");
    let truth = generate(
        &mut conn,
        dsn.dialect,
        &GenerateOptions {
            members: opts.scale,
            seed: opts.seed,
        },
    )
    .await?;
    conn.execute("CREATE TABLE tidemark_demo (created_ms BIGINT NOT NULL)")
        .await?;
    conn.execute(
        format!(
            "INSERT INTO tidemark_demo (created_ms) VALUES ({})",
            crate::stages::now_ms()
        )
        .as_str(),
    )
    .await?;
    println!(
        "{dsn}: a chat schema that keeps unread_counters.unread_count up to date by events, with read receipts.\n\
         Generated (seed {}): {} conversations (mostly direct messages, small groups, a few large ones),\n\
         {} members, {} messages (some deleted or system), {} read receipts, {} counters.",
        opts.seed, truth.conversations, truth.members, truth.messages, truth.receipt_rows, truth.counter_rows
    );
    println!(
        "Faults injected into the counters, as the seed articles describe them (the ground truth):"
    );
    for (class, n) in truth.injected.iter().filter(|(_, n)| **n > 0) {
        println!("  {class:<22} {n:>6}");
    }
    let mapping_text = scenario::mapping_toml(scenario::SHAPE_PER_MEMBER, false);
    std::fs::write(&mapping_path, &mapping_text)
        .with_context(|| format!("writing {}", mapping_path.display()))?;
    let mapping = Mapping::parse(&mapping_text, &mapping_path.display().to_string())?;
    println!(
        "The mapping file that says which tables and columns mean what: {}",
        mapping_path.display()
    );

    step("1. expand: versioned migrations create the watermark table and tidemark's ledger");
    let report = expand::run(&mut conn, &mapping, dsn.dialect, false).await?;
    print_expand(&report, &dsn);

    step(
        "2. backfill: each last_read_id from the best evidence (receipts first, then the counter)",
    );
    let options = backfill::BackfillOptions {
        quiet: opts.quiet,
        ..Default::default()
    };
    let summary = backfill::run(&mut conn, &mapping, dsn.dialect, &options).await?;
    print_backfill(&summary, false);

    step("3. dual-write period: the application writes counters and watermarks both");
    let mut expected = truth.injected.clone();
    let dual = dual_write(&mut conn, dsn.dialect).await?;
    for (class, n) in &dual.faults {
        *expected.entry(class.clone()).or_default() += n;
    }
    println!(
        "The application sent {} messages in {} new conversations, advanced {} watermarks forward-only,\n\
         and kept the legacy counters with their faults: {}.",
        dual.messages,
        dual.conversations,
        dual.reads,
        dual.faults.iter().map(|(c, n)| format!("{n} {c}")).collect::<Vec<_>>().join(", ")
    );

    step("4. audit: recompute unread from the watermarks, compare, classify, write the report");
    let audit_opts = audit::AuditOptions {
        report: report_path.clone(),
        quiet: opts.quiet,
        ..Default::default()
    };
    let outcome = audit::run(&mut conn, &mapping, dsn.dialect, &audit_opts).await?;
    print_audit(&outcome.summary);

    step("5. status");
    let st = status::run(&mut conn, &mapping, dsn.dialect).await?;
    print_status(&st, &dsn, &mapping);

    step("6. contract, dry run: the gate stays closed while the counters drift");
    let dry = contract::ContractOptions {
        quiet: true,
        ..Default::default()
    };
    let o = contract::run(&mut conn, &mapping, dsn.dialect, &dry).await?;
    crate::cli::contract::print(&o, &dsn, &dry);

    // The verdict on the demo itself, before anything else touches the database.
    let found: BTreeMap<String, u64> = outcome.summary.by_class.clone();

    step("7. on the demo's own copy: repair the counters from the report, audit again, contract --execute");
    let (mut copy, copy_dsn) = own_copy(&mut conn, &dsn, &dir, &stem).await?;
    let repaired = repair_from_report(&mut copy, &report_path).await?;
    println!("repaired {repaired} counters to their recomputed value (what a DBA does once the drift is understood)");
    let clean = audit::run(
        &mut copy,
        &mapping,
        copy_dsn.dialect,
        &audit::AuditOptions {
            report: dir.join(format!("{stem}-copy-report.csv")),
            quiet: opts.quiet,
            ..Default::default()
        },
    )
    .await?;
    print_audit(&clean.summary);
    let archive = dir.join(format!("{stem}-archive.csv"));
    let execute = contract::ContractOptions {
        execute: true,
        archive_csv: Some(archive.clone()),
        audit_report: Some(dir.join(format!("{stem}-final-audit.csv"))),
        quiet: true,
        ..Default::default()
    };
    let done = contract::run(&mut copy, &mapping, copy_dsn.dialect, &execute).await?;
    crate::cli::contract::print(&done, &copy_dsn, &execute);

    step("what the audit found, beside the injected truth");
    println!("  {:<22} {:>9} {:>9}", "class", "injected", "found");
    let mut differ = false;
    for class in crate::drift::DriftClass::ALL {
        let e = expected.get(class.as_str()).copied().unwrap_or(0);
        let f = found.get(class.as_str()).copied().unwrap_or(0);
        let mark = if e == f { "" } else { "  <- differs" };
        differ |= e != f;
        println!("  {:<22} {e:>9} {f:>9}{mark}", class.as_str());
    }
    if differ {
        bail!("the audit's classes differ from the injected truth (see above)");
    }
    if !clean.summary.passed || !done.executed {
        bail!("the repaired copy did not pass its audit or the contract did not run");
    }
    println!(
        "\nEvery injected fault was found with its class, and nothing else drifts ({:.1} s).\n\
         Read the report: {}\nTry: tidemark audit --database {} --mapping {}",
        started.elapsed().as_secs_f64(),
        report_path.display(),
        dsn,
        mapping_path.display()
    );
    println!("(The audit exits 1 on drift; the demo exits 0 because it found exactly the drift it injected.)");
    if dsn.dialect != Dialect::Sqlite {
        println!("(On this server the contract dropped the counter of the demo database: run the demo again to start over.)");
    }
    Ok(EXIT_OK)
}

fn step(title: &str) {
    println!("\n== {title} ==");
}

/// On a server, the demo only runs on an empty database or one a demo made (it has the
/// `tidemark_demo` table); a demo's tables are dropped so the run starts fresh.
async fn reset_server_database(conn: &mut AnyConnection, dialect: Dialect) -> Result<()> {
    let is_demo = crate::schema::table_exists(conn, dialect, "tidemark_demo").await?;
    for table in DEMO_TABLES {
        if crate::schema::table_exists(conn, dialect, table).await? {
            if !is_demo {
                return Err(input_error(format!(
                    "the database already has a table {table:?} and was not made by `tidemark demo`: give the demo an empty database"
                )));
            }
            conn.execute(format!("DROP TABLE {}", dialect.quote(table)).as_str())
                .await?;
        }
    }
    Ok(())
}

/// What the dual-write period did.
struct DualWrite {
    conversations: u64,
    messages: u64,
    reads: u64,
    faults: BTreeMap<String, u64>,
}

/// The application during the dual-write period, on new direct conversations (ids above every
/// generated one) between a sender and a reader: each message and its counter increment in one
/// transaction, a read moving the watermark forward-only and clearing the counter. Each
/// conversation carries at most one fault, so its class is known:
/// - overcount: one message delivered twice (the counter incremented twice);
/// - cleared: "mark all read" cleared the counter after a new message had arrived;
/// - undercount: a lost update (read-modify-write) dropped one increment;
/// - negative: an unguarded decrement below zero after the reader had read everything.
///
/// The rest of the conversations are written correctly.
async fn dual_write(conn: &mut AnyConnection, dialect: Dialect) -> Result<DualWrite> {
    let base: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(conv_id), 0) FROM members")
        .fetch_one(&mut *conn)
        .await?;
    let upsert = match dialect {
        Dialect::Postgres => "INSERT INTO read_watermarks (user_id, conversation_id, last_read_id) VALUES ($1, $2, $3) \
             ON CONFLICT (user_id, conversation_id) DO UPDATE SET last_read_id = GREATEST(read_watermarks.last_read_id, EXCLUDED.last_read_id)",
        Dialect::Mysql => "INSERT INTO read_watermarks (user_id, conversation_id, last_read_id) VALUES (?, ?, ?) \
             ON DUPLICATE KEY UPDATE last_read_id = GREATEST(last_read_id, VALUES(last_read_id))",
        Dialect::Sqlite => "INSERT INTO read_watermarks (user_id, conversation_id, last_read_id) VALUES (?, ?, ?) \
             ON CONFLICT (user_id, conversation_id) DO UPDATE SET last_read_id = MAX(last_read_id, excluded.last_read_id)",
    };
    let mut plan: Vec<Option<&str>> = Vec::new();
    for (class, n) in DUAL_WRITE_FAULTS {
        plan.extend(std::iter::repeat_n(Some(*class), *n as usize));
    }
    plan.extend(std::iter::repeat_n(None, 20));
    let mut out = DualWrite {
        conversations: 0,
        messages: 0,
        reads: 0,
        faults: BTreeMap::new(),
    };
    for (i, fault) in plan.iter().enumerate() {
        let conv = base + 1 + i as i64;
        let (sender, reader) = (format!("dw{i}a"), format!("dw{i}b"));
        for sql in [
            format!("INSERT INTO members (conv_id, user_id, active) VALUES ({conv}, '{sender}', 1), ({conv}, '{reader}', 1)"),
            format!("INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES ({conv}, '{sender}', 0), ({conv}, '{reader}', 0)"),
        ] {
            conn.execute(sql.as_str()).await?;
        }
        out.conversations += 1;
        let mut next = 0i64;
        let mut send = async |conn: &mut AnyConnection, increments: i64| -> Result<i64> {
            next += 1;
            let id = next;
            exec_tx(conn, dialect, &[
                format!("INSERT INTO messages (conv_id, id, sender_id) VALUES ({conv}, {id}, '{sender}')"),
                format!("UPDATE unread_counters SET unread_count = unread_count + {increments} WHERE conv_id = {conv} AND user_id = '{reader}'"),
            ])
            .await?;
            Ok(id)
        };
        // Three messages, the reader reads them, two more arrive.
        for _ in 0..3 {
            send(conn, 1).await?;
        }
        let read_upto = 3;
        read(conn, dialect, upsert, conv, &reader, read_upto).await?;
        out.reads += 1;
        match fault {
            Some("overcount") => {
                send(conn, 2).await?; // delivered twice
                send(conn, 1).await?;
            }
            Some("cleared") => {
                send(conn, 1).await?;
                send(conn, 1).await?;
                // A "mark all read" from a stale screen: the counter is cleared, the watermark
                // stays where that screen was.
                conn.execute(format!("UPDATE unread_counters SET unread_count = 0 WHERE conv_id = {conv} AND user_id = '{reader}'").as_str())
                    .await?;
            }
            Some("undercount") => {
                send(conn, 1).await?;
                send(conn, 1).await?;
                send(conn, 0).await?; // the lost update
            }
            Some("negative") => {
                // A "message deleted" decrement after the reader had read everything.
                conn.execute(format!("UPDATE unread_counters SET unread_count = unread_count - 1 WHERE conv_id = {conv} AND user_id = '{reader}'").as_str())
                    .await?;
            }
            _ => {
                send(conn, 1).await?;
                send(conn, 1).await?;
            }
        }
        out.messages += next as u64;
        if let Some(class) = fault {
            *out.faults.entry(class.to_string()).or_default() += 1;
        }
    }
    Ok(out)
}

/// A read: the watermark moves forward-only and the counter is cleared, in one transaction.
async fn read(
    conn: &mut AnyConnection,
    dialect: Dialect,
    upsert: &str,
    conv: i64,
    user: &str,
    upto: i64,
) -> Result<()> {
    begin(conn, dialect).await?;
    sqlx::query(upsert)
        .bind(user.to_string())
        .bind(conv)
        .bind(upto)
        .execute(&mut *conn)
        .await?;
    conn.execute(format!("UPDATE unread_counters SET unread_count = 0 WHERE conv_id = {conv} AND user_id = '{user}'").as_str())
        .await?;
    conn.execute("COMMIT").await?;
    Ok(())
}

async fn begin(conn: &mut AnyConnection, dialect: Dialect) -> Result<()> {
    conn.execute(if dialect == Dialect::Sqlite {
        "BEGIN IMMEDIATE"
    } else {
        "BEGIN"
    })
    .await?;
    Ok(())
}

async fn exec_tx(conn: &mut AnyConnection, dialect: Dialect, statements: &[String]) -> Result<()> {
    begin(conn, dialect).await?;
    for s in statements {
        conn.execute(s.as_str()).await?;
    }
    conn.execute("COMMIT").await?;
    Ok(())
}

/// The demo's own copy for the destructive part: a SQLite file copy (`VACUUM INTO`); on a
/// server, the demo database itself (it belongs to the demo).
async fn own_copy(
    conn: &mut AnyConnection,
    dsn: &Dsn,
    dir: &Path,
    stem: &str,
) -> Result<(AnyConnection, Dsn)> {
    if dsn.dialect != Dialect::Sqlite {
        println!("(on a server the demo's database is its own: the contract runs on it)");
        return Ok((dsn.connect().await?, dsn.clone()));
    }
    let copy = dir.join(format!("{stem}-copy.db"));
    let _ = std::fs::remove_file(&copy);
    conn.execute(
        format!(
            "VACUUM INTO '{}'",
            copy.display().to_string().replace('\'', "''")
        )
        .as_str(),
    )
    .await?;
    println!("copied the demo database to {}", copy.display());
    let copy_dsn = Dsn::sqlite_file(&copy, false);
    Ok((copy_dsn.connect().await?, copy_dsn))
}

/// Sets every drifting counter of the report to its recomputed value; returns how many.
async fn repair_from_report(conn: &mut AnyConnection, report: &Path) -> Result<u64> {
    let mut reader = csv::Reader::from_path(report)?;
    let mut n = 0;
    for rec in reader.records() {
        let rec = rec?;
        let (conv, user, recomputed) = (&rec[0], &rec[1], &rec[3]);
        let conv: i64 = conv.parse()?;
        let recomputed: i64 = recomputed.parse()?;
        conn.execute(
            format!(
                "UPDATE unread_counters SET unread_count = {recomputed} WHERE conv_id = {conv} AND user_id = '{}'",
                user.replace('\'', "''")
            )
            .as_str(),
        )
        .await?;
        n += 1;
    }
    Ok(n)
}
