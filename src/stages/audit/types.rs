//! The audit's data: its options, the summary it records and returns, an example row, and
//! what every batch of one run shares ([`BatchRun`]). A leaf of the audit folder: the run
//! ([`super::run`]), the batch loop, the row decoding and the summary checks all read it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::dialect::SqlContext;
use crate::ledger::records::{BackfillState, Checked};
use crate::mapping::Shape;
use crate::progress::Reporter;
use crate::schema::KeyKind;
use crate::stages::parallel::Jobs;
use crate::stages::{Key, Scope};

/// Options of an audit run.
#[derive(Debug, Clone)]
pub struct AuditOptions {
    /// `--cap N`: compare as "N+" (counting stops at N+1).
    pub cap: Option<i64>,
    /// Where the CSV report goes.
    pub report: PathBuf,
    /// `--report-mode`: the report's permission bits (None: those of the file it replaces,
    /// or 0600 for a new one).
    pub report_mode: Option<u32>,
    /// `--spreadsheet-safe`: text key cells that a spreadsheet would run as a formula get a
    /// leading `'` ([`crate::report::text_cell`]); without it the report holds the exact keys.
    pub spreadsheet_safe: bool,
    /// Rows per batch (counter rows, or messages for per_message), whole conversations.
    pub batch_size: u64,
    /// Record the run in the ledger (false: `--no-ledger`, writes nothing to the database).
    pub ledger: bool,
    /// Tolerance: drifting rows allowed (default 0).
    pub max_drift_rows: u64,
    /// Tolerance: drifting rows / rows checked allowed (default 0).
    pub max_drift_ratio: f64,
    /// Tolerance: largest |drift| allowed (default 0; NULL counters count as drifting rows).
    pub max_abs_drift: i64,
    /// Which of the three limits above are checked (interface.md: all when no tolerance
    /// option is given; once any is given, only those given).
    pub checked: Checked,
    /// Accept an audit whose scope checks no row (`--allow-empty`); without it such an audit
    /// is an error (exit 2), so a mistyped range in a cron job does not stay green.
    pub allow_empty: bool,
    /// No progress output.
    pub quiet: bool,
    /// Where progress goes (default: nowhere; the command line shows a bar).
    pub progress: Reporter,
    /// Stop after the batch that crosses this much time; the run is recorded as incomplete
    /// (exit 4) and `resume` continues it.
    pub run_time: Option<Duration>,
    /// Continue the newest incomplete audit of this mapping with the same options.
    pub resume: bool,
    /// Write a Prometheus text-format file (node_exporter's textfile collector) at the end.
    pub metrics_file: Option<PathBuf>,
    /// Also write every drifting row into `tidemark_drift_rows` with the run id.
    pub store_rows: bool,
    /// `--conversations FROM..TO` and `--sample`.
    pub scope: Scope,
    /// How the scope was given, for the summary and the ledger (e.g. "conversations 1..500").
    pub scope_description: Vec<String>,
    /// The longest lock wait of one statement.
    pub lock_timeout: Duration,
    /// Leave out conversations whose newest message is younger than this (writes still in
    /// flight in the application are not drift). Needs `messages.created_at`.
    pub min_age: Option<Duration>,
    /// Set by the command line on Ctrl-C or SIGTERM: stop after the current batch, as
    /// `--run-time` does (the rows so far kept in `REPORT.partial`, the run recorded as
    /// incomplete, exit 4; `--resume` continues it).
    pub stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Throttle (issue 30: an audit run back to back doubled the application's p99): a pause
    /// after every batch, the session kept alive ([`crate::stages::keepalive`]).
    pub pause_between_batches: Duration,
    /// Throttle: wait before the next batch while this file exists (`--pause-file`).
    pub pause_file: Option<PathBuf>,
    /// The replica the reads run on (`--read-database`, issue 31) with its lag when the run
    /// started, for the summary; None when they run on the primary. The connection itself is
    /// handed to [`super::run_reading`].
    pub replica: Option<crate::db::replica::ReplicaLag>,
    /// `--jobs N`: N batches at once on N connections of their own
    /// ([`crate::stages::parallel`]); the report and the summary are those of one job, row
    /// for row (a batch's rows wait until every earlier batch is written). With
    /// `--pause-between-batches` each connection rests after each of its batches.
    pub jobs: Jobs,
    /// `--audit-form`: the form of the audit statement (issue 30; default: chosen per batch,
    /// [`super::form::choose`]). Every form gives the same report.
    pub form: super::form::AuditForm,
}

impl Default for AuditOptions {
    fn default() -> Self {
        AuditOptions {
            cap: None,
            report: PathBuf::from("tidemark-drift.csv"),
            report_mode: None,
            spreadsheet_safe: false,
            batch_size: crate::stages::batch::DEFAULT_BATCH_SIZE,
            ledger: true,
            max_drift_rows: 0,
            max_drift_ratio: 0.0,
            max_abs_drift: 0,
            checked: Checked::default(),
            allow_empty: false,
            quiet: true,
            progress: Reporter::default(),
            run_time: None,
            resume: false,
            metrics_file: None,
            store_rows: false,
            scope: Scope::default(),
            scope_description: Vec::new(),
            lock_timeout: Duration::from_secs(2),
            min_age: None,
            stop: None,
            pause_between_batches: Duration::ZERO,
            pause_file: None,
            replica: None,
            jobs: Jobs::one(),
            form: super::form::AuditForm::Auto,
        }
    }
}

/// An example row of a class, for the human summary.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Example {
    /// Conversation key.
    pub conversation: String,
    /// User key (per_member) or message position (per_message).
    pub subject: String,
    /// Stored value (clamped under a cap).
    pub stored: Option<i64>,
    /// Recomputed value (clamped under a cap).
    pub recomputed: i64,
}

/// How many conversations [`AuditSummary::top_conversations`] keeps.
pub const TOP_CONVERSATIONS: usize = 10;

/// One bucket of the |drift| distribution: the drifting rows whose |drift| lies in
/// `from..=to` (`from` = `to` / 2 + 1 and `to` a power of two; the first bucket is 1..=1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriftBucket {
    /// Smallest |drift| of the bucket.
    pub from: u64,
    /// Largest |drift| of the bucket (a power of two).
    pub to: u64,
    /// Drifting rows in it.
    pub rows: u64,
}

impl DriftBucket {
    /// The bucket holding `abs` (at least 1): the smallest power of two `to` >= `abs`.
    pub fn of(abs: u64) -> DriftBucket {
        let to = abs.max(1).checked_next_power_of_two().unwrap_or(1 << 63);
        DriftBucket {
            from: to / 2 + 1,
            to,
            rows: 0,
        }
    }
}

/// A conversation's drift, for [`AuditSummary::top_conversations`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConversationDrift {
    /// Conversation key, as text.
    pub conversation: String,
    /// Its drifting rows.
    pub drifting_rows: u64,
    /// Sum of their |drift| (NULL counters add nothing), saturated at `i64::MAX`.
    pub sum_abs_drift: i64,
}

/// The audit's result (what the ledger, `--format json` and the exit code rest on).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct AuditSummary {
    /// Shape audited.
    pub shape: Shape,
    /// Rows compared (counter rows, or messages).
    pub rows_checked: u64,
    /// Rows whose stored value differs from the recomputed one (NULL counters included).
    pub drifting_rows: u64,
    /// Sum of |drift| (rows checked in full; NULL counters add nothing), saturated at
    /// `i64::MAX`: a sum that would pass it reads `i64::MAX`, never a wrapped number.
    pub sum_abs_drift: i64,
    /// Largest |drift|, saturated at `i64::MAX` (a stored `i64::MIN` drifts by more).
    pub max_abs_drift: i64,
    /// Drifting rows per class, every class listed.
    pub by_class: BTreeMap<String, u64>,
    /// Up to 3 example rows per class.
    pub examples: BTreeMap<String, Vec<Example>>,
    /// The distribution of |drift| over the drifting rows that have one (every class but
    /// `null_counter`): the non-empty buckets of powers of two (1, 2, 3-4, 5-8, …), smallest
    /// first ([`DriftBucket`]); their rows add up to `drifting_rows` minus the NULL counters.
    pub abs_drift_buckets: Vec<DriftBucket>,
    /// The conversations with the most drifting rows, at most [`TOP_CONVERSATIONS`], most
    /// first (ties: the larger sum of |drift|, then the earlier conversation in batch order).
    pub top_conversations: Vec<ConversationDrift>,
    /// `--cap`, if given.
    pub cap: Option<i64>,
    /// Tolerance limits crossed (empty when the audit passed).
    pub crossed: Vec<String>,
    /// Whether drift is within tolerance.
    pub passed: bool,
    /// The report's path.
    pub report: String,
    /// The report's SHA-256 (hex).
    pub report_sha256: String,
    /// Batches run.
    pub batches: u64,
    /// Wall time, milliseconds.
    pub duration_ms: u64,
    /// The ledger run id (None with `--no-ledger`).
    pub ledger_id: Option<i64>,
    /// Whether every row in scope was covered (false: stopped at `--run-time`).
    pub complete: bool,
    /// Parts the run took (1, plus one per `--resume`).
    pub parts: u64,
    /// The scope, when not the whole table (`--conversations`, `--sample`).
    pub scope: Vec<String>,
    /// Conversations left out by `--min-age` (their newest message was too young).
    pub left_out_recent: u64,
    /// The last conversation covered (the checkpoint), for an incomplete run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<Key>,
    /// What stopped an incomplete run: `"signal"` (Ctrl-C or SIGTERM) or `"run_time"`
    /// (`--run-time` reached); None for a complete run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<String>,
    /// Notes for the reader: the key columns whose collations differ (issue 25,
    /// [`crate::schema::KeyCollations::notice`]) and, after the batches, a drift that looks
    /// like a mapping error (issue 24, `summary::mapping_error_hint`); empty when there is
    /// nothing to say.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<String>,
    /// Members with no watermark (issue 25, row 10): per member, the rows checked whose
    /// (conversation, user) has no row in the watermark table; per message, the active members
    /// of the conversations audited with none. Counted in each batch's snapshot. After a
    /// finished backfill, the members it found no evidence for.
    pub members_without_watermark: u64,
    /// The newest backfill of this mapping as the audit found it at its start (issue 25,
    /// row 10); None when the ledger cannot tell (no ledger table, or `--no-ledger` without
    /// the right to read it). When it did not finish, the drift includes the members it has
    /// not reached, the summary says so, and the gate does not count the audit.
    pub backfill: Option<BackfillState>,
    /// Each counter's own numbers when the mapping has several (issue 22), in the mapping's
    /// order; empty (and left out of the JSON) for one counter. The run's fields above are
    /// then their totals (`rows_checked`: counter values compared, each member once per
    /// counter), and the run passes only when every counter does.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub counters: Vec<CounterSummary>,
    /// The streaming replica the reads ran on (`--read-database`, issue 31), with its lag
    /// when the run (its last part) started; None (left out of the JSON) on the primary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica: Option<crate::db::replica::ReplicaLag>,
}

/// One counter's audit when the mapping has several (issue 22): the same numbers as the
/// run's, for its rows alone, and its verdict against the run's tolerance.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct CounterSummary {
    /// `[[counter]] name`.
    pub name: String,
    /// The column (or `value`) the counter reads, as the mapping gives it.
    pub value: String,
    /// Whether it is a mention counter (`mentions`).
    pub mentions: bool,
    /// Counter rows compared.
    pub rows_checked: u64,
    /// Its drifting rows (NULL counters included).
    pub drifting_rows: u64,
    /// Sum of |drift|, saturated at `i64::MAX`.
    pub sum_abs_drift: i64,
    /// Largest |drift|, saturated at `i64::MAX`.
    pub max_abs_drift: i64,
    /// Drifting rows per class, every class listed.
    pub by_class: BTreeMap<String, u64>,
    /// Up to 3 example rows per class.
    pub examples: BTreeMap<String, Vec<Example>>,
    /// Tolerance limits crossed by this counter (empty when it passed).
    pub crossed: Vec<String>,
    /// Whether this counter's drift is within tolerance.
    pub passed: bool,
}

impl AuditSummary {
    /// The backfill this audit found unfinished (never run, failed, stopped, still running),
    /// if it did: then its drift is not the counters' own, and the gate does not count it.
    pub fn backfill_unfinished(&self) -> Option<&BackfillState> {
        self.backfill.as_ref().filter(|b| !b.finished)
    }

    /// The warning about the backfill this audit found unfinished, without its `warning: `
    /// prefix; None when it is finished. `next`, the advice (`run `tidemark backfill …`, then
    /// audit again`), follows the state. With members lacking a watermark: how many, and that
    /// the drift includes theirs (issue 25 row 10). With none (issue 29 row 18, where before it
    /// said "0 members have no watermark … the drift above includes theirs"): that no audited
    /// member lacks one, and the state, since the gate still does not count such an audit.
    pub fn backfill_warning(&self, next: Option<&str>) -> Option<String> {
        let b = self.backfill_unfinished()?;
        let state = match b.id {
            None => "no backfill of this mapping has run".to_string(),
            Some(_) => format!("the last backfill of this mapping {}", b.describe()),
        };
        let next = next.map(|n| format!(": {n}")).unwrap_or_default();
        let gate = "(the contract gate does not count this audit)";
        Some(match self.members_without_watermark {
            0 => format!("no audited member lacks a watermark, but {state}{next} {gate}"),
            n => format!(
                "{n} members have no watermark: {state}; the drift above includes theirs{next} {gate}"
            ),
        })
    }
}

/// The outcome of [`run`].
#[derive(Debug, Clone)]
pub struct AuditOutcome {
    /// The summary (of every part of a resumed run).
    pub summary: AuditSummary,
}

/// What every batch of one audit run shares: the SQL context, the shape, the options and the
/// kinds of the two key columns (how keys are decoded from the rows).
#[derive(Clone, Copy)]
pub struct BatchRun<'a> {
    /// The mapping rendered for the dialect.
    pub ctx: &'a SqlContext,
    /// The counter's shape.
    pub shape: Shape,
    /// The run's options.
    pub opts: &'a AuditOptions,
    /// The user key's kind.
    pub user_kind: KeyKind,
    /// The conversation key's kind.
    pub conv_kind: KeyKind,
    /// Each counter's name and SQL context (its view of the mapping:
    /// [`crate::mapping::Mapping::per_counter`]), in the mapping's order; one for a mapping
    /// of one counter. `ctx` is the first's.
    pub counters: &'a [CounterRun],
}

/// One counter an audit batch checks: its name (empty when the mapping has one counter) and
/// its statements' context.
pub struct CounterRun {
    /// `[[counter]] name`.
    pub name: String,
    /// The mapping's view of this counter, rendered for the dialect.
    pub ctx: SqlContext,
}
