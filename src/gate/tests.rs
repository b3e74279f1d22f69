//! The gate's rules, each tested without a database.

use super::*;
use crate::ledger::RunStatus;

const FP: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const OTHER: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
const HOUR: i64 = 3_600_000;
const NOW: i64 = 1_000 * HOUR;

fn audit(id: i64, age_h: i64, passed: bool) -> AuditRecord {
    AuditRecord {
        id,
        status: RunStatus::Done,
        started_ms: NOW - age_h * HOUR,
        finished_ms: Some(NOW - age_h * HOUR + 1000),
        fingerprint: FP.into(),
        passed: Some(passed),
        tolerance: Tolerance::zero(),
        crossed: if passed {
            vec![]
        } else {
            vec!["drifting rows 3 > --max-drift-rows 0".into()]
        },
        report_sha256: Some("00".into()),
        unreadable: None,
        backfill: Some(crate::ledger::BackfillState::of(
            Some((1, RunStatus::Done)),
            false,
        )),
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

/// Issue 25, row 10: an audit that found the backfill of its mapping unfinished never counts,
/// whatever its verdict, and ends the chain; a clean audit after the backfill finished counts;
/// an audit recorded before the state was kept (None) counts as it always did.
#[test]
fn audit_during_an_unfinished_backfill_does_not_count() {
    use crate::ledger::BackfillState;
    let mut during = audit(2, 1, true);
    during.backfill = Some(BackfillState::of(Some((1, RunStatus::Failed)), false));
    let v = run(&[during.clone()], &GateOptions::default());
    assert!(!v.open);
    assert_eq!(
        v.reasons[0],
        Reason::BackfillUnfinished {
            id: Some(2),
            backfill: Some(1),
            state: "(run #1) failed".into()
        }
    );
    assert_eq!(
        serde_json::to_value(&v.reasons[0]).unwrap()["kind"],
        "backfill_unfinished"
    );
    assert!(
        v.reasons[0]
            .to_string()
            .contains("run `tidemark backfill`, then audit again"),
        "{}",
        v.reasons[0]
    );
    // Never run.
    let mut before = audit(3, 1, true);
    before.backfill = Some(BackfillState::of(None, false));
    let v = run(&[before], &GateOptions::default());
    assert!(
        v.reasons[0]
            .to_string()
            .starts_with("audit #3 ran before any backfill of this mapping"),
        "{}",
        v.reasons[0]
    );
    // A clean audit once the backfill finished counts; the one during it ends the chain.
    let v = run(
        &[audit(1, 5, true), during.clone(), audit(3, 0, true)],
        &GateOptions::default(),
    );
    assert!(v.open, "{:?}", v.reasons);
    assert_eq!(v.relied_on, vec![3]);
    let two = GateOptions {
        min_clean_audits: 2,
        ..GateOptions::default()
    };
    let v = run(&[audit(1, 5, true), during, audit(3, 0, true)], &two);
    assert!(!v.open);
    assert!(
        matches!(v.reasons[0], Reason::BackfillUnfinished { .. }),
        "{:?}",
        v.reasons
    );
    // Recorded before the state was kept: as before.
    let mut old = audit(4, 1, true);
    old.backfill = None;
    assert!(run(&[old], &GateOptions::default()).open);
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
    t.tolerance.max_drift_rows = Some(5);
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
    assert_eq!(v.newest_clean.unwrap().tolerance.max_drift_rows, Some(5));
    // A cap hides drift above it: it is a tolerance too.
    let mut c = audit(3, 0, true);
    c.tolerance.cap = Some(99);
    assert!(!run(&[c.clone()], &GateOptions::default()).open);
    assert!(run(&[c], &opts).open);
}

#[test]
fn unfinished_audits_count_neither_way() {
    let mut running = audit(2, 0, false);
    running.status = RunStatus::Running;
    running.passed = None;
    let mut errored = audit(3, 0, false);
    errored.status = RunStatus::Failed;
    errored.passed = None;
    let v = run(
        &[audit(1, 1, true), running, errored],
        &GateOptions::default(),
    );
    assert!(v.open, "{:?}", v.reasons);
    assert_eq!(v.notes.len(), 2);
    let mut only = audit(1, 0, false);
    only.status = RunStatus::Failed;
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
fn unreadable_evidence_closes_the_gate() {
    // Issue 13, row 8: a renamed key in the ledger must not turn a tolerant audit into a
    // strict one; the gate closes and says why.
    let mut a = audit(2, 1, true);
    a.unreadable = Some("missing field `max_drift_rows`".into());
    let v = run(&[audit(1, 2, true), a], &GateOptions::default());
    assert!(!v.open);
    assert!(matches!(
        &v.reasons[0],
        Reason::EvidenceUnreadable { id: 2, why } if why.contains("max_drift_rows")
    ));
    assert!(
        v.reasons[0].to_string().contains("cannot be read"),
        "{}",
        v.reasons[0]
    );
}

#[test]
fn an_unchecked_limit_is_a_tolerance() {
    let mut t = audit(1, 1, true);
    t.tolerance = Tolerance::given(Some(1), None, None, None);
    assert!(!run(&[t.clone()], &GateOptions::default()).open);
    let opts = GateOptions {
        accept_tolerance: true,
        ..Default::default()
    };
    assert!(run(&[t], &opts).open);
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
