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
//! - with `--require-unused`, the server's statement statistics must show that no statement
//!   still reads or writes the counter column; statistics that are unavailable close the gate
//!   (an absence of evidence is not evidence of absence).

use serde::Serialize;
use std::time::Duration;

/// The tolerance an audit ran with (its `options` JSON in the ledger).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Tolerance {
    /// `--max-drift-rows`.
    pub max_drift_rows: u64,
    /// `--max-drift-ratio`.
    pub max_drift_ratio: f64,
    /// `--max-abs-drift`.
    pub max_abs_drift: i64,
    /// `--cap`: counts compared as "N+" (drift above the cap is not seen).
    pub cap: Option<i64>,
}

impl Tolerance {
    /// Reads the tolerance from an audit's `options` JSON (missing keys are zero).
    pub fn from_options(options: &serde_json::Value) -> Tolerance {
        Tolerance {
            max_drift_rows: options["max_drift_rows"].as_u64().unwrap_or(0),
            max_drift_ratio: options["max_drift_ratio"].as_f64().unwrap_or(0.0),
            max_abs_drift: options["max_abs_drift"].as_i64().unwrap_or(0),
            cap: options["cap"].as_i64(),
        }
    }

    /// Whether the audit allowed no drift at all and saw every value in full.
    pub fn is_zero(&self) -> bool {
        self.max_drift_rows == 0
            && self.max_drift_ratio == 0.0
            && self.max_abs_drift == 0
            && self.cap.is_none()
    }

    /// The tolerance in words, for reasons and notes (`zero` when there is none).
    pub fn describe(&self) -> String {
        if self.is_zero() {
            return "zero".to_string();
        }
        let mut parts = Vec::new();
        if self.max_drift_rows > 0 {
            parts.push(format!("--max-drift-rows {}", self.max_drift_rows));
        }
        if self.max_drift_ratio > 0.0 {
            parts.push(format!("--max-drift-ratio {}", self.max_drift_ratio));
        }
        if self.max_abs_drift > 0 {
            parts.push(format!("--max-abs-drift {}", self.max_abs_drift));
        }
        if let Some(cap) = self.cap {
            parts.push(format!("--cap {cap}"));
        }
        parts.join(", ")
    }
}

/// One audit run of the ledger, as the gate sees it.
#[derive(Debug, Clone, Serialize)]
pub struct AuditRecord {
    /// Ledger run id.
    pub id: i64,
    /// `done`, `failed` (the run errored), `running`…
    pub status: String,
    /// Start, milliseconds since the epoch.
    pub started_ms: i64,
    /// End, milliseconds since the epoch.
    pub finished_ms: Option<i64>,
    /// The mapping fingerprint the audit ran with.
    pub fingerprint: String,
    /// Whether drift was within the audit's tolerance (None: no verdict recorded).
    pub passed: Option<bool>,
    /// The tolerance it ran with.
    pub tolerance: Tolerance,
    /// The tolerance limits it crossed (from its summary), for the reasons.
    pub crossed: Vec<String>,
    /// Its report's SHA-256.
    pub report_sha256: Option<String>,
}

impl AuditRecord {
    /// Whether the run finished with a verdict (pass or fail).
    pub fn has_verdict(&self) -> bool {
        self.status == "done" && self.passed.is_some()
    }
}

/// What the server's statement statistics say about the counter column.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "finding", rename_all = "snake_case")]
pub enum StatementUse {
    /// The server keeps no statement statistics (or tidemark cannot read them).
    Unavailable {
        /// Why, in words (for example "pg_stat_statements is not installed").
        reason: String,
    },
    /// Statistics are kept and no statement mentions the counter column.
    Unused {
        /// Where tidemark looked (`pg_stat_statements`, `performance_schema…`).
        source: String,
    },
    /// Statements that still read or write the counter column.
    Used {
        /// Where tidemark looked.
        source: String,
        /// The statements (normalised text) and how often each ran.
        statements: Vec<StatementSeen>,
    },
}

impl StatementUse {
    /// The finding in one line.
    pub fn describe(&self) -> String {
        match self {
            StatementUse::Unavailable { reason } => {
                format!("statement statistics not available: {reason}")
            }
            StatementUse::Unused { source } => {
                format!("no statement in {source} reads or writes the counter column")
            }
            StatementUse::Used { source, statements } => format!(
                "{} statement(s) in {source} still read or write the counter column",
                statements.len()
            ),
        }
    }
}

/// A statement seen in the server's statistics.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatementSeen {
    /// Its normalised text (constants replaced), cut to 300 characters.
    pub text: String,
    /// How many times it ran since the statistics were reset.
    pub calls: i64,
}

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
        if a.passed != Some(true) {
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

/// Whether a statement's text (as the server's statistics normalise it) reads or writes
/// `column` of `table`: both names appear as whole identifiers (bare or quoted with `"` or
/// `` ` ``, case-insensitive; a schema-qualified table matches on its last part). A statement
/// that is tidemark's own (it names `tidemark_` tables, the watermark table `exclude`, or the
/// statistics views) does not count.
pub fn statement_uses(text: &str, table: &str, column: &str, exclude: &[&str]) -> bool {
    let idents = crate::dialect::identifiers(text);
    let has = |name: &str| idents.iter().any(|i| i.eq_ignore_ascii_case(name));
    let table_name = table.rsplit('.').next().unwrap_or(table);
    if !has(column) || !has(table_name) {
        return false;
    }
    let own = idents.iter().any(|i| {
        let l = i.to_ascii_lowercase();
        l.starts_with("tidemark_")
            || l == "pg_stat_statements"
            || l == "events_statements_summary_by_digest"
            || exclude.iter().any(|e| {
                let e = e.rsplit('.').next().unwrap_or(e);
                l.eq_ignore_ascii_case(e)
            })
    });
    !own
}

#[cfg(test)]
mod tests {
    use super::*;

    const FP: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const OTHER: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    const HOUR: i64 = 3_600_000;
    const NOW: i64 = 1_000 * HOUR;

    fn audit(id: i64, age_h: i64, passed: bool) -> AuditRecord {
        AuditRecord {
            id,
            status: "done".into(),
            started_ms: NOW - age_h * HOUR,
            finished_ms: Some(NOW - age_h * HOUR + 1000),
            fingerprint: FP.into(),
            passed: Some(passed),
            tolerance: Tolerance::default(),
            crossed: if passed {
                vec![]
            } else {
                vec!["drifting rows 3 > --max-drift-rows 0".into()]
            },
            report_sha256: Some("00".into()),
        }
    }

    fn no_stats() -> StatementUse {
        StatementUse::Unavailable {
            reason: "none".into(),
        }
    }

    fn run(audits: &[AuditRecord], opts: &GateOptions) -> Verdict {
        decide(audits, FP, NOW, opts, &no_stats())
    }

    #[test]
    fn no_audit_closes() {
        let v = run(&[], &GateOptions::default());
        assert!(!v.open);
        assert_eq!(v.reasons, vec![Reason::NoAudit]);
        assert!(v.relied_on.is_empty());
    }

    #[test]
    fn one_recent_clean_audit_opens_by_default() {
        let v = run(&[audit(1, 2, true)], &GateOptions::default());
        assert!(v.open, "{:?}", v.reasons);
        assert_eq!(v.relied_on, vec![1]);
        assert_eq!(v.newest_clean.unwrap().id, 1);
    }

    #[test]
    fn failed_audit_after_clean_ones_closes() {
        let audits = [audit(1, 5, true), audit(2, 4, true), audit(3, 1, false)];
        let v = run(&audits, &GateOptions::default());
        assert!(!v.open);
        assert!(matches!(v.reasons[0], Reason::AuditFailed { id: 3, .. }));
        assert!(v
            .reasons
            .contains(&Reason::TooFewCleanAudits { have: 0, want: 1 }));
        // A clean audit after the failure opens it again.
        let mut audits = audits.to_vec();
        audits.push(audit(4, 0, true));
        let v = run(&audits, &GateOptions::default());
        assert!(v.open, "{:?}", v.reasons);
        assert_eq!(v.relied_on, vec![4]);
    }

    #[test]
    fn chain_stops_at_a_failure() {
        let audits = [audit(1, 5, true), audit(2, 4, false), audit(3, 1, true)];
        let opts = GateOptions {
            min_clean_audits: 2,
            ..Default::default()
        };
        let v = run(&audits, &opts);
        assert!(!v.open);
        assert_eq!(
            v.reasons,
            vec![
                Reason::AuditFailed {
                    id: 2,
                    crossed: audits[1].crossed.clone()
                },
                Reason::TooFewCleanAudits { have: 1, want: 2 }
            ]
        );
    }

    #[test]
    fn old_audit_closes() {
        let v = run(&[audit(1, 25, true)], &GateOptions::default());
        assert!(!v.open);
        assert!(matches!(
            v.reasons[..],
            [Reason::AuditTooOld {
                id: 1,
                max_ms: 86_400_000,
                ..
            }]
        ));
        let opts = GateOptions {
            max_audit_age: Duration::from_secs(48 * 3600),
            ..Default::default()
        };
        assert!(run(&[audit(1, 25, true)], &opts).open);
        // Only the newest must be fresh.
        let v = run(
            &[audit(1, 100, true), audit(2, 1, true)],
            &GateOptions {
                min_clean_audits: 2,
                ..Default::default()
            },
        );
        assert!(v.open, "{:?}", v.reasons);
        assert_eq!(v.relied_on, vec![2, 1]);
    }

    #[test]
    fn other_mapping_does_not_count() {
        let mut a = audit(1, 1, true);
        a.fingerprint = OTHER.into();
        let v = run(&[a.clone()], &GateOptions::default());
        assert!(!v.open);
        assert!(matches!(
            &v.reasons[..],
            [Reason::OtherMapping {
                audits: 1,
                newest_id: 1,
                ..
            }]
        ));
        // Audits of other mappings between ours neither break nor extend the chain.
        let mut b = audit(3, 0, false);
        b.fingerprint = OTHER.into();
        let v = run(&[audit(2, 2, true), b], &GateOptions::default());
        assert!(v.open, "{:?}", v.reasons);
        assert_eq!(v.relied_on, vec![2]);
        assert_eq!(v.notes.len(), 1);
    }

    #[test]
    fn fewer_clean_audits_than_asked() {
        let opts = GateOptions {
            min_clean_audits: 3,
            ..Default::default()
        };
        let v = run(&[audit(1, 3, true), audit(2, 1, true)], &opts);
        assert_eq!(
            v.reasons,
            vec![Reason::TooFewCleanAudits { have: 2, want: 3 }]
        );
        let v = run(
            &[audit(1, 3, true), audit(2, 2, true), audit(5, 1, true)],
            &opts,
        );
        assert!(v.open);
        assert_eq!(v.relied_on, vec![5, 2, 1]);
    }

    #[test]
    fn tolerance_counts_only_when_accepted() {
        let mut t = audit(2, 1, true);
        t.tolerance.max_drift_rows = 5;
        let audits = [audit(1, 2, true), t.clone()];
        let v = run(&audits, &GateOptions::default());
        assert!(!v.open);
        assert!(matches!(
            &v.reasons[..],
            [
                Reason::ToleranceNotAccepted { id: 2, .. },
                Reason::TooFewCleanAudits { have: 0, want: 1 }
            ]
        ));
        let opts = GateOptions {
            accept_tolerance: true,
            ..Default::default()
        };
        let v = run(&audits, &opts);
        assert!(v.open);
        assert_eq!(v.newest_clean.unwrap().tolerance.max_drift_rows, 5);
        // A cap hides drift above it: it is a tolerance too.
        let mut c = audit(3, 0, true);
        c.tolerance.cap = Some(99);
        assert!(!run(&[c.clone()], &GateOptions::default()).open);
        assert!(run(&[c], &opts).open);
    }

    #[test]
    fn unfinished_audits_count_neither_way() {
        let mut running = audit(2, 0, false);
        running.status = "running".into();
        running.passed = None;
        let mut errored = audit(3, 0, false);
        errored.status = "failed".into();
        errored.passed = None;
        let v = run(
            &[audit(1, 1, true), running, errored],
            &GateOptions::default(),
        );
        assert!(v.open, "{:?}", v.reasons);
        assert_eq!(v.notes.len(), 2);
        let mut only = audit(1, 0, false);
        only.status = "failed".into();
        only.passed = None;
        assert_eq!(
            run(&[only], &GateOptions::default()).reasons,
            vec![Reason::NoAudit]
        );
    }

    #[test]
    fn require_unused() {
        let opts = GateOptions {
            require_unused: true,
            ..Default::default()
        };
        let audits = [audit(1, 1, true)];
        let v = decide(&audits, FP, NOW, &opts, &no_stats());
        assert!(matches!(&v.reasons[..], [Reason::UsageUnknown { .. }]));
        let used = StatementUse::Used {
            source: "pg_stat_statements".into(),
            statements: vec![StatementSeen {
                text: "UPDATE unread_counters SET unread_count = unread_count + $1".into(),
                calls: 7,
            }],
        };
        let v = decide(&audits, FP, NOW, &opts, &used);
        assert!(matches!(
            &v.reasons[..],
            [Reason::ColumnStillUsed { statements: 1, .. }]
        ));
        // Without --require-unused it is reported, not a condition.
        let v = decide(&audits, FP, NOW, &GateOptions::default(), &used);
        assert!(v.open);
        assert_eq!(v.statements, used);
        let unused = StatementUse::Unused {
            source: "pg_stat_statements".into(),
        };
        assert!(decide(&audits, FP, NOW, &opts, &unused).open);
    }

    #[test]
    fn every_reason_is_listed() {
        let mut a = audit(1, 30, true);
        a.fingerprint = FP.into();
        let opts = GateOptions {
            min_clean_audits: 2,
            require_unused: true,
            ..Default::default()
        };
        let v = run(&[a], &opts);
        assert_eq!(v.reasons.len(), 3, "{:?}", v.reasons);
        for r in &v.reasons {
            assert!(!r.to_string().is_empty());
        }
    }

    #[test]
    fn tolerance_from_options_json() {
        let t = Tolerance::from_options(&serde_json::json!({
            "cap": null, "max_drift_rows": 0, "max_drift_ratio": 0.0, "max_abs_drift": 0
        }));
        assert!(t.is_zero());
        let t = Tolerance::from_options(&serde_json::json!({"max_drift_ratio": 0.01}));
        assert!(!t.is_zero());
        assert_eq!(t.describe(), "--max-drift-ratio 0.01");
    }

    #[test]
    fn statement_matching() {
        let ex = ["read_watermarks"];
        let t = "unread_counters";
        let c = "unread_count";
        assert!(statement_uses(
            "UPDATE unread_counters SET unread_count = unread_count + $1 WHERE conv_id = $2",
            t,
            c,
            &ex
        ));
        assert!(statement_uses(
            "SELECT `unread_count` FROM `chat`.`unread_counters` WHERE `user_id` = ?",
            t,
            c,
            &ex
        ));
        // The table name alone is not the column.
        assert!(!statement_uses(
            "SELECT COUNT(*) FROM unread_counters",
            t,
            c,
            &ex
        ));
        // A string literal is not an identifier.
        assert!(!statement_uses(
            "SELECT 'unread_count' FROM unread_counters",
            t,
            c,
            &ex
        ));
        // tidemark's own statements do not count.
        assert!(!statement_uses(
            "SELECT c.unread_count FROM unread_counters c JOIN read_watermarks w ON 1 = 1",
            t,
            c,
            &ex
        ));
        assert!(!statement_uses(
            "INSERT INTO tidemark_counter_archive SELECT unread_count FROM unread_counters",
            t,
            c,
            &ex
        ));
        assert!(statement_uses(
            "select UNREAD_COUNT from Unread_Counters",
            "public.unread_counters",
            c,
            &ex
        ));
    }

    #[test]
    fn human_durations() {
        assert_eq!(human_ms(0), "0s");
        assert_eq!(human_ms(90_000), "1m 30s");
        assert_eq!(human_ms(86_400_000), "1day");
    }
}
