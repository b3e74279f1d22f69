//! Which form of the audit statement a batch runs (issue 30, "Choose the form by the data"):
//! the one-pass form (`sql/common/audit_per_member.sql`: the batch's messages above each
//! conversation's lowest threshold sorted once, with the members' thresholds merged in) or the
//! index-probe form (`sql/common/audit_probe.sql`: one count per member through the messages'
//! `(conversation, position)` index, from the member's own threshold up). Both give the same
//! rows, values and classes; they differ only in what they read.

use crate::dialect::SqlContext;
use crate::mapping::Shape;

/// `--audit-form`: the form of the audit statement (and of the backfill's change count, which
/// runs the audit's statement counted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum AuditForm {
    /// Per batch, the form that reads less ([`choose`]).
    #[default]
    Auto,
    /// Always the one-pass form.
    OnePass,
    /// The index-probe form wherever the mapping allows it ([`probe_fits`]); elsewhere the
    /// one-pass form.
    Probe,
}

/// What a batch holds, read from its counter rows alone (`sql/common/audit_form_stats.sql`, in
/// the batch's snapshot, instead of the plain count of its rows): measured before the audit
/// statement runs, at the cost of that count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchFigures {
    /// Counter rows (members) in the batch.
    pub rows: i64,
    /// The stored counters summed (negative and NULL ones as 0): about the messages the probes
    /// read, one per unread message of each member.
    pub behind: i64,
    /// Per conversation the largest stored counter, summed: at least the messages above the
    /// conversation's lowest threshold, which the one-pass form sorts.
    pub deepest: i64,
}

/// Rows an index probe costs per row the one-pass form sorts, from the measurements in
/// [`choose`]: a sorted row (five running sums over two partitions) costs about what
/// `PROBE_PER_SORTED` rows read by an index probe cost.
pub const PROBE_PER_SORTED: i64 = 4;

/// Whether the mapping's counter has an index-probe form: the per-member unread counter
/// (shape A), not a mention counter, without `restricted` or `recipient` messages. The others
/// (mentions, readers, read flags) run the one-pass form only.
pub fn probe_fits(ctx: &SqlContext) -> bool {
    ctx.shape == Shape::PerMember
        && ctx.ctr.mentions.is_none()
        && ctx.msg.restricted.is_none()
        && ctx.msg.recipient.is_none()
}

/// The form a batch runs: `asked` unless it is [`AuditForm::Auto`] (the probe form only where
/// [`probe_fits`]); under `Auto`, with the batch's `figures` (None: not measured, the one-pass
/// form), the probe form when its reads are at most those of the one-pass form:
///
/// `rows + behind <= PROBE_PER_SORTED * (rows + deepest)`
///
/// The probes read one index descent per member plus its unread messages (`rows + behind`);
/// the one pass sorts every member and every message above each conversation's lowest
/// threshold (at least `rows + deepest`), each sorted row costing about [`PROBE_PER_SORTED`]
/// probed rows. Members close to caught up (`behind` a few per member) pick the probes; a
/// conversation of many members far behind (`behind` about `rows` times `deepest`) picks the
/// one pass. The stored counters only steer the choice: a wrong one costs time, never a
/// different result (both forms give the same rows).
pub fn choose(asked: AuditForm, ctx: &SqlContext, figures: Option<BatchFigures>) -> AuditForm {
    if !probe_fits(ctx) {
        return AuditForm::OnePass;
    }
    match (asked, figures) {
        (AuditForm::Auto, Some(f)) => {
            let probe = f.rows.saturating_add(f.behind);
            let pass = f.rows.saturating_add(f.deepest);
            if probe <= PROBE_PER_SORTED.saturating_mul(pass) {
                AuditForm::Probe
            } else {
                AuditForm::OnePass
            }
        }
        (AuditForm::Auto, None) => AuditForm::OnePass,
        (form, _) => form,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::Dialect;
    use crate::mapping::Mapping;

    fn ctx() -> SqlContext {
        let toml = crate::legacy_schema::mapping_toml(Shape::PerMember, false);
        SqlContext::new(&Mapping::parse(&toml, "<test>").unwrap(), Dialect::Sqlite)
    }

    #[test]
    fn caught_up_members_pick_the_probes() {
        // 5 000 members of 2 500 direct conversations, 3 unread each.
        let f = BatchFigures {
            rows: 5_000,
            behind: 15_000,
            deepest: 7_500,
        };
        assert_eq!(choose(AuditForm::Auto, &ctx(), Some(f)), AuditForm::Probe);
    }

    #[test]
    fn a_channel_far_behind_picks_the_one_pass() {
        // One channel of 2 000 members, 10 000 unread each.
        let f = BatchFigures {
            rows: 2_000,
            behind: 20_000_000,
            deepest: 10_000,
        };
        assert_eq!(choose(AuditForm::Auto, &ctx(), Some(f)), AuditForm::OnePass);
        // Unmeasured: the one pass; forced: as asked.
        assert_eq!(choose(AuditForm::Auto, &ctx(), None), AuditForm::OnePass);
        assert_eq!(choose(AuditForm::Probe, &ctx(), Some(f)), AuditForm::Probe);
    }
}
