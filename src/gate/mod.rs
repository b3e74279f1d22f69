//! The gate before the drop (semantics.md, "The gate before the drop"): whether the ledger's
//! audits prove that the stored counters can go.
//!
//! [`decide`] is a pure function over the audit runs of the ledger, the current time and the
//! options, so every rule is unit-tested without a database. The rules (issue "contract"):
//!
//! - only finished audits (`status = done`) carry a verdict; a run that errored or is still
//!   running counts neither way;
//! - only audits of the mapping in force (same fingerprint) count; audits of other mappings are
//!   ignored (a database may hold several counters, each with its own mapping);
//! - walking from the newest audit of this mapping back, every audit must have passed: the
//!   first failure ends the chain ("no audit after them has failed");
//! - a passing audit that ran with a tolerance above zero (any of `max_drift_rows`,
//!   `max_drift_ratio`, `max_abs_drift`, or a `--cap`, which hides drift above it) counts only
//!   with `--accept-tolerance`; without it, it ends the chain like a failure would;
//! - the chain must hold at least `--min-clean-audits` audits and its newest must be no older
//!   than `--max-audit-age` (measured from the audit's start: its snapshots are at least that
//!   old);
//! - a finished audit whose options (its tolerance) or summary cannot be read from the ledger
//!   (a missing or renamed key) closes the gate and says why: unknown evidence is never read
//!   as a zero tolerance (issue 13, row 8);
//! - an audit that checked only some limits (a tolerance option given alone: the others are
//!   not checked) has a tolerance above zero;
//! - an audit that found the newest backfill of its mapping unfinished (never run, failed,
//!   stopped, still running: its summary's `backfill`) ends the chain like a failure, whatever
//!   its verdict: its drift included the members the backfill had not reached (issue 25,
//!   row 10); audits recorded before tidemark kept that state are read as before;
//! - with `--require-unused`, the server's statement statistics must show that no statement
//!   still reads or writes the counter column; statistics that are unavailable close the gate
//!   (an absence of evidence is not evidence of absence).

use serde::Serialize;
use std::time::Duration;

mod evidence;
mod statements;

pub use crate::ledger::Tolerance;
pub use evidence::{read_audits, AuditRecord};
pub use statements::{db_message, statement_use, statement_uses, StatementSeen, StatementUse};

/// The gate's options.
#[derive(Debug, Clone, Serialize)]
pub struct GateOptions {
    /// `--min-clean-audits`: consecutive passing audits needed (at least 1).
    pub min_clean_audits: u32,
    /// `--max-audit-age`: how old the newest of them may be.
    #[serde(serialize_with = "ser_duration_ms")]
    pub max_audit_age: Duration,
    /// `--accept-tolerance`: passing audits with a tolerance above zero count.
    pub accept_tolerance: bool,
    /// `--require-unused`: statement statistics must show the column unused.
    pub require_unused: bool,
}

fn ser_duration_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_millis() as u64)
}

impl Default for GateOptions {
    fn default() -> Self {
        GateOptions {
            min_clean_audits: 1,
            max_audit_age: Duration::from_secs(24 * 3600),
            accept_tolerance: false,
            require_unused: false,
        }
    }
}

/// Why the gate is closed: one value per reason, every reason listed.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reason {
    /// The ledger holds no finished audit at all.
    NoAudit,
    /// No finished audit of this mapping; there are audits of other mappings.
    OtherMapping {
        /// How many finished audits of other mappings the ledger holds.
        audits: usize,
        /// The newest of them.
        newest_id: i64,
        /// Its mapping fingerprint.
        fingerprint: String,
    },
    /// An audit newer than any clean chain failed.
    AuditFailed {
        /// The failed audit.
        id: i64,
        /// The limits it crossed.
        crossed: Vec<String>,
    },
    /// An audit ran while the newest backfill of its mapping had not finished (never ran,
    /// failed, stopped, still running): the members it had not reached had no watermark, so
    /// its drift is not the counters' own, and it does not count (issue 25, row 10).
    BackfillUnfinished {
        /// The audit (None: the final audit, when it recorded no id).
        id: Option<i64>,
        /// The backfill run (None: none had run).
        backfill: Option<i64>,
        /// Where it stood, in words (`never ran`, `(run #3) failed`, …).
        state: String,
    },
    /// A passing audit ran with a tolerance above zero, and `--accept-tolerance` was not given.
    ToleranceNotAccepted {
        /// The audit.
        id: i64,
        /// Its tolerance in words.
        tolerance: String,
    },
    /// Fewer consecutive clean audits than `--min-clean-audits`.
    TooFewCleanAudits {
        /// How many there are.
        have: usize,
        /// How many were asked for.
        want: u32,
    },
    /// The newest clean audit is older than `--max-audit-age`.
    AuditTooOld {
        /// The audit.
        id: i64,
        /// Its age, milliseconds.
        age_ms: i64,
        /// The limit, milliseconds.
        max_ms: i64,
    },
    /// `--require-unused`: statements still use the counter column.
    ColumnStillUsed {
        /// How many statements.
        statements: usize,
        /// Where they were seen.
        source: String,
    },
    /// `--require-unused`: the server keeps no statement statistics to prove it.
    UsageUnknown {
        /// Why the statistics are not available.
        reason: String,
    },
    /// A finished audit whose options or summary in the ledger cannot be read (a missing or
    /// renamed key): its evidence is unknown, so the gate closes (issue 13, row 8).
    EvidenceUnreadable {
        /// The audit.
        id: i64,
        /// What cannot be read.
        why: String,
    },
    /// An object depends on the counter column and would make the drop fail, or be left
    /// broken by it (a view, a rule, a trigger, another table's foreign key): found in the
    /// catalog before any DDL (issue 13, row 5).
    DependentObject {
        /// What it is (`view`, `trigger`, `foreign key`…).
        object: String,
        /// Its name (`public.unread_totals`).
        name: String,
        /// The counter column.
        column: String,
    },
    /// `--execute`: the final audit inside the gate did not pass.
    FinalAuditFailed {
        /// The final audit's ledger id.
        id: Option<i64>,
        /// The limits it crossed.
        crossed: Vec<String>,
    },
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::NoAudit => write!(
                f,
                "no audit in the ledger: run `tidemark audit` first"
            ),
            Reason::OtherMapping {
                audits,
                newest_id,
                fingerprint,
            } => write!(
                f,
                "no audit of the mapping in force; the ledger's {audits} audit(s) (newest #{newest_id}, mapping {}) were run with another mapping and do not count",
                &fingerprint[..fingerprint.len().min(12)]
            ),
            Reason::AuditFailed { id, crossed } => {
                write!(f, "audit #{id} failed")?;
                if !crossed.is_empty() {
                    write!(f, " ({})", crossed.join("; "))?;
                }
                write!(f, ": no audit after the clean ones may have failed")
            }
            Reason::BackfillUnfinished { id, backfill, state } => {
                match id {
                    Some(id) => write!(f, "audit #{id}")?,
                    None => write!(f, "the final audit")?,
                }
                match backfill {
                    None => write!(f, " ran before any backfill of this mapping")?,
                    Some(_) => write!(
                        f,
                        " ran while the last backfill of this mapping {state}"
                    )?,
                }
                write!(
                    f,
                    ": the members it had not reached had no watermark, so the audit does not count; run `tidemark backfill`, then audit again"
                )
            }
            Reason::ToleranceNotAccepted { id, tolerance } => write!(
                f,
                "audit #{id} passed only within a tolerance ({tolerance}): it counts only with --accept-tolerance"
            ),
            Reason::TooFewCleanAudits { have, want } => write!(
                f,
                "{have} consecutive clean audit(s) of this mapping; --min-clean-audits asks for {want}"
            ),
            Reason::AuditTooOld { id, age_ms, max_ms } => write!(
                f,
                "the newest clean audit #{id} is {} old, older than --max-audit-age {}",
                human_ms(*age_ms),
                human_ms(*max_ms)
            ),
            Reason::ColumnStillUsed { statements, source } => write!(
                f,
                "--require-unused: {statements} statement(s) in {source} still read or write the counter column"
            ),
            Reason::UsageUnknown { reason } => write!(
                f,
                "--require-unused: cannot show that the column is unused ({reason})"
            ),
            Reason::EvidenceUnreadable { id, why } => write!(
                f,
                "audit #{id}: its evidence in the ledger cannot be read ({why}): the gate does not open on it"
            ),
            Reason::DependentObject {
                object,
                name,
                column,
            } => write!(
                f,
                "{object} {name} depends on {column}: drop or change it first"
            ),
            Reason::FinalAuditFailed { id, crossed } => {
                write!(f, "the final audit")?;
                if let Some(id) = id {
                    write!(f, " #{id}")?;
                }
                write!(f, " inside the gate did not pass")?;
                if !crossed.is_empty() {
                    write!(f, " ({})", crossed.join("; "))?;
                }
                Ok(())
            }
        }
    }
}

/// A duration in milliseconds as humantime prints it, to the second.
pub fn human_ms(ms: i64) -> String {
    let secs = (ms.max(0) as u64).div_ceil(1000);
    if secs == 0 {
        return "0s".to_string();
    }
    humantime::format_duration(Duration::from_secs(secs)).to_string()
}

/// The gate's decision and the evidence behind it.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// Whether the gate is open.
    pub open: bool,
    /// Why it is closed (empty when open).
    pub reasons: Vec<Reason>,
    /// The clean audits it relied on (or would rely on), newest first, ledger ids.
    pub relied_on: Vec<i64>,
    /// The newest clean audit (its tolerance is the final audit's).
    pub newest_clean: Option<AuditRecord>,
    /// What the statement statistics say.
    pub statements: StatementUse,
    /// Remarks that do not decide anything (audits that did not finish, …).
    pub notes: Vec<String>,
}

/// Decides the gate from the ledger's audit runs (any order, any mapping), the time `now_ms`
/// (milliseconds since the epoch), the mapping fingerprint in force and the options.
pub fn decide(
    audits: &[AuditRecord],
    fingerprint: &str,
    now_ms: i64,
    opts: &GateOptions,
    statements: &StatementUse,
) -> Verdict {
    let mut sorted: Vec<&AuditRecord> = audits.iter().collect();
    sorted.sort_by_key(|a| std::cmp::Reverse(a.id));
    let mut reasons = Vec::new();
    let mut notes = Vec::new();

    let ours: Vec<&AuditRecord> = sorted
        .iter()
        .copied()
        .filter(|a| a.fingerprint == fingerprint)
        .collect();
    let others: Vec<&AuditRecord> = sorted
        .iter()
        .copied()
        .filter(|a| a.fingerprint != fingerprint && a.has_verdict())
        .collect();

    let mut chain: Vec<&AuditRecord> = Vec::new();
    // What ended the chain: a reason only when the chain is then too short.
    let mut stop: Option<Reason> = None;
    let mut stopped = false;
    let mut verdicts = 0usize;
    for a in &ours {
        if !a.has_verdict() {
            if !stopped {
                notes.push(format!(
                    "audit #{} did not finish (status {}): it counts neither way",
                    a.id, a.status
                ));
            }
            continue;
        }
        verdicts += 1;
        if stopped {
            continue;
        }
        if let Some(why) = &a.unreadable {
            reasons.push(Reason::EvidenceUnreadable {
                id: a.id,
                why: why.clone(),
            });
            stopped = true;
            continue;
        }
        if let Some(b) = a.backfill.as_ref().filter(|b| !b.finished) {
            stop = Some(Reason::BackfillUnfinished {
                id: Some(a.id),
                backfill: b.id,
                state: b.describe(),
            });
            stopped = true;
        } else if a.passed != Some(true) {
            stop = Some(Reason::AuditFailed {
                id: a.id,
                crossed: a.crossed.clone(),
            });
            stopped = true;
        } else if !a.tolerance.is_zero() && !opts.accept_tolerance {
            stop = Some(Reason::ToleranceNotAccepted {
                id: a.id,
                tolerance: a.tolerance.describe(),
            });
            stopped = true;
        } else {
            chain.push(a);
        }
    }

    if verdicts == 0 {
        match others.first() {
            Some(newest) => reasons.push(Reason::OtherMapping {
                audits: others.len(),
                newest_id: newest.id,
                fingerprint: newest.fingerprint.clone(),
            }),
            None => reasons.push(Reason::NoAudit),
        }
    } else {
        let want = opts.min_clean_audits.max(1);
        if chain.len() < want as usize {
            reasons.extend(stop);
            reasons.push(Reason::TooFewCleanAudits {
                have: chain.len(),
                want,
            });
        }
        if let Some(newest) = chain.first() {
            let age_ms = now_ms - newest.started_ms;
            let max_ms = opts.max_audit_age.as_millis() as i64;
            if age_ms > max_ms {
                reasons.push(Reason::AuditTooOld {
                    id: newest.id,
                    age_ms,
                    max_ms,
                });
            }
        }
        if !others.is_empty() {
            notes.push(format!(
                "{} audit(s) of other mappings in the ledger were not considered",
                others.len()
            ));
        }
    }

    if opts.require_unused {
        match statements {
            StatementUse::Unused { .. } => {}
            StatementUse::Used { source, statements } => reasons.push(Reason::ColumnStillUsed {
                statements: statements.len(),
                source: source.clone(),
            }),
            StatementUse::Unavailable { reason } => reasons.push(Reason::UsageUnknown {
                reason: reason.clone(),
            }),
        }
    }

    // The chain the gate relies on: the newest `want` clean audits.
    let want = opts.min_clean_audits.max(1) as usize;
    Verdict {
        open: reasons.is_empty(),
        reasons,
        relied_on: chain.iter().take(want).map(|a| a.id).collect(),
        newest_clean: chain.first().map(|a| (*a).clone()),
        statements: statements.clone(),
        notes,
    }
}

#[cfg(test)]
mod tests;
