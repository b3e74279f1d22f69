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

mod archive;
mod dependents;
mod execute;
mod options;
mod plan;
mod state;
mod targets;
mod test_pause;

pub use archive::{ArchiveSummary, Checksum};
pub use dependents::{dependents, Dependent};
pub use execute::FinalAudit;
pub use options::{check_options, ContractOptions, Hook};
pub use plan::plan;
use state::last_contract;
pub use state::{dropped_by, verdict};
pub use targets::TargetArchive;

use anyhow::{Context, Result};
use serde::Serialize;
use sqlx::AnyConnection;

use super::{now_ms, BatchUnit};
use crate::dialect::{Dialect, SqlContext};
use crate::error::{input_error, EXIT_DRIFT, EXIT_OK};
use crate::gate::{self, read_audits, statement_use};
use crate::ledger::records::ContractOptionsRecord;
use crate::ledger::{self, RunStatus, Stage};
use crate::lock::RunnerLock;
use crate::mapping::{Mapping, Shape};
use crate::schema::{self, KeyKind};
use crate::tables::LEDGER_TABLE;

pub use crate::tables::ARCHIVE_TABLE;

/// The final audit's report when neither `--audit-report` nor `--archive` names a folder.
pub const DEFAULT_AUDIT_REPORT: &str = "tidemark-contract-audit.csv";

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

/// What a contract run found and did.
#[derive(Debug, Clone, Serialize)]
pub struct ContractOutcome {
    /// What is (or would be) dropped (with a `[contract]` section: its first target).
    pub target: Target,
    /// With a `[contract]` section: every target, in the mapping's order (empty without one,
    /// and for `drop = "nothing"`).
    pub targets: Vec<Target>,
    /// With a `[contract]` section: the counter's value as the mapping gives it (an SQL
    /// expression, or `this.<column>`).
    pub value: Option<String>,
    /// With a `[contract]` section and `--execute`: each target's verified archive.
    pub target_archives: Vec<TargetArchive>,
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
    /// Set when `--execute` failed (the run's error is [`ContractFailed`], which carries
    /// this outcome): what failed, with the database's own detail.
    pub failure: Option<Failure>,
}

/// What made a `--execute` run fail.
#[derive(Debug, Clone, Serialize)]
pub struct Failure {
    /// The error and its causes, on one line.
    pub message: String,
    /// The database's detail of the error, where the engine gives one (PostgreSQL's DETAIL:
    /// for example the view that depends on the column).
    pub detail: Option<String>,
}

/// The error of a contract run that failed during `--execute`, with what the run had found
/// and done until then (verdict, final audit, archive, the failure) for the CLI to show. It
/// displays as the error itself and its source is that error, so the exit code and the
/// message are the error's.
#[derive(Debug)]
pub struct ContractFailed {
    /// What the run found and did before it failed ([`ContractOutcome::failure`] is set).
    pub outcome: Box<ContractOutcome>,
    error: anyhow::Error,
}

impl std::fmt::Display for ContractFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.error, f)
    }
}

impl std::error::Error for ContractFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.error.as_ref())
    }
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
    if mapping.contract.is_some() {
        return targets::run(conn, mapping, dialect, opts).await;
    }
    let ctx = SqlContext::new(mapping, dialect);
    if !crate::db::catalog::table_exists(conn, dialect, LEDGER_TABLE).await? {
        return Err(input_error(
            "the ledger table tidemark_ledger does not exist: run `tidemark expand`, `backfill` and `audit` first",
        ));
    }
    let mut target = target_of(mapping, opts);
    if crate::db::catalog::is_view(conn, dialect, &target.table).await? {
        return Err(input_error(format!(
            "the counter lives in {:?}, which is a view: contract drops a column of a table; map the table that holds the counter (the view's base table) to contract it",
            target.table
        )));
    }

    // Already dropped?
    let columns = crate::db::catalog::table_columns(conn, &ctx, &target.table).await?;
    let has_column = columns
        .iter()
        .any(|c| c.eq_ignore_ascii_case(&target.column));
    if !has_column {
        return match last_contract(conn, dialect, &target).await? {
            Some(id) => Ok(ContractOutcome {
                targets: Vec::new(),
                value: None,
                target_archives: Vec::new(),
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
                failure: None,
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
    if !crate::db::catalog::table_exists(conn, dialect, ARCHIVE_TABLE).await? {
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
    archive::refuse_ambiguous_keys(
        conn,
        &ctx,
        &keys.conv,
        Some(keys.subject.as_str()),
        &target.describe(),
    )
    .await?;
    let plan = plan(conn, &ctx, &target, opts).await?;
    notes.extend(plan.notes.iter().cloned());
    if !opts.execute {
        // The right to change the table, named in the dry run (issue 13; `--execute` stops on it).
        notes.extend(
            crate::db::privileges::missing_ddl_right(
                conn,
                dialect,
                &target.table,
                opts.drop_table,
                opts.lock_timeout,
            )
            .await?,
        );
    }
    let ddl = plan.lines(&target.drop_target());

    // The gate.
    let statements = statement_use(conn, &ctx, &target.table, &target.column, mapping).await;
    let audits = read_audits(conn, dialect, &mapping.fingerprint).await?;
    let mut verdict = gate::decide(
        &audits,
        &mapping.fingerprint,
        now_ms(),
        &opts.gate,
        &statements,
    );
    // Objects that depend on the column, found before any DDL (issue 13, row 5).
    let found = dependents(conn, &ctx, &target.table, &target.column).await?;
    dependents::apply(&mut verdict, &mut notes, &found, &target.column);
    let forced = |open: bool| -> Option<String> {
        if !open && opts.force {
            opts.reason.clone()
        } else {
            None
        }
    };
    let mut outcome = ContractOutcome {
        target: target.clone(),
        targets: Vec::new(),
        value: None,
        target_archives: Vec::new(),
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
        failure: None,
    };
    if !opts.execute || (!verdict.open && !opts.force) {
        return Ok(outcome);
    }

    // --execute: one runner per mapping, recorded in the ledger from here on.
    crate::db::privileges::for_contract(
        conn,
        dialect,
        &[(target.table.as_str(), opts.drop_table)],
        opts.lock_timeout,
    )
    .await?;
    let lock_name = runner_lock_name(&mapping.fingerprint);
    let runner = RunnerLock::acquire(conn, dialect, &lock_name).await?;
    let options_json = serde_json::to_value(options_record(opts))?;
    let result = async {
        let id = ledger::start(
            conn,
            dialect,
            Stage::Contract,
            &mapping.fingerprint,
            &options_json,
        )
        .await?;
        // Under the runner lock: an older contract run still `running` here was killed.
        ledger::abandon_stale(conn, dialect, Stage::Contract, &mapping.fingerprint, id).await?;
        outcome.ledger_id = Some(id);
        let result = execute::execute(
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
        let summary = execute::evidence(&outcome, &verdict, opts, result.as_ref().err())?;
        match &result {
            Ok(()) if outcome.executed => {
                ledger::finish(
                    conn,
                    dialect,
                    id,
                    RunStatus::Done,
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
                    RunStatus::Refused,
                    &summary,
                    Some(false),
                    None,
                    None,
                )
                .await?;
            }
            Err(_) => {
                let _ =
                    ledger::finish(
                    conn,
                    dialect,
                    id,
                    RunStatus::Failed,
                    &summary,
                    None,
                    None,
                    None,
                )
                .await;
            }
        }
        result
    }
    .await;
    let _ = runner.release(conn).await;
    conclude(outcome, verdict, result, dialect)
}

/// The ledger's record of a contract run's options (shared by the one-column contract and
/// the `[contract]` targets, where `--archive` and `--drop-table` are refused before this).
fn options_record(opts: &ContractOptions) -> ContractOptionsRecord {
    ContractOptionsRecord {
        execute: true,
        min_clean_audits: opts.gate.min_clean_audits,
        max_audit_age_ms: opts.gate.max_audit_age.as_millis() as u64,
        accept_tolerance: opts.gate.accept_tolerance,
        require_unused: opts.gate.require_unused,
        archive: opts.archive_csv.as_ref().map(|p| p.display().to_string()),
        drop_table: opts.drop_table,
        force: opts.force,
        reason: opts.reason.clone(),
        lock_timeout_ms: opts.lock_timeout.as_millis() as u64,
        lock_retries: opts.lock_retries,
        batch_size: opts.batch_size,
    }
}

/// The outcome of an `--execute` run once the runner lock is released: with its verdict, or,
/// when `result` failed, a [`ContractFailed`] that still carries the verdict, what was archived
/// and the database's own detail (issue 13 row 5: printed even on failure).
fn conclude(
    mut outcome: ContractOutcome,
    verdict: gate::Verdict,
    result: Result<()>,
    dialect: Dialect,
) -> Result<ContractOutcome> {
    outcome.verdict = Some(verdict);
    if let Err(error) = result {
        outcome.failure = Some(Failure {
            message: crate::error::describe(&error),
            detail: error
                .chain()
                .filter_map(|cause| cause.downcast_ref::<sqlx::Error>())
                .find_map(|e| dialect.ddl().error_detail(e)),
        });
        return Err(anyhow::Error::new(ContractFailed {
            outcome: Box::new(outcome),
            error,
        }));
    }
    Ok(outcome)
}

/// The runner lock's name of a contract on this mapping (the engine adds the database where
/// its named locks are server-wide: [`crate::dialect::RunnerLocks::runner_lock_name`]).
fn runner_lock_name(fingerprint: &str) -> String {
    format!("tidemark:contract:{}", &fingerprint[..16])
}

/// What the mapping says is dropped (the table-of-its-own test is made later).
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

/// The key columns of the counter rows and their types.
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
