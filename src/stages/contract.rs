//! Stage 4, contract: the gated drop of the legacy counter column (semantics.md, "The gate
//! before the drop").
//!
//! Without `--execute` it prints the gate's verdict (every reason) and the exact statements it
//! would run, and changes nothing. With `--execute`, when the gate is open (or `--force
//! --reason TEXT` bypasses it, recorded in the ledger):
//!
//! 1. a final audit runs, with the tolerance of the newest clean audit, and must pass: the gate
//!    never opens on old evidence alone;
//! 2. the values are archived into `tidemark_counter_archive` (keys, value, the audit that
//!    covered them, the contract run), batch by batch, and, with `--archive FILE`, into a CSV;
//! 3. the archive is verified: no counter row is missing from it with its keys and value, and
//!    the row count and checksum (non-NULL values, sum, sum of squares) equal the source's, the
//!    CSV's too;
//! 4. the DDL runs under a bounded lock wait (PostgreSQL `lock_timeout`, MySQL/MariaDB
//!    `lock_wait_timeout`, SQLite `busy_timeout`), retried a few times on a lock wait; inside the
//!    lock, before the DDL, the checksum is taken again, so a value written since the archive
//!    stops the drop instead of being lost;
//! 5. the ledger records the run with the evidence: audits relied on, the final audit, the
//!    statement-statistics finding, the archive's row count and checksum, the DDL, any forced
//!    reason.
//!
//! A failure anywhere before the DDL commits leaves the column (and the archive rows of that
//! run) in place; a second run after a successful one finds nothing left to drop.

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use sqlx::{AnyConnection, Row};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::{begin_write, commit, next_batch, now_ms, rollback, text, BatchUnit, Key};
use crate::db::Dsn;
use crate::dialect::{render, Dialect, SqlContext};
use crate::error::{input_error, EXIT_DRIFT, EXIT_OK};
use crate::gate::{self, AuditRecord, GateOptions, Reason, StatementSeen, StatementUse, Tolerance};
use crate::ledger::{self, LEDGER_TABLE};
use crate::lock::{self, RunnerLock};
use crate::mapping::{hex, Mapping, Shape};
use crate::schema::{self, KeyKind};
use crate::stages::audit;

/// The archive table (migration `V3__counter_archive`).
pub const ARCHIVE_TABLE: &str = "tidemark_counter_archive";

/// The final audit's report when neither `--audit-report` nor `--archive` names a folder.
pub const DEFAULT_AUDIT_REPORT: &str = "tidemark-contract-audit.csv";

/// `tidemark contract` options.
#[derive(Debug, Clone, clap::Args)]
pub struct ContractArgs {
    /// `--database` and `--mapping`.
    #[command(flatten)]
    pub common: crate::cli::Common,
    /// Archive the values and drop the counter. Without it: print the gate's verdict and the
    /// exact DDL, and change nothing.
    #[arg(long)]
    pub execute: bool,
    /// Consecutive passing audits of this mapping the gate needs.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub min_clean_audits: u32,
    /// How old the newest of those audits may be.
    #[arg(long, default_value = "24h", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub max_audit_age: Duration,
    /// Count passing audits that ran with a tolerance above zero (or a --cap).
    #[arg(long)]
    pub accept_tolerance: bool,
    /// Open the gate only when the server's statement statistics (pg_stat_statements,
    /// performance_schema digests) show no statement still using the counter column.
    #[arg(long)]
    pub require_unused: bool,
    /// Also write the archived values to this CSV file (verified before any DDL runs).
    #[arg(long, value_name = "FILE")]
    pub archive: Option<PathBuf>,
    /// Where the final audit writes its drift report (default: tidemark-contract-audit.csv,
    /// next to --archive when given).
    #[arg(long, value_name = "FILE")]
    pub audit_report: Option<PathBuf>,
    /// Drop a counter table that holds nothing but the keys and the counter, instead of the
    /// column.
    #[arg(long)]
    pub drop_table: bool,
    /// Bypass a closed gate (needs --reason; recorded in the ledger).
    #[arg(long)]
    pub force: bool,
    /// Why the gate is bypassed (with --force).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// Longest wait for the table lock of the DDL, per attempt.
    #[arg(long, default_value = "5s", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub lock_timeout: Duration,
    /// Further attempts after a lock wait gave up, with a growing pause between them.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub lock_retries: usize,
    /// Counter rows (or messages) archived per transaction, whole conversations.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch_size: u64,
    /// No progress output.
    #[arg(long, short)]
    pub quiet: bool,
}

/// A fault-injection point for tests: awaited after the archive is verified and before the
/// DDL's lock is taken.
pub type Hook = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<()>> + Send>> + Send + Sync>;

/// Options of a contract run.
#[derive(Clone)]
pub struct ContractOptions {
    /// Archive and drop (false: verdict and DDL only, nothing changes).
    pub execute: bool,
    /// The gate's conditions.
    pub gate: GateOptions,
    /// `--archive FILE`: a CSV copy of the archived values.
    pub archive_csv: Option<PathBuf>,
    /// Where the final audit writes its report (None: [`DEFAULT_AUDIT_REPORT`], next to the
    /// archive CSV when there is one).
    pub audit_report: Option<PathBuf>,
    /// `--drop-table`.
    pub drop_table: bool,
    /// `--force`.
    pub force: bool,
    /// `--reason`.
    pub reason: Option<String>,
    /// Longest lock wait of the DDL, per attempt.
    pub lock_timeout: Duration,
    /// Further attempts after a lock wait.
    pub lock_retries: usize,
    /// Rows per archive transaction.
    pub batch_size: u64,
    /// No progress output (the final audit's).
    pub quiet: bool,
    /// Tests only: awaited between the verified archive and the DDL.
    pub before_ddl: Option<Hook>,
}

impl Default for ContractOptions {
    fn default() -> Self {
        ContractOptions {
            execute: false,
            gate: GateOptions::default(),
            archive_csv: None,
            audit_report: None,
            drop_table: false,
            force: false,
            reason: None,
            lock_timeout: Duration::from_secs(5),
            lock_retries: 3,
            batch_size: 5000,
            quiet: true,
            before_ddl: None,
        }
    }
}

impl std::fmt::Debug for ContractOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContractOptions")
            .field("execute", &self.execute)
            .field("gate", &self.gate)
            .field("archive_csv", &self.archive_csv)
            .field("drop_table", &self.drop_table)
            .field("force", &self.force)
            .field("reason", &self.reason)
            .field("lock_timeout", &self.lock_timeout)
            .finish_non_exhaustive()
    }
}

impl ContractArgs {
    /// The library options for these arguments.
    pub fn options(&self) -> ContractOptions {
        ContractOptions {
            execute: self.execute,
            gate: GateOptions {
                min_clean_audits: self.min_clean_audits,
                max_audit_age: self.max_audit_age,
                accept_tolerance: self.accept_tolerance,
                require_unused: self.require_unused,
            },
            archive_csv: self.archive.clone(),
            audit_report: self.audit_report.clone(),
            drop_table: self.drop_table,
            force: self.force,
            reason: self.reason.clone(),
            lock_timeout: self.lock_timeout,
            lock_retries: self.lock_retries,
            batch_size: self.batch_size,
            quiet: self.quiet,
            before_ddl: None,
        }
    }
}

/// What the contract drops.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    /// The counter's shape.
    pub shape: Shape,
    /// The table holding the counter (as the mapping names it).
    pub table: String,
    /// The counter column.
    pub column: String,
    /// The conversation key column of that table.
    pub conversation: String,
    /// The other key column: the user (per_member) or the message id (per_message).
    pub subject: String,
    /// Whether the table holds nothing but the keys and the counter.
    pub table_of_its_own: bool,
    /// Whether the whole table is dropped (`--drop-table`).
    pub drop_table: bool,
}

impl Target {
    /// `table.column`, or `table` when the table is dropped.
    pub fn describe(&self) -> String {
        if self.drop_table {
            format!("table {}", self.table)
        } else {
            format!("column {}.{}", self.table, self.column)
        }
    }
}

/// One step of the drop, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// A statement, run as is.
    Sql(String),
    /// Inside the lock: the counter's checksum taken again must equal the archive's.
    Verify,
    /// SQLite rebuild: `PRAGMA foreign_key_check`, which must return no row.
    ForeignKeyCheck(String),
    /// MySQL/MariaDB: `ALGORITHM=INSTANT`, and the default algorithm if the server refuses
    /// INSTANT for this table.
    InstantOrDefault {
        /// The statement with `ALGORITHM=INSTANT`.
        instant: String,
        /// The same without it.
        default: String,
    },
}

impl Step {
    /// The step as printed (statements end with `;`, tidemark's own checks are comments).
    pub fn lines(&self, target: &Target) -> Vec<String> {
        match self {
            Step::Sql(s) => vec![format!("{s};")],
            Step::Verify => vec![format!(
                "-- tidemark: {}.{} must still equal the archive (rows, non-NULL values, sum, sum of squares), else stop",
                target.table, target.column
            )],
            Step::ForeignKeyCheck(s) => vec![format!("{s}; -- must return no row")],
            Step::InstantOrDefault { instant, default } => vec![
                format!("{instant};"),
                format!("-- if the server refuses INSTANT for this table: {default};"),
            ],
        }
    }
}

/// The statements that drop the counter, for one dialect.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// What undoes a failed attempt (ROLLBACK, UNLOCK TABLES, pragmas back on).
    pub on_failure: Vec<String>,
    /// Remarks for the person reading the plan.
    pub notes: Vec<String>,
}

impl Plan {
    /// Every line as printed.
    pub fn lines(&self, target: &Target) -> Vec<String> {
        self.steps.iter().flat_map(|s| s.lines(target)).collect()
    }
}

/// A checksum of counter values: rows, non-NULL values, their sum and sum of squares (exact
/// decimals as text).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Checksum {
    /// Rows.
    pub rows: i64,
    /// Non-NULL values.
    pub non_null: i64,
    /// Sum of the values.
    pub sum: String,
    /// Sum of their squares.
    pub sum_squares: String,
}

/// The archive a run made.
#[derive(Debug, Clone, Serialize)]
pub struct ArchiveSummary {
    /// The archive table.
    pub table: String,
    /// The contract run (ledger id) whose rows they are.
    pub contract_id: i64,
    /// The audit that covered the values (the final audit).
    pub audit_id: Option<i64>,
    /// The checksum of the archived values, equal to the source's.
    pub checksum: Checksum,
    /// The CSV copy, if any.
    pub csv: Option<String>,
    /// Its SHA-256.
    pub csv_sha256: Option<String>,
}

/// The final audit run inside the gate.
#[derive(Debug, Clone, Serialize)]
pub struct FinalAudit {
    /// Its ledger id.
    pub id: Option<i64>,
    /// Whether it passed.
    pub passed: bool,
    /// The limits it crossed.
    pub crossed: Vec<String>,
    /// The tolerance it ran with.
    pub tolerance: Tolerance,
    /// Rows checked.
    pub rows_checked: u64,
    /// Drifting rows.
    pub drifting_rows: u64,
    /// Its report.
    pub report: String,
    /// The report's SHA-256.
    pub report_sha256: String,
}

/// What a contract run found and did.
#[derive(Debug, Clone, Serialize)]
pub struct ContractOutcome {
    /// What is (or would be) dropped.
    pub target: Target,
    /// Set when there is nothing left to drop (the message says why); nothing else is.
    pub nothing_to_drop: Option<String>,
    /// The gate's verdict (None when there is nothing left to drop).
    pub verdict: Option<gate::Verdict>,
    /// The exact statements, as printed.
    pub ddl: Vec<String>,
    /// Remarks: what the DDL also removes, tolerance used, …
    pub notes: Vec<String>,
    /// Whether the drop ran and committed.
    pub executed: bool,
    /// The final audit (with `--execute`).
    pub final_audit: Option<FinalAudit>,
    /// The archive (with `--execute`).
    pub archive: Option<ArchiveSummary>,
    /// `--force --reason`: the reason, when the gate was closed and bypassed.
    pub forced: Option<String>,
    /// The contract run's ledger id (with `--execute`).
    pub ledger_id: Option<i64>,
    /// 0: open (and done with `--execute`) or nothing to drop; 1: closed.
    pub exit_code: u8,
}

/// The key columns of the counter rows: (conversation, subject, archive column for the
/// subject), quoted.
struct Keys {
    conv: String,
    subject: String,
    subject_col: &'static str,
    unit: BatchUnit,
    conv_kind: KeyKind,
    subject_kind: KeyKind,
}

/// Runs the contract stage.
///
/// Errors: exit 2 for bad input (`--force` without `--reason`, `--drop-table` on a table that
/// holds more than the counter, a mapping that does not match, migrations not applied, a
/// SQLite trigger or view that still uses the column); exit 3 for database and I/O failures
/// (a lock that was not granted after the retries, an archive that does not verify). Neither
/// leaves the column dropped.
pub async fn run(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
    opts: &ContractOptions,
) -> Result<ContractOutcome> {
    check_options(opts)?;
    let ctx = SqlContext::new(mapping, dialect);
    if !schema::table_exists(conn, dialect, LEDGER_TABLE).await? {
        return Err(input_error(
            "the ledger table tidemark_ledger does not exist: run `tidemark expand`, `backfill` and `audit` first",
        ));
    }
    let mut target = target_of(mapping, opts);
    if schema::is_view(conn, dialect, &target.table).await? {
        return Err(input_error(format!(
            "the counter lives in {:?}, which is a view: contract drops a column of a table; map the table that holds the counter (the view's base table) to contract it",
            target.table
        )));
    }

    // Already dropped?
    let columns = table_columns(conn, &ctx, &target.table).await?;
    let has_column = columns
        .iter()
        .any(|c| c.eq_ignore_ascii_case(&target.column));
    if !has_column {
        return match last_contract(conn, dialect, &target).await? {
            Some(id) => Ok(ContractOutcome {
                nothing_to_drop: Some(format!(
                    "nothing left to drop: {}.{} is gone (dropped by contract run #{id})",
                    target.table, target.column
                )),
                target,
                verdict: None,
                ddl: Vec::new(),
                notes: Vec::new(),
                executed: false,
                final_audit: None,
                archive: None,
                forced: None,
                ledger_id: None,
                exit_code: EXIT_OK,
            }),
            None if columns.is_empty() => Err(input_error(format!(
                "counter table {:?} does not exist, and the ledger records no contract that dropped it",
                target.table
            ))),
            None => Err(input_error(format!(
                "counter.column {:?} not found in table {:?}, and the ledger records no contract that dropped it",
                target.column, target.table
            ))),
        };
    }
    schema::preflight(conn, mapping, dialect).await?;
    if !schema::table_exists(conn, dialect, ARCHIVE_TABLE).await? {
        return Err(input_error(format!(
            "the archive table {ARCHIVE_TABLE} does not exist: run `tidemark expand` (migration V3__counter_archive)"
        )));
    }

    // The table of its own, and --drop-table.
    let keys_and_counter = [&target.conversation, &target.subject, &target.column];
    let others: Vec<String> = columns
        .iter()
        .filter(|c| !keys_and_counter.iter().any(|k| k.eq_ignore_ascii_case(c)))
        .cloned()
        .collect();
    let members_table = mapping.members.as_ref().map(|m| m.table.as_str());
    target.table_of_its_own = mapping.counter.shape == Shape::PerMember
        && others.is_empty()
        && members_table != Some(target.table.as_str());
    let mut notes = Vec::new();
    if opts.drop_table {
        if mapping.counter.shape == Shape::PerMessage {
            return Err(input_error(format!(
                "--drop-table: a per_message counter lives on the messages table {:?}; only its column is dropped",
                target.table
            )));
        }
        if !target.table_of_its_own {
            return Err(input_error(format!(
                "--drop-table: table {:?} holds more than the keys and the counter ({}); only the column can be dropped",
                target.table,
                if others.is_empty() {
                    "it is the members table".to_string()
                } else {
                    others.join(", ")
                }
            )));
        }
    } else if target.table_of_its_own {
        notes.push(format!(
            "{} holds nothing but the keys and the counter: --drop-table drops the whole table instead of the column",
            target.table
        ));
    }

    let keys = key_columns(conn, mapping, &ctx).await?;
    let plan = plan(conn, &ctx, &target, opts).await?;
    notes.extend(plan.notes.iter().cloned());
    let ddl = plan.lines(&target);

    // The gate.
    let statements = statement_use(conn, &ctx, &target, mapping).await;
    let audits = read_audits(conn, dialect, &mapping.fingerprint).await?;
    let mut verdict = gate::decide(
        &audits,
        &mapping.fingerprint,
        now_ms(),
        &opts.gate,
        &statements,
    );
    let forced = |open: bool| -> Option<String> {
        if !open && opts.force {
            opts.reason.clone()
        } else {
            None
        }
    };
    let mut outcome = ContractOutcome {
        target: target.clone(),
        nothing_to_drop: None,
        verdict: Some(verdict.clone()),
        ddl,
        notes,
        executed: false,
        final_audit: None,
        archive: None,
        forced: forced(verdict.open),
        ledger_id: None,
        exit_code: if verdict.open { EXIT_OK } else { EXIT_DRIFT },
    };
    if !opts.execute || (!verdict.open && !opts.force) {
        return Ok(outcome);
    }

    // --execute: one runner per mapping, recorded in the ledger from here on.
    crate::db::privileges::for_contract(conn, dialect).await?;
    let lock_name = runner_lock_name(conn, dialect, &mapping.fingerprint).await?;
    let runner = RunnerLock::acquire(conn, dialect, &lock_name).await?;
    let options_json = serde_json::json!({
        "execute": true,
        "min_clean_audits": opts.gate.min_clean_audits,
        "max_audit_age_ms": opts.gate.max_audit_age.as_millis() as u64,
        "accept_tolerance": opts.gate.accept_tolerance,
        "require_unused": opts.gate.require_unused,
        "archive": opts.archive_csv.as_ref().map(|p| p.display().to_string()),
        "drop_table": opts.drop_table,
        "force": opts.force,
        "reason": opts.reason,
        "lock_timeout_ms": opts.lock_timeout.as_millis() as u64,
        "lock_retries": opts.lock_retries,
        "batch_size": opts.batch_size,
    });
    let result = async {
        let id = ledger::start(
            conn,
            dialect,
            "contract",
            &mapping.fingerprint,
            &options_json,
        )
        .await?;
        outcome.ledger_id = Some(id);
        let result = execute(
            conn,
            mapping,
            &ctx,
            &keys,
            &plan,
            opts,
            id,
            &mut verdict,
            &mut outcome,
        )
        .await;
        let summary = evidence(&outcome, &verdict, opts, result.as_ref().err());
        match &result {
            Ok(()) if outcome.executed => {
                ledger::finish(
                    conn,
                    dialect,
                    id,
                    "done",
                    &summary,
                    Some(verdict.open),
                    outcome.archive.as_ref().and_then(|a| a.csv.as_deref()),
                    outcome
                        .archive
                        .as_ref()
                        .and_then(|a| a.csv_sha256.as_deref()),
                )
                .await
                .with_context(|| {
                    format!(
                        "{} was dropped (archive: contract run #{id} in {ARCHIVE_TABLE}), but the ledger could not record it",
                        outcome.target.describe()
                    )
                })?;
            }
            Ok(()) => {
                ledger::finish(
                    conn,
                    dialect,
                    id,
                    "refused",
                    &summary,
                    Some(false),
                    None,
                    None,
                )
                .await?;
            }
            Err(_) => {
                let _ =
                    ledger::finish(conn, dialect, id, "failed", &summary, None, None, None).await;
            }
        }
        result
    }
    .await;
    let _ = runner.release(conn).await;
    result?;
    outcome.verdict = Some(verdict);
    Ok(outcome)
}

/// The runner lock's name: the mapping, and on MySQL/MariaDB, whose `GET_LOCK` names are
/// server-wide, the database too (two databases of one server never block each other).
async fn runner_lock_name(
    conn: &mut AnyConnection,
    dialect: Dialect,
    fingerprint: &str,
) -> Result<String> {
    let mut name = format!("tidemark:contract:{}", &fingerprint[..16]);
    if dialect == Dialect::Mysql {
        use sha2::{Digest, Sha256};
        let row = sqlx::query("SELECT DATABASE()")
            .fetch_one(&mut *conn)
            .await?;
        let db = text(&row, 0)?.unwrap_or_default();
        name.push(':');
        name.push_str(&hex(&Sha256::digest(db.as_bytes()))[..12]);
    }
    Ok(name)
}

fn check_options(opts: &ContractOptions) -> Result<()> {
    let reason = opts.reason.as_deref().map(str::trim);
    if opts.force && reason.is_none_or(str::is_empty) {
        return Err(input_error(
            "--force needs --reason TEXT: the reason is recorded in the ledger",
        ));
    }
    if !opts.force && reason.is_some() {
        return Err(input_error("--reason is only for --force"));
    }
    if opts.gate.min_clean_audits == 0 {
        return Err(input_error("--min-clean-audits must be 1 or more"));
    }
    Ok(())
}

fn target_of(mapping: &Mapping, opts: &ContractOptions) -> Target {
    let (conversation, subject) = match mapping.counter.shape {
        Shape::PerMember => (
            mapping.counter.conversation.clone().unwrap_or_default(),
            mapping.counter.user.clone().unwrap_or_default(),
        ),
        Shape::PerMessage => (
            mapping.messages.conversation.clone(),
            mapping.messages.id.clone(),
        ),
    };
    Target {
        shape: mapping.counter.shape,
        table: mapping.counter_table().to_string(),
        column: mapping.counter.column.clone(),
        conversation,
        subject,
        table_of_its_own: false,
        drop_table: opts.drop_table,
    }
}

async fn key_columns(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    ctx: &SqlContext,
) -> Result<Keys> {
    let (user, conv) = schema::watermark_key_types(conn, mapping, ctx).await?;
    Ok(match mapping.counter.shape {
        Shape::PerMember => Keys {
            conv: ctx.ctr.conv.clone(),
            subject: ctx.ctr.user.clone(),
            subject_col: "user_id",
            unit: BatchUnit::Counters,
            conv_kind: conv.kind,
            subject_kind: user.kind,
        },
        Shape::PerMessage => Keys {
            conv: ctx.msg.conv.clone(),
            subject: ctx.msg.id.clone(),
            subject_col: "message_id",
            unit: BatchUnit::Messages,
            conv_kind: conv.kind,
            subject_kind: KeyKind::Integer,
        },
    })
}

fn split_table(table: &str) -> (Option<String>, String) {
    match table.split_once('.') {
        Some((s, t)) => (Some(s.to_string()), t.to_string()),
        None => (None, table.to_string()),
    }
}

/// The columns of `table`, in order (empty when it does not exist).
async fn table_columns(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    table: &str,
) -> Result<Vec<String>> {
    let sql = render("contract_columns.sql", ctx, minijinja::context! {})?;
    let (schema, name) = split_table(table);
    let q = sqlx::query(&sql);
    let q = match ctx.dialect {
        Dialect::Postgres => q.bind(ctx.dialect.quote(table)),
        Dialect::Mysql => q.bind(schema).bind(name),
        Dialect::Sqlite => q
            .bind(schema.unwrap_or_else(|| "main".to_string()))
            .bind(name),
    };
    let rows = q.fetch_all(&mut *conn).await?;
    rows.iter()
        .map(|r| Ok(text(r, 0)?.unwrap_or_default()))
        .collect()
}

/// The gate's verdict alone, for `status`: reads the ledger and the statement statistics,
/// plans nothing and writes nothing.
pub async fn verdict(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
    gate_options: &GateOptions,
) -> Result<gate::Verdict> {
    let ctx = SqlContext::new(mapping, dialect);
    let target = target_of(mapping, &ContractOptions::default());
    let statements = statement_use(conn, &ctx, &target, mapping).await;
    let audits = read_audits(conn, dialect, &mapping.fingerprint).await?;
    Ok(gate::decide(
        &audits,
        &mapping.fingerprint,
        now_ms(),
        gate_options,
        &statements,
    ))
}

/// The contract run that dropped this mapping's counter (column or table), if one did: for
/// `status` ("contract: done, run #N").
pub async fn dropped_by(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
) -> Result<Option<i64>> {
    if !schema::table_exists(conn, dialect, LEDGER_TABLE).await? {
        return Ok(None);
    }
    let target = target_of(mapping, &ContractOptions::default());
    last_contract(conn, dialect, &target).await
}

/// The newest finished contract run that dropped this counter, if any.
async fn last_contract(
    conn: &mut AnyConnection,
    dialect: Dialect,
    target: &Target,
) -> Result<Option<i64>> {
    for e in ledger::recent(conn, "contract", 100, dialect).await? {
        if e.status != "done" {
            continue;
        }
        let summary: serde_json::Value = e
            .summary
            .as_deref()
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default();
        if summary["target"]["table"].as_str() == Some(target.table.as_str())
            && summary["target"]["column"].as_str() == Some(target.column.as_str())
        {
            return Ok(Some(e.id));
        }
    }
    Ok(None)
}

/// The audit runs of the ledger the gate decides on: those of this mapping, and the newest of
/// the others (to name them when none of this mapping exists).
pub async fn read_audits(
    conn: &mut AnyConnection,
    dialect: Dialect,
    fingerprint: &str,
) -> Result<Vec<AuditRecord>> {
    let mut out = Vec::new();
    for (cmp, limit) in [("=", 1000), ("<>", 100)] {
        let sql = format!(
            "SELECT id, status, started_ms, finished_ms, mapping_fingerprint, options, summary, CAST(passed AS {int}), report_sha256 \
             FROM {LEDGER_TABLE} WHERE stage = 'audit' AND mapping_fingerprint {cmp} {p} ORDER BY id DESC LIMIT {limit}",
            int = dialect.int_cast(),
            p = dialect.placeholder(1),
        );
        let rows = sqlx::query(&sql)
            .bind(fingerprint.to_string())
            .fetch_all(&mut *conn)
            .await
            .context("reading the audits from the ledger")?;
        for r in &rows {
            let options: serde_json::Value = text(r, 5)?
                .and_then(|s| serde_json::from_str(&s).ok())
                .unwrap_or_default();
            let summary: serde_json::Value = text(r, 6)?
                .and_then(|s| serde_json::from_str(&s).ok())
                .unwrap_or_default();
            let passed: Option<i64> = r.try_get(7)?;
            out.push(AuditRecord {
                id: r.try_get(0)?,
                status: text(r, 1)?.unwrap_or_default(),
                started_ms: r.try_get(2)?,
                finished_ms: r.try_get(3)?,
                fingerprint: text(r, 4)?.unwrap_or_default(),
                passed: passed.map(|p| p != 0),
                tolerance: Tolerance::from_options(&options),
                crossed: summary["crossed"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default(),
                report_sha256: text(r, 8)?,
            });
        }
    }
    Ok(out)
}

/// What the server's statement statistics say about the counter column (never an error: a
/// server without them, or a view tidemark may not read, is reported as unavailable).
pub async fn statement_use(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    target: &Target,
    mapping: &Mapping,
) -> StatementUse {
    let source = match ctx.dialect {
        Dialect::Postgres => "pg_stat_statements",
        Dialect::Mysql => "performance_schema.events_statements_summary_by_digest",
        Dialect::Sqlite => {
            return StatementUse::Unavailable {
                reason: "SQLite keeps no statement statistics".into(),
            }
        }
    };
    if ctx.dialect == Dialect::Mysql {
        let on: Result<i64, _> = sqlx::query_scalar("SELECT CAST(@@performance_schema AS SIGNED)")
            .fetch_one(&mut *conn)
            .await;
        match on {
            Ok(0) => {
                return StatementUse::Unavailable {
                    reason: "performance_schema is OFF on this server".into(),
                }
            }
            Ok(_) => {}
            Err(e) => {
                return StatementUse::Unavailable {
                    reason: format!("cannot read @@performance_schema: {}", db_message(&e)),
                }
            }
        }
        let consumer = sqlx::query(
            "SELECT CONVERT(ENABLED USING utf8mb4) FROM performance_schema.setup_consumers WHERE NAME = 'statements_digest'",
        )
        .fetch_optional(&mut *conn)
        .await;
        if let Ok(Some(row)) = consumer {
            if text(&row, 0).ok().flatten().as_deref() != Some("YES") {
                return StatementUse::Unavailable {
                    reason: "the performance_schema consumer statements_digest is disabled".into(),
                };
            }
        }
    }
    let sql = match render("contract_statements.sql", ctx, minijinja::context! {}) {
        Ok(s) => s,
        Err(e) => {
            return StatementUse::Unavailable {
                reason: e.to_string(),
            }
        }
    };
    let pattern = format!("%{}%", target.column);
    let rows = sqlx::query(&sql).bind(pattern).fetch_all(&mut *conn).await;
    let rows = match rows {
        Ok(rows) => rows,
        Err(e) => {
            let msg = db_message(&e);
            let reason = if ctx.dialect == Dialect::Postgres && msg.contains("does not exist") {
                "pg_stat_statements is not installed in this database (shared_preload_libraries and CREATE EXTENSION pg_stat_statements)".to_string()
            } else {
                format!("cannot read {source}: {msg}")
            };
            return StatementUse::Unavailable { reason };
        }
    };
    let exclude = [mapping.watermarks.table.as_str()];
    let mut seen = Vec::new();
    for r in &rows {
        let Ok(Some(query)) = text(r, 0) else {
            continue;
        };
        let calls: i64 = r.try_get(1).unwrap_or_default();
        if gate::statement_uses(&query, &target.table, &target.column, &exclude) {
            seen.push(StatementSeen {
                text: query.chars().take(300).collect(),
                calls,
            });
        }
    }
    if seen.is_empty() {
        StatementUse::Unused {
            source: source.into(),
        }
    } else {
        StatementUse::Used {
            source: source.into(),
            statements: seen,
        }
    }
}

fn db_message(e: &sqlx::Error) -> String {
    e.as_database_error()
        .map(|d| d.message().to_string())
        .unwrap_or_else(|| e.to_string())
}

/// The statements that drop the counter on this dialect.
///
/// Errors (exit 2): on SQLite, a trigger or view that still uses the column (or the table, with
/// `--drop-table`), a counter column that is part of the primary key or that another column's
/// definition uses.
pub async fn plan(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    target: &Target,
    opts: &ContractOptions,
) -> Result<Plan> {
    let d = ctx.dialect;
    let table = d.quote(&target.table);
    let column = d.quote(&target.column);
    let ms = opts.lock_timeout.as_millis().max(1);
    let secs = opts.lock_timeout.as_secs_f64().ceil().max(1.0) as u64;
    let mut notes = Vec::new();
    let plan = match d {
        Dialect::Postgres => {
            let drop = if target.drop_table {
                format!("DROP TABLE {table}")
            } else {
                format!("ALTER TABLE {table} DROP COLUMN {column}")
            };
            if !target.drop_table {
                notes.push(
                    "PostgreSQL drops any index that includes the column with it; a view or constraint that depends on it makes the DROP fail (nothing is dropped)".into(),
                );
            }
            Plan {
                steps: vec![
                    Step::Sql("BEGIN".into()),
                    Step::Sql(format!("SET LOCAL lock_timeout = '{ms}ms'")),
                    Step::Sql(format!("LOCK TABLE {table} IN SHARE MODE")),
                    Step::Verify,
                    Step::Sql(drop),
                    Step::Sql("COMMIT".into()),
                ],
                on_failure: vec!["ROLLBACK".into()],
                notes,
            }
        }
        Dialect::Mysql => {
            let drop = if target.drop_table {
                Step::Sql(format!("DROP TABLE {table}"))
            } else {
                let default = format!("ALTER TABLE {table} DROP COLUMN {column}");
                let (instant, version) = mysql_instant_drop(conn).await?;
                if instant {
                    Step::InstantOrDefault {
                        instant: format!("{default}, ALGORITHM=INSTANT"),
                        default,
                    }
                } else {
                    notes.push(format!(
                        "server {version} has no instant DROP COLUMN (MySQL 8.0.29+, MariaDB 10.4+): the default algorithm rebuilds the table"
                    ));
                    Step::Sql(default)
                }
            };
            Plan {
                steps: vec![
                    Step::Sql(format!("SET SESSION lock_wait_timeout = {secs}")),
                    Step::Sql(format!("SET SESSION innodb_lock_wait_timeout = {secs}")),
                    Step::Sql(format!("LOCK TABLES {table} WRITE, {ARCHIVE_TABLE} READ")),
                    Step::Verify,
                    drop,
                    Step::Sql("UNLOCK TABLES".into()),
                ],
                on_failure: vec!["UNLOCK TABLES".into()],
                notes,
            }
        }
        Dialect::Sqlite => sqlite_plan(conn, target, ms).await?,
    };
    Ok(plan)
}

/// Whether the MySQL/MariaDB server drops a column instantly (MySQL 8.0.29+, MariaDB 10.4+),
/// and its version string.
async fn mysql_instant_drop(conn: &mut AnyConnection) -> Result<(bool, String)> {
    let row = sqlx::query("SELECT VERSION()")
        .fetch_one(&mut *conn)
        .await?;
    let version = text(&row, 0)?.unwrap_or_default();
    Ok((instant_drop_supported(&version), version))
}

/// Whether a MySQL/MariaDB version string names a server with instant DROP COLUMN.
pub fn instant_drop_supported(version: &str) -> bool {
    let nums: Vec<u32> = version
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .take(3)
        .map(|s| s.parse().unwrap_or(0))
        .collect();
    let v = (
        nums.first().copied().unwrap_or(0),
        nums.get(1).copied().unwrap_or(0),
        nums.get(2).copied().unwrap_or(0),
    );
    if version.to_ascii_lowercase().contains("mariadb") {
        v >= (10, 4, 0)
    } else {
        v >= (8, 0, 29)
    }
}

async fn sqlite_plan(conn: &mut AnyConnection, target: &Target, ms: u128) -> Result<Plan> {
    let d = Dialect::Sqlite;
    let (schema, name) = split_table(&target.table);
    let schema = schema.unwrap_or_else(|| "main".to_string());
    let qs = d.quote(&schema);
    let table = d.quote(&target.table);
    let master = format!("{qs}.sqlite_master");
    let column = &target.column;

    let table_sql: Option<String> = {
        let row = sqlx::query(&format!(
            "SELECT sql FROM {master} WHERE type = 'table' AND name = ? COLLATE NOCASE"
        ))
        .bind(name.clone())
        .fetch_optional(&mut *conn)
        .await?;
        match row {
            Some(r) => text(&r, 0)?,
            None => None,
        }
    };
    let table_sql =
        table_sql.ok_or_else(|| input_error(format!("table {:?} not found", target.table)))?;

    // Triggers and views elsewhere that use the table (the column, unless it is all dropped).
    let objects = sqlx::query(&format!(
        "SELECT type, name, tbl_name, sql FROM {master} WHERE type IN ('trigger', 'view') AND sql IS NOT NULL"
    ))
    .fetch_all(&mut *conn)
    .await?;
    let mut own_triggers = Vec::new();
    for r in &objects {
        let kind = text(r, 0)?.unwrap_or_default();
        let obj = text(r, 1)?.unwrap_or_default();
        let on = text(r, 2)?.unwrap_or_default();
        let sql = text(r, 3)?.unwrap_or_default();
        let idents = crate::dialect::identifiers(&sql);
        let mentions = |n: &str| idents.iter().any(|i| i.eq_ignore_ascii_case(n));
        let on_table = kind == "trigger" && on.eq_ignore_ascii_case(&name);
        let uses = if target.drop_table {
            !on_table && mentions(&name)
        } else {
            mentions(&name) && mentions(column)
        };
        if uses {
            return Err(input_error(format!(
                "{kind} {obj:?} uses {}: change or drop it first (SQLite would leave it broken)",
                if target.drop_table {
                    format!("table {name}")
                } else {
                    format!("{name}.{column}")
                }
            )));
        }
        if on_table {
            own_triggers.push(sql);
        }
    }

    let busy = format!("PRAGMA busy_timeout = {ms}");
    if target.drop_table {
        return Ok(Plan {
            steps: vec![
                Step::Sql(busy),
                Step::Sql("BEGIN IMMEDIATE".into()),
                Step::Verify,
                Step::Sql(format!("DROP TABLE {table}")),
                Step::Sql("COMMIT".into()),
            ],
            on_failure: vec!["ROLLBACK".into()],
            notes: Vec::new(),
        });
    }

    let version: String = {
        let row = sqlx::query("SELECT sqlite_version()")
            .fetch_one(&mut *conn)
            .await?;
        text(&row, 0)?.unwrap_or_default()
    };
    let in_place_supported = {
        let v: Vec<u32> = version.split('.').map(|p| p.parse().unwrap_or(0)).collect();
        (
            v.first().copied().unwrap_or(0),
            v.get(1).copied().unwrap_or(0),
        ) >= (3, 35)
    };

    let pk: i64 = sqlx::query_scalar(
        "SELECT COALESCE(MAX(pk), 0) FROM pragma_table_info(?2, ?1) WHERE name = ?3 COLLATE NOCASE",
    )
    .bind(schema.clone())
    .bind(name.clone())
    .bind(column.clone())
    .fetch_one(&mut *conn)
    .await?;
    if pk > 0 {
        return Err(input_error(format!(
            "{}.{column} is part of the primary key: tidemark does not drop it",
            target.table
        )));
    }
    let fk: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM pragma_foreign_key_list(?2, ?1) WHERE \"from\" = ?3 COLLATE NOCASE",
    )
    .bind(schema.clone())
    .bind(name.clone())
    .bind(column.clone())
    .fetch_one(&mut *conn)
    .await?;

    // Indexes: those that use the column go; an automatic one (UNIQUE) needs the rebuild.
    let index_rows = sqlx::query(&format!(
        "SELECT name, sql FROM {master} WHERE type = 'index' AND tbl_name = ? COLLATE NOCASE ORDER BY name"
    ))
    .bind(name.clone())
    .fetch_all(&mut *conn)
    .await?;
    let mut drop_indexes = Vec::new();
    let mut keep_indexes = Vec::new();
    let mut unique_on_column = false;
    for r in &index_rows {
        let index = text(r, 0)?.unwrap_or_default();
        let sql = text(r, 1)?;
        let cols: Vec<String> = {
            let rows = sqlx::query("SELECT name FROM pragma_index_info(?1, ?2)")
                .bind(index.clone())
                .bind(schema.clone())
                .fetch_all(&mut *conn)
                .await?;
            rows.iter()
                .filter_map(|r| text(r, 0).ok().flatten())
                .collect()
        };
        let uses = cols.iter().any(|c| c.eq_ignore_ascii_case(column))
            || sql.as_deref().is_some_and(|s| {
                crate::dialect::identifiers(s)
                    .iter()
                    .any(|i| i.eq_ignore_ascii_case(column))
            });
        match (uses, sql) {
            (true, Some(_)) => drop_indexes.push(index),
            (true, None) => unique_on_column = true,
            (false, Some(sql)) => keep_indexes.push(sql),
            (false, None) => {}
        }
    }

    let parts = split_create_table(&table_sql).ok_or_else(|| {
        anyhow!(
            "cannot read the CREATE TABLE statement of {}: {table_sql}",
            target.table
        )
    })?;
    let mut kept = Vec::new();
    let mut dropped_constraints = Vec::new();
    let mut found = false;
    for element in &parts.elements {
        let idents = crate::dialect::identifiers(element);
        let first = idents.first().cloned().unwrap_or_default();
        let is_constraint = ["CONSTRAINT", "PRIMARY", "UNIQUE", "CHECK", "FOREIGN"]
            .iter()
            .any(|k| first.eq_ignore_ascii_case(k))
            && !element.trim_start().starts_with(['"', '`', '[']);
        let mentions = idents.iter().any(|i| i.eq_ignore_ascii_case(column));
        if !is_constraint && first.eq_ignore_ascii_case(column) {
            found = true;
        } else if mentions && is_constraint {
            dropped_constraints.push(element.trim().to_string());
        } else if mentions {
            return Err(input_error(format!(
                "{}: the definition of another column uses {column} ({}): tidemark does not drop it",
                target.table,
                element.trim()
            )));
        } else {
            kept.push(element.trim().to_string());
        }
    }
    if !found {
        bail!(
            "cannot find the definition of {column} in the CREATE TABLE statement of {}",
            target.table
        );
    }
    let in_place =
        in_place_supported && !unique_on_column && fk == 0 && dropped_constraints.is_empty();

    let mut notes = Vec::new();
    for index in &drop_indexes {
        notes.push(format!(
            "index {index} uses {column} and is dropped with it"
        ));
    }
    let mut steps = vec![Step::Sql(busy)];
    let mut on_failure = vec!["ROLLBACK".to_string()];
    if in_place {
        steps.push(Step::Sql("BEGIN IMMEDIATE".into()));
        steps.push(Step::Verify);
        for index in &drop_indexes {
            steps.push(Step::Sql(format!("DROP INDEX {qs}.{}", d.quote(index))));
        }
        steps.push(Step::Sql(format!(
            "ALTER TABLE {table} DROP COLUMN {}",
            d.quote(column)
        )));
        steps.push(Step::Sql("COMMIT".into()));
        return Ok(Plan {
            steps,
            on_failure,
            notes,
        });
    }

    // The rebuild SQLite documents ("Making Other Kinds Of Table Schema Changes").
    notes.push(format!(
        "SQLite {version} cannot drop {column} in place ({}): the table is rebuilt without it",
        [
            (!in_place_supported).then_some("SQLite before 3.35"),
            unique_on_column.then_some("a UNIQUE constraint"),
            (fk > 0).then_some("a foreign key"),
            (!dropped_constraints.is_empty()).then_some("a table constraint"),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", ")
    ));
    for c in &dropped_constraints {
        notes.push(format!(
            "the table constraint `{c}` uses {column} and is dropped with it"
        ));
    }
    let fk_on: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
        .fetch_one(&mut *conn)
        .await?;
    let copy_cols: Vec<String> = {
        let rows = sqlx::query(
            "SELECT name FROM pragma_table_xinfo(?2, ?1) WHERE hidden = 0 ORDER BY cid",
        )
        .bind(schema.clone())
        .bind(name.clone())
        .fetch_all(&mut *conn)
        .await?;
        rows.iter()
            .filter_map(|r| text(r, 0).ok().flatten())
            .filter(|c| !c.eq_ignore_ascii_case(column))
            .map(|c| d.quote(&c))
            .collect()
    };
    let new_name = format!("tidemark_rebuild_{name}");
    let new_table = format!("{qs}.{}", d.quote(&new_name));
    if fk_on != 0 {
        steps.push(Step::Sql("PRAGMA foreign_keys = OFF".into()));
    }
    steps.push(Step::Sql("BEGIN IMMEDIATE".into()));
    steps.push(Step::Verify);
    steps.push(Step::Sql(format!(
        "CREATE TABLE {new_table} (\n  {}\n){}",
        kept.join(",\n  "),
        parts.tail
    )));
    let cols = copy_cols.join(", ");
    steps.push(Step::Sql(format!(
        "INSERT INTO {new_table} ({cols}) SELECT {cols} FROM {table}"
    )));
    steps.push(Step::Sql(format!("DROP TABLE {table}")));
    steps.push(Step::Sql("PRAGMA legacy_alter_table = ON".into()));
    steps.push(Step::Sql(format!(
        "ALTER TABLE {new_table} RENAME TO {}",
        d.quote(&name)
    )));
    steps.push(Step::Sql("PRAGMA legacy_alter_table = OFF".into()));
    for sql in keep_indexes.iter().chain(own_triggers.iter()) {
        steps.push(Step::Sql(sql.clone()));
    }
    steps.push(Step::ForeignKeyCheck(format!(
        "PRAGMA {qs}.foreign_key_check({})",
        d.quote(&name)
    )));
    steps.push(Step::Sql("COMMIT".into()));
    on_failure.push("PRAGMA legacy_alter_table = OFF".into());
    if fk_on != 0 {
        steps.push(Step::Sql("PRAGMA foreign_keys = ON".into()));
        on_failure.push("PRAGMA foreign_keys = ON".into());
    }
    Ok(Plan {
        steps,
        on_failure,
        notes,
    })
}

/// A CREATE TABLE statement cut at its top-level parentheses: the column definitions and
/// table constraints between them, and what follows (`WITHOUT ROWID`, `STRICT`).
#[derive(Debug, Clone, PartialEq)]
pub struct CreateTableParts {
    /// Column definitions and table constraints, in order, as written.
    pub elements: Vec<String>,
    /// The text after the closing parenthesis.
    pub tail: String,
}

/// Splits a CREATE TABLE statement (quotes, brackets and comments respected). None when it has
/// no parenthesised definition list (`CREATE TABLE … AS SELECT`).
pub fn split_create_table(sql: &str) -> Option<CreateTableParts> {
    let chars: Vec<char> = sql.chars().collect();
    let mut i = 0;
    let mut depth = 0usize;
    let mut start = None;
    let mut elements = Vec::new();
    let mut current = String::new();
    while i < chars.len() {
        let c = chars[i];
        // Quoted text and comments are copied whole.
        let close = match c {
            '\'' => Some('\''),
            '"' => Some('"'),
            '`' => Some('`'),
            '[' => Some(']'),
            _ => None,
        };
        if let Some(close) = close {
            let from = i;
            i += 1;
            while i < chars.len() {
                if chars[i] == close {
                    if close != ']' && chars.get(i + 1) == Some(&close) {
                        i += 2;
                        continue;
                    }
                    break;
                }
                i += 1;
            }
            if depth > 0 {
                current.extend(&chars[from..(i + 1).min(chars.len())]);
            }
            i += 1;
            continue;
        }
        if c == '-' && chars.get(i + 1) == Some(&'-') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if c == '/' && chars.get(i + 1) == Some(&'*') {
            i += 2;
            while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                i += 1;
            }
            i += 2;
            continue;
        }
        match c {
            '(' => {
                depth += 1;
                if depth == 1 {
                    start = Some(i);
                } else {
                    current.push(c);
                }
            }
            ')' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    elements.push(current.trim().to_string());
                    let tail: String = chars[i + 1..].iter().collect();
                    start?;
                    return Some(CreateTableParts {
                        elements,
                        tail: tail.trim_end().trim_end_matches(';').to_string(),
                    });
                }
                current.push(c);
            }
            ',' if depth == 1 => {
                elements.push(current.trim().to_string());
                current.clear();
            }
            _ => {
                if depth > 0 {
                    current.push(c);
                }
            }
        }
        i += 1;
    }
    None
}

/// `--execute` after the gate: final audit, archive, verification, DDL.
#[allow(clippy::too_many_arguments)]
async fn execute(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    ctx: &SqlContext,
    keys: &Keys,
    plan: &Plan,
    opts: &ContractOptions,
    contract_id: i64,
    verdict: &mut gate::Verdict,
    outcome: &mut ContractOutcome,
) -> Result<()> {
    let dialect = ctx.dialect;

    // 1. The final audit, inside the gate.
    let newest = verdict.newest_clean.clone();
    let tolerance = newest
        .as_ref()
        .map(|a| a.tolerance.clone())
        .unwrap_or_default();
    let batch_size = match &newest {
        Some(a) => audit_batch_size(conn, dialect, a.id).await.unwrap_or(5000),
        None => 5000,
    };
    let report = opts.audit_report.clone().unwrap_or_else(|| {
        match opts
            .archive_csv
            .as_ref()
            .and_then(|p| p.parent())
            .filter(|p| !p.as_os_str().is_empty())
        {
            Some(dir) => dir.join(DEFAULT_AUDIT_REPORT),
            None => PathBuf::from(DEFAULT_AUDIT_REPORT),
        }
    });
    // `..Default::default()`: options the audit may gain later keep their defaults.
    #[allow(clippy::needless_update)]
    let audit_opts = audit::AuditOptions {
        cap: tolerance.cap,
        report: report.clone(),
        batch_size,
        ledger: true,
        max_drift_rows: tolerance.max_drift_rows,
        max_drift_ratio: tolerance.max_drift_ratio,
        max_abs_drift: tolerance.max_abs_drift,
        quiet: opts.quiet,
        ..Default::default()
    };
    let audited = audit::run(conn, mapping, dialect, &audit_opts)
        .await
        .context("the final audit")?;
    let s = &audited.summary;
    outcome.final_audit = Some(FinalAudit {
        id: s.ledger_id,
        passed: s.passed,
        crossed: s.crossed.clone(),
        tolerance,
        rows_checked: s.rows_checked,
        drifting_rows: s.drifting_rows,
        report: s.report.clone(),
        report_sha256: s.report_sha256.clone(),
    });
    if !s.passed {
        verdict.reasons.push(Reason::FinalAuditFailed {
            id: s.ledger_id,
            crossed: s.crossed.clone(),
        });
        verdict.open = false;
        outcome.exit_code = EXIT_DRIFT;
        outcome.verdict = Some(verdict.clone());
        if !opts.force {
            return Ok(());
        }
        outcome.forced = opts.reason.clone();
    }
    outcome.verdict = Some(verdict.clone());
    let audit_id = s.ledger_id;

    // 2. The archive table, batch by batch.
    archive_rows(
        conn,
        ctx,
        keys,
        &outcome.target,
        contract_id,
        audit_id,
        opts.batch_size,
    )
    .await?;

    // 3. Verification: every row with its keys and value, and the checksums.
    let source = checksum(conn, ctx, keys, "source", None).await?;
    let archived = checksum(conn, ctx, keys, "archive", Some(contract_id)).await?;
    let missing: i64 = {
        let sql = render(
            "contract_missing.sql",
            ctx,
            minijinja::context! {
                param => dialect.placeholder(1),
                key_conv => keys.conv.clone(),
                key_subject => keys.subject.clone(),
                subject_col => keys.subject_col,
            },
        )?;
        sqlx::query_scalar(&sql)
            .bind(contract_id)
            .fetch_one(&mut *conn)
            .await
            .context("verifying the archive")?
    };
    if missing != 0 || source != archived {
        bail!(
            "the archive of contract run #{contract_id} does not verify: {missing} counter row(s) not archived with the same keys and value; source {source:?}, archive {archived:?} (a value changed while archiving?); nothing was dropped"
        );
    }
    let mut summary = ArchiveSummary {
        table: ARCHIVE_TABLE.into(),
        contract_id,
        audit_id,
        checksum: archived.clone(),
        csv: None,
        csv_sha256: None,
    };
    if let Some(path) = &opts.archive_csv {
        let (csv_sum, sha) = write_csv(conn, ctx, keys, contract_id, path).await?;
        if csv_sum != archived {
            bail!(
                "the CSV archive {} does not verify: {csv_sum:?}, archive table {archived:?}; nothing was dropped",
                path.display()
            );
        }
        summary.csv = Some(path.display().to_string());
        summary.csv_sha256 = Some(sha);
    }
    outcome.archive = Some(summary);

    // 4. The DDL, under a bounded lock wait, retried.
    if let Some(hook) = &opts.before_ddl {
        hook().await.context("the before-DDL hook")?;
    }
    let mut attempt = 0;
    loop {
        match run_plan(conn, ctx, keys, plan, &archived, &outcome.target).await {
            Ok(ran) => {
                outcome.ddl = ran;
                break;
            }
            Err(e) if lock::is_lock_wait(&e) && attempt < opts.lock_retries => {
                attempt += 1;
                let pause = Duration::from_millis(500u64 << attempt.min(4));
                tokio::time::sleep(pause).await;
            }
            Err(e) => {
                let tries = attempt + 1;
                return Err(e.context(format!(
                    "dropping {} ({tries} attempt(s)); the column and the archive of contract run #{contract_id} are intact",
                    outcome.target.describe()
                )));
            }
        }
    }
    outcome.executed = true;
    outcome.exit_code = EXIT_OK;
    Ok(())
}

async fn audit_batch_size(conn: &mut AnyConnection, dialect: Dialect, id: i64) -> Result<u64> {
    let sql = format!(
        "SELECT options FROM {LEDGER_TABLE} WHERE id = {}",
        dialect.placeholder(1)
    );
    let row = sqlx::query(&sql).bind(id).fetch_one(&mut *conn).await?;
    let options: serde_json::Value = text(&row, 0)?
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default();
    Ok(options["batch_size"]
        .as_u64()
        .filter(|n| *n > 0)
        .unwrap_or(5000))
}

async fn archive_rows(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    keys: &Keys,
    target: &Target,
    contract_id: i64,
    audit_id: Option<i64>,
    batch_size: u64,
) -> Result<()> {
    let d = ctx.dialect;
    let mut lo: Option<Key> = None;
    while let Some(batch) = next_batch(
        conn,
        ctx,
        keys.unit,
        keys.conv_kind,
        lo.clone(),
        batch_size,
        &super::Scope::default(),
    )
    .await?
    {
        let sql = render(
            "contract_archive.sql",
            ctx,
            minijinja::context! {
                p => (1..=5).map(|n| d.placeholder(n)).collect::<Vec<_>>(),
                range => batch.params(d, 6),
                key_conv => keys.conv.clone(),
                key_subject => keys.subject.clone(),
                subject_col => keys.subject_col,
            },
        )?;
        begin_write(conn, d).await?;
        let q = sqlx::query(&sql)
            .bind(contract_id)
            .bind(audit_id)
            .bind(target.table.clone())
            .bind(target.column.clone())
            .bind(now_ms());
        match batch.bind(q).execute(&mut *conn).await {
            Ok(_) => commit(conn).await?,
            Err(e) => {
                rollback(conn).await;
                return Err(anyhow::Error::from(e).context("archiving the counter values"));
            }
        }
        lo = Some(batch.hi);
    }
    Ok(())
}

async fn checksum(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    keys: &Keys,
    side: &str,
    contract_id: Option<i64>,
) -> Result<Checksum> {
    let sql = render(
        "contract_checksum.sql",
        ctx,
        minijinja::context! {
            side => side,
            param => ctx.dialect.placeholder(1),
            key_conv => keys.conv.clone(),
        },
    )?;
    let mut q = sqlx::query(&sql);
    if let Some(id) = contract_id {
        q = q.bind(id);
    }
    let row = q
        .fetch_one(&mut *conn)
        .await
        .with_context(|| format!("computing the {side} checksum"))?;
    Ok(Checksum {
        rows: row.try_get(0)?,
        non_null: row.try_get(1)?,
        sum: normalise_decimal(&text(&row, 2)?.unwrap_or_default()),
        sum_squares: normalise_decimal(&text(&row, 3)?.unwrap_or_default()),
    })
}

/// An exact decimal as text without a fractional part of zeros (`12.000` is `12`).
fn normalise_decimal(s: &str) -> String {
    let s = s.trim();
    match s.split_once('.') {
        Some((int, frac)) if frac.chars().all(|c| c == '0') => int.to_string(),
        _ => s.to_string(),
    }
}

/// Writes a contract run's archive to a CSV (temporary file, fsync, rename) and returns the
/// checksum of what was written and the file's SHA-256.
async fn write_csv(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    keys: &Keys,
    contract_id: i64,
    path: &Path,
) -> Result<(Checksum, String)> {
    let mut csv = crate::report::ReportWriter::with_header(
        path,
        &[
            "conversation_id",
            keys.subject_col,
            "stored_unread",
            "audit_id",
        ],
    )?;
    let result: Result<Checksum> = async {
        let (mut rows, mut non_null, mut sum, mut squares) = (0i64, 0i64, 0i128, 0i128);
        let d = ctx.dialect;
        let sql = render(
            "contract_archive_rows.sql",
            ctx,
            minijinja::context! {
                p => [d.placeholder(1), d.placeholder(2)],
                subject_col => keys.subject_col,
                limit => 5000,
            },
        )?;
        let mut last = 0i64;
        loop {
            let page = sqlx::query(&sql)
                .bind(contract_id)
                .bind(last)
                .fetch_all(&mut *conn)
                .await
                .context("reading the archive")?;
            if page.is_empty() {
                break;
            }
            for r in &page {
                last = r.try_get(0)?;
                let conv = Key::read(r, 1, keys.conv_kind)?;
                let subject = Key::read(r, 2, keys.subject_kind)?;
                let value: Option<i64> = r.try_get(3)?;
                let audit: Option<i64> = r.try_get(4)?;
                rows += 1;
                if let Some(v) = value {
                    non_null += 1;
                    sum += i128::from(v);
                    squares += i128::from(v) * i128::from(v);
                }
                csv.row(&[
                    conv.to_string(),
                    subject.to_string(),
                    crate::report::cell(value),
                    crate::report::cell(audit),
                ])?;
            }
        }
        Ok(Checksum {
            rows,
            non_null,
            sum: sum.to_string(),
            sum_squares: squares.to_string(),
        })
    }
    .await;
    match result {
        Ok(sum) => Ok((sum, csv.finish()?)),
        Err(e) => {
            csv.abandon();
            Err(e)
        }
    }
}

/// Runs the plan once; returns the statements that ran, as printed. On failure, undoes the
/// attempt (ROLLBACK / UNLOCK TABLES) before returning the error.
async fn run_plan(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    keys: &Keys,
    plan: &Plan,
    archived: &Checksum,
    target: &Target,
) -> Result<Vec<String>> {
    let mut ran = Vec::new();
    let result: Result<()> = async {
        for step in &plan.steps {
            match step {
                Step::Sql(sql) => {
                    sqlx::raw_sql(sql)
                        .execute(&mut *conn)
                        .await
                        .with_context(|| format!("running {sql}"))?;
                    ran.push(format!("{sql};"));
                }
                Step::Verify => {
                    let now = checksum(conn, ctx, keys, "source", None).await?;
                    if &now != archived {
                        bail!(
                            "{}.{} changed after it was archived (archive {archived:?}, now {now:?}): something still writes it; nothing was dropped",
                            target.table,
                            target.column
                        );
                    }
                    ran.extend(step.lines(target));
                }
                Step::ForeignKeyCheck(sql) => {
                    let rows = sqlx::query(sql).fetch_all(&mut *conn).await?;
                    if !rows.is_empty() {
                        bail!("{sql} found {} foreign key violation(s)", rows.len());
                    }
                    ran.push(format!("{sql};"));
                }
                Step::InstantOrDefault { instant, default } => {
                    match sqlx::raw_sql(instant).execute(&mut *conn).await {
                        Ok(_) => ran.push(format!("{instant};")),
                        Err(e) if instant_refused(&e) => {
                            sqlx::raw_sql(default)
                                .execute(&mut *conn)
                                .await
                                .with_context(|| format!("running {default}"))?;
                            ran.push(format!(
                                "-- the server refused INSTANT: {}",
                                db_message(&e)
                            ));
                            ran.push(format!("{default};"));
                        }
                        Err(e) => {
                            return Err(anyhow::Error::from(e).context(format!("running {instant}")))
                        }
                    }
                }
            }
        }
        Ok(())
    }
    .await;
    match result {
        Ok(()) => Ok(ran),
        Err(e) => {
            for sql in &plan.on_failure {
                let _ = sqlx::raw_sql(sql).execute(&mut *conn).await;
            }
            Err(e)
        }
    }
}

/// MySQL/MariaDB refusing `ALGORITHM=INSTANT` for this table (1845, 1846).
fn instant_refused(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|c| c == "1845" || c == "1846")
        || db_message(e).contains("ALGORITHM=INSTANT is not supported")
}

/// The summary the ledger keeps with the run: the gate's evidence and what was done.
fn evidence(
    outcome: &ContractOutcome,
    verdict: &gate::Verdict,
    opts: &ContractOptions,
    error: Option<&anyhow::Error>,
) -> serde_json::Value {
    serde_json::json!({
        "target": outcome.target,
        "gate": {
            "open": verdict.open,
            "reasons": verdict.reasons.iter().map(|r| r.to_string()).collect::<Vec<_>>(),
            "reason_kinds": verdict.reasons,
            "relied_on": verdict.relied_on,
            "newest_clean": verdict.newest_clean,
            "options": opts.gate,
        },
        "statements": verdict.statements,
        "final_audit": outcome.final_audit,
        "archive": outcome.archive,
        "ddl": outcome.ddl,
        "executed": outcome.executed,
        "forced": outcome.forced.as_ref().map(|reason| serde_json::json!({
            "reason": reason,
            "overridden": verdict.reasons.iter().map(|r| r.to_string()).collect::<Vec<_>>(),
        })),
        "error": error.map(|e| format!("{e:#}")),
    })
}

/// `tidemark contract`: connects, runs [`run`], prints the verdict (every reason), the exact
/// DDL and what was done, and returns the exit code (0 open / done / nothing to drop, 1 closed;
/// errors are returned for the caller to map to 2 or 3).
pub async fn run_cli(args: ContractArgs) -> Result<u8> {
    let (dsn, mapping) = args.common.resolve()?;
    let opts = args.options();
    check_options(&opts)?;
    let mut conn = dsn.connect().await?;
    let outcome = run(&mut conn, &mapping, dsn.dialect, &opts).await?;
    print(&outcome, &dsn, &opts);
    Ok(outcome.exit_code)
}

/// Prints an outcome for people.
pub fn print(o: &ContractOutcome, dsn: &Dsn, opts: &ContractOptions) {
    println!(
        "contract on {dsn}: {} ({})",
        o.target.describe(),
        match o.target.shape {
            Shape::PerMember => "per_member",
            Shape::PerMessage => "per_message",
        }
    );
    if let Some(msg) = &o.nothing_to_drop {
        println!("  {msg}");
        return;
    }
    if let Some(v) = &o.verdict {
        if v.open {
            println!("  gate: OPEN");
        } else if o.forced.is_some() {
            println!("  gate: CLOSED, bypassed by --force");
        } else {
            println!("  gate: CLOSED");
        }
        if !v.relied_on.is_empty() {
            let ids: Vec<String> = v.relied_on.iter().map(|i| format!("#{i}")).collect();
            let newest = v.newest_clean.as_ref();
            println!(
                "  {}: {}{}",
                if v.open {
                    "clean audits relied on"
                } else {
                    "clean audits found"
                },
                ids.join(", "),
                newest
                    .map(|a| format!(
                        " (newest {} ago, tolerance {})",
                        gate::human_ms(now_ms() - a.started_ms),
                        a.tolerance.describe()
                    ))
                    .unwrap_or_default()
            );
        }
        println!("  statement statistics: {}", v.statements.describe());
        if let StatementUse::Used { statements, .. } = &v.statements {
            for s in statements.iter().take(10) {
                println!("    {} call(s): {}", s.calls, s.text);
            }
        }
        for r in &v.reasons {
            println!("  reason: {r}");
        }
        for n in &v.notes {
            println!("  note: {n}");
        }
    }
    for n in &o.notes {
        println!("  note: {n}");
    }
    if let Some(a) = &o.final_audit {
        println!(
            "  final audit{}: {} rows checked, {} drifting, {} (report {})",
            a.id.map(|i| format!(" #{i}")).unwrap_or_default(),
            a.rows_checked,
            a.drifting_rows,
            if a.passed { "PASS" } else { "FAIL" },
            a.report
        );
    }
    if let Some(a) = &o.archive {
        println!(
            "  archived {} row(s) into {} (contract run #{}, covered by audit {}): {} non-NULL, sum {}, sum of squares {}; verified",
            a.checksum.rows,
            a.table,
            a.contract_id,
            a.audit_id.map(|i| format!("#{i}")).unwrap_or_else(|| "-".into()),
            a.checksum.non_null,
            a.checksum.sum,
            a.checksum.sum_squares
        );
        if let (Some(csv), Some(sha)) = (&a.csv, &a.csv_sha256) {
            println!("  archive CSV: {csv} (sha256 {sha}); verified");
        }
    }
    if o.executed {
        println!("  ran:");
    } else {
        println!(
            "  DDL{}:",
            if opts.execute {
                " (not run)"
            } else {
                " it would run"
            }
        );
    }
    for line in &o.ddl {
        println!("    {line}");
    }
    if let Some(reason) = &o.forced {
        println!("  forced: {reason} (recorded in the ledger)");
    }
    if o.executed {
        println!(
            "  done: {} dropped (ledger run #{})",
            o.target.describe(),
            o.ledger_id.unwrap_or_default()
        );
    } else if !opts.execute {
        let open = o.verdict.as_ref().is_some_and(|v| v.open);
        if open {
            println!("  dry run: nothing was changed; --execute archives the values and drops");
        } else if opts.force {
            println!(
                "  dry run: nothing was changed; with --execute, --force would bypass the gate"
            );
        } else {
            println!("  dry run: nothing was changed");
        }
    } else {
        println!("  refused: nothing was archived or dropped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_table_split() {
        let sql = "CREATE TABLE \"t\" (a INT, \"b,c\" TEXT DEFAULT 'x,y', n INT CHECK (n > 0), -- note, here\n PRIMARY KEY (a, \"b,c\"), CHECK (n < 10)) WITHOUT ROWID";
        let p = split_create_table(sql).unwrap();
        assert_eq!(
            p.elements,
            vec![
                "a INT",
                "\"b,c\" TEXT DEFAULT 'x,y'",
                "n INT CHECK (n > 0)",
                "PRIMARY KEY (a, \"b,c\")",
                "CHECK (n < 10)"
            ]
        );
        assert_eq!(p.tail, " WITHOUT ROWID");
        assert!(split_create_table("CREATE TABLE t AS SELECT 1").is_none());
    }

    #[test]
    fn identifiers_skip_literals() {
        assert_eq!(
            crate::dialect::identifiers(
                "SELECT [a b], 'unread_count', `x` FROM \"t\" -- unread_count"
            ),
            vec!["SELECT", "a b", "x", "FROM", "t"]
        );
    }

    #[test]
    fn instant_versions() {
        assert!(instant_drop_supported("10.11.19-MariaDB-0+deb12u1"));
        assert!(!instant_drop_supported("10.3.39-MariaDB"));
        assert!(instant_drop_supported("8.0.29"));
        assert!(instant_drop_supported("8.4.3"));
        assert!(!instant_drop_supported("8.0.28-log"));
        assert!(!instant_drop_supported("5.7.44"));
    }

    #[test]
    fn decimals() {
        assert_eq!(normalise_decimal("12.000"), "12");
        assert_eq!(normalise_decimal(" 7 "), "7");
        assert_eq!(normalise_decimal("-3"), "-3");
    }

    #[test]
    fn args_parse() {
        use clap::{CommandFactory, Parser};
        #[derive(clap::Parser)]
        struct Wrap {
            #[command(flatten)]
            args: ContractArgs,
        }
        Wrap::command().debug_assert();
        let w = Wrap::try_parse_from([
            "contract",
            "--max-audit-age",
            "36h",
            "--lock-timeout",
            "250ms",
        ])
        .unwrap();
        assert_eq!(w.args.max_audit_age, Duration::from_secs(36 * 3600));
        assert_eq!(w.args.lock_timeout, Duration::from_millis(250));
        assert_eq!(w.args.min_clean_audits, 1);
        assert!(!w.args.execute);
        let d = Wrap::try_parse_from(["contract"]).unwrap();
        assert_eq!(d.args.max_audit_age, Duration::from_secs(24 * 3600));
        assert_eq!(d.args.lock_timeout, Duration::from_secs(5));
        assert!(Wrap::try_parse_from(["contract", "--min-clean-audits", "0"]).is_err());
        assert!(Wrap::try_parse_from(["contract", "--max-audit-age", "soon"]).is_err());
    }

    #[test]
    fn force_needs_reason() {
        let mut o = ContractOptions {
            force: true,
            ..Default::default()
        };
        assert_eq!(crate::error::exit_code(&check_options(&o).unwrap_err()), 2);
        o.reason = Some("  ".into());
        assert!(check_options(&o).is_err());
        o.reason = Some("counters are dead since release 4.2".into());
        assert!(check_options(&o).is_ok());
        o.force = false;
        assert!(check_options(&o).is_err());
    }
}
