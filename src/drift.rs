//! Drift classification (`shared/spec/semantics.md`, "Drift classes"): every drifting row gets
//! exactly one class, the first that applies, in the order of [`DriftClass::ALL`] (shape C,
//! read flags: [`DriftClass::in_order`], which adds `read_out_of_order`).

use serde::Serialize;

/// Why a stored counter differs from the value recomputed from watermarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DriftClass {
    /// Stored is NULL: the row was never initialised.
    NullCounter,
    /// The member row is missing or not active (per message: the count includes members who
    /// left or joined after the message). Seed 003.
    Orphan,
    /// Stored < 0: an unguarded decrement (seed 004 §4.2).
    Negative,
    /// Shape C only (read flags, issue 22): the row's flags disagree with its watermark, and
    /// exactly so: stored - (unread flags at or before the watermark) + (read flags on
    /// countable messages of others after it) = recomputed. Messages read out of order
    /// become unread under a watermark. Checked after `negative`, before
    /// `own_messages_counted`: the flags are the stored value's own rows, the surest explanation.
    ReadOutOfOrder,
    /// Stored = recomputed + own messages after the watermark (seed 000 §3).
    OwnMessagesCounted,
    /// Stored = recomputed + legacy-counted messages that are not countable (deleted, system).
    ExcludedCounted,
    /// Stored = 0 while recomputed > 0: "mark all read" raced a new message (seed 000 §2).
    Cleared,
    /// Stored exceeds every countable message there is: duplicate deliveries piled up.
    ExceedsHistory,
    /// Stored > recomputed: at-least-once delivery counted twice (seed 000 §1).
    Overcount,
    /// Stored < recomputed: a lost update (seed 004).
    Undercount,
}

impl DriftClass {
    /// Every class, in classification order.
    pub const ALL: [DriftClass; 9] = [
        DriftClass::NullCounter,
        DriftClass::Orphan,
        DriftClass::Negative,
        DriftClass::OwnMessagesCounted,
        DriftClass::ExcludedCounted,
        DriftClass::Cleared,
        DriftClass::ExceedsHistory,
        DriftClass::Overcount,
        DriftClass::Undercount,
    ];

    /// Every class a mapping of shape C (`read_flags`) can report, in classification order:
    /// [`DriftClass::ALL`] with `read_out_of_order` after `negative`; [`DriftClass::ALL`]
    /// itself for the other shapes.
    pub fn in_order(read_flags: bool) -> Vec<DriftClass> {
        let mut v = DriftClass::ALL.to_vec();
        if read_flags {
            let at = v
                .iter()
                .position(|c| *c == DriftClass::OwnMessagesCounted)
                .unwrap_or(0);
            v.insert(at, DriftClass::ReadOutOfOrder);
        }
        v
    }

    /// The name used in the CSV report, JSON and the ledger.
    pub fn as_str(self) -> &'static str {
        match self {
            DriftClass::NullCounter => "null_counter",
            DriftClass::Orphan => "orphan",
            DriftClass::Negative => "negative",
            DriftClass::OwnMessagesCounted => "own_messages_counted",
            DriftClass::ExcludedCounted => "excluded_counted",
            DriftClass::ReadOutOfOrder => "read_out_of_order",
            DriftClass::Cleared => "cleared",
            DriftClass::ExceedsHistory => "exceeds_history",
            DriftClass::Overcount => "overcount",
            DriftClass::Undercount => "undercount",
        }
    }
}

impl std::fmt::Display for DriftClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who a counter's value is owed to: decides the `orphan` rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Membership {
    /// Shape A: whether the counter's member row exists and is active. A non-member is owed 0.
    PerMember { is_member: bool },
    /// Shape B: members who left or joined after the message and have not read it; the row is
    /// an orphan when the stored value is exactly the recomputed value plus them.
    PerMessage { orphans: i64 },
}

/// Shape C (read flags): what a member's flag rows say beside the watermark, exact counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlagFacts {
    /// Flag rows saying read, on countable messages of others after the threshold (the
    /// watermark, or the join position above it): unread now.
    pub read_after: i64,
    /// Flag rows saying unread at or before the threshold: read now.
    pub unread_before: i64,
}

/// What the audit statement measured for one drifting row. Counts are already limited to
/// cap+1 by the SQL when a cap is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// The legacy counter value.
    pub stored: Option<i64>,
    /// Unread recomputed from the watermark (0 for a non-member).
    pub recomputed: i64,
    /// Orphan evidence.
    pub membership: Membership,
    /// Own messages after the watermark that the legacy counter counted (per message: 1 when
    /// the sender is an active member).
    pub own: i64,
    /// Messages after the watermark, not the member's own, that the legacy counter counted but
    /// that are not countable (per message: what a not-countable message would count).
    pub excluded: i64,
    /// Every countable message of the conversation for the member, whatever the watermark
    /// (per message: every reader the message ever had, the members but the sender who
    /// joined before it, active or not).
    pub total: i64,
    /// Shape C: the member's read flags beside the watermark (None for shapes A and B).
    pub flags: Option<FlagFacts>,
}

/// A classified drift: the compared (clamped) values, their difference and the class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drift {
    /// Stored value, clamped to cap+1 under a cap.
    pub stored: Option<i64>,
    /// Recomputed value, clamped to cap+1 under a cap.
    pub recomputed: i64,
    /// stored - recomputed after clamping, exact (a stored value near `i64::MIN` drifts
    /// below it: hence 128 bits); None for a NULL counter.
    pub drift: Option<i128>,
    /// The first class that applies.
    pub class: DriftClass,
}

/// Classifies one row, or returns None when it does not drift. `cap` is `--cap N`: values are
/// clamped to N+1 before they are compared (seed 000 §5).
pub fn classify(f: &Facts, cap: Option<i64>) -> Option<Drift> {
    let clamp = |x: i64| match cap {
        Some(n) => x.min(n.saturating_add(1)),
        None => x,
    };
    let recomputed = match f.membership {
        Membership::PerMember { is_member: false } => 0,
        _ => clamp(f.recomputed),
    };
    let Some(raw_stored) = f.stored else {
        return Some(Drift {
            stored: None,
            recomputed,
            drift: None,
            class: DriftClass::NullCounter,
        });
    };
    let stored = clamp(raw_stored);
    if stored == recomputed {
        return None;
    }
    let class = match f.membership {
        Membership::PerMember { is_member: false } => DriftClass::Orphan,
        Membership::PerMessage { orphans }
            if orphans > 0 && stored == clamp(recomputed.saturating_add(orphans)) =>
        {
            DriftClass::Orphan
        }
        _ if stored < 0 => DriftClass::Negative,
        _ if f.flags.is_some_and(|x| {
            x.read_after.saturating_add(x.unread_before) > 0
                && recomputed
                    == clamp(
                        raw_stored
                            .saturating_sub(x.unread_before)
                            .saturating_add(x.read_after),
                    )
        }) =>
        {
            DriftClass::ReadOutOfOrder
        }
        _ if f.own > 0 && stored == clamp(recomputed.saturating_add(f.own)) => {
            DriftClass::OwnMessagesCounted
        }
        _ if f.excluded > 0 && stored == clamp(recomputed.saturating_add(f.excluded)) => {
            DriftClass::ExcludedCounted
        }
        _ if stored == 0 && recomputed > 0 => DriftClass::Cleared,
        _ if stored > clamp(f.total) => DriftClass::ExceedsHistory,
        _ if stored > recomputed => DriftClass::Overcount,
        _ => DriftClass::Undercount,
    };
    Some(Drift {
        stored: Some(stored),
        recomputed,
        drift: Some(i128::from(stored) - i128::from(recomputed)),
        class,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(stored: Option<i64>, recomputed: i64, own: i64, excluded: i64, total: i64) -> Facts {
        Facts {
            stored,
            recomputed,
            membership: Membership::PerMember { is_member: true },
            own,
            excluded,
            total,
            flags: None,
        }
    }

    fn class(f: Facts, cap: Option<i64>) -> Option<DriftClass> {
        classify(&f, cap).map(|d| d.class)
    }

    #[test]
    fn first_class_that_applies_wins() {
        assert_eq!(
            class(member(None, 3, 0, 0, 3), None),
            Some(DriftClass::NullCounter)
        );
        let orphan = Facts {
            membership: Membership::PerMember { is_member: false },
            ..member(Some(-2), 5, 0, 0, 5)
        };
        assert_eq!(class(orphan, None), Some(DriftClass::Orphan));
        assert_eq!(classify(&orphan, None).unwrap().recomputed, 0);
        assert_eq!(
            class(member(Some(-2), 0, 0, 0, 3), None),
            Some(DriftClass::Negative)
        );
        // S4: alice's own 20 messages counted.
        assert_eq!(
            class(member(Some(20), 0, 20, 0, 0), None),
            Some(DriftClass::OwnMessagesCounted)
        );
        // S9: two deleted messages counted.
        assert_eq!(
            class(member(Some(3), 1, 0, 2, 4), None),
            Some(DriftClass::ExcludedCounted)
        );
        // S2: cleared while a message arrived.
        assert_eq!(
            class(member(Some(0), 1, 0, 0, 11), None),
            Some(DriftClass::Cleared)
        );
        // S1a: 13 > 10 messages in existence.
        assert_eq!(
            class(member(Some(13), 10, 0, 0, 10), None),
            Some(DriftClass::ExceedsHistory)
        );
        assert_eq!(
            class(member(Some(7), 5, 0, 0, 10), None),
            Some(DriftClass::Overcount)
        );
        assert_eq!(
            class(member(Some(93), 100, 0, 0, 100), None),
            Some(DriftClass::Undercount)
        );
        assert_eq!(class(member(Some(5), 5, 3, 3, 9), None), None);
    }

    #[test]
    fn read_flags_explain_a_row_exactly_or_not_at_all() {
        let flags = |stored, recomputed, read_after, unread_before| Facts {
            flags: Some(FlagFacts {
                read_after,
                unread_before,
            }),
            ..member(Some(stored), recomputed, 0, 0, 10)
        };
        // 2 unread flags, 3 read out of order after the watermark: 5 unread now.
        assert_eq!(
            class(flags(2, 5, 3, 0), None),
            Some(DriftClass::ReadOutOfOrder)
        );
        // All read, one of them out of order above a lower watermark: not `cleared`.
        assert_eq!(
            class(flags(0, 1, 1, 0), None),
            Some(DriftClass::ReadOutOfOrder)
        );
        // A watermark above an unread flag: it is read now.
        assert_eq!(
            class(flags(3, 2, 0, 1), None),
            Some(DriftClass::ReadOutOfOrder)
        );
        // Not exactly explained: the generic classes.
        assert_eq!(class(flags(2, 6, 3, 0), None), Some(DriftClass::Undercount));
        assert_eq!(class(flags(0, 2, 0, 0), None), Some(DriftClass::Cleared));
        // Explained by the flags before an own-messages coincidence.
        let own = Facts {
            own: 1,
            ..flags(2, 1, 0, 1)
        };
        assert_eq!(class(own, None), Some(DriftClass::ReadOutOfOrder));
        assert_eq!(
            DriftClass::in_order(true)[2..5],
            [
                DriftClass::Negative,
                DriftClass::ReadOutOfOrder,
                DriftClass::OwnMessagesCounted
            ]
        );
        assert_eq!(DriftClass::in_order(false), DriftClass::ALL.to_vec());
    }

    #[test]
    fn cap_clamps_both_sides() {
        // S6a: 5003 vs 5000 under cap 99: both clamp to 100.
        assert_eq!(
            classify(&member(Some(5003), 100, 0, 0, 100), Some(99)),
            None
        );
        let d = classify(&member(Some(50), 100, 0, 0, 100), Some(99)).unwrap();
        assert_eq!(
            (d.stored, d.recomputed, d.drift, d.class),
            (Some(50), 100, Some(-50), DriftClass::Undercount)
        );
    }

    #[test]
    fn drift_beyond_i64_is_exact() {
        // Issue 25 row 2: a stored i64::MIN with 2 unread drifts below i64::MIN.
        let d = classify(&member(Some(i64::MIN), 2, 0, 0, 3), None).unwrap();
        assert_eq!(d.drift, Some(i128::from(i64::MIN) - 2));
        assert_eq!(d.class, DriftClass::Negative);
        let d = classify(&member(Some(i64::MAX), 3, 0, 0, 3), Some(i64::MAX)).unwrap();
        assert_eq!(d.drift, Some(i128::from(i64::MAX) - 3));
        assert_eq!(d.class, DriftClass::ExceedsHistory);
    }

    #[test]
    fn per_message_orphans_need_the_exact_difference() {
        let f = Facts {
            stored: Some(2),
            recomputed: 1,
            membership: Membership::PerMessage { orphans: 1 },
            own: 1,
            excluded: 0,
            total: 3,
            flags: None,
        };
        assert_eq!(class(f, None), Some(DriftClass::Orphan));
        let f2 = Facts {
            membership: Membership::PerMessage { orphans: 3 },
            ..f
        };
        assert_eq!(class(f2, None), Some(DriftClass::OwnMessagesCounted));
    }
}
