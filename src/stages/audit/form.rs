//! Which form of the audit statement a batch runs (issue 30, "Choose the form by the data"):
//! the one-pass form (`sql/common/audit_per_member.sql`: the batch's messages above each
//! conversation's lowest threshold sorted once, with the members' thresholds merged in) or the
//! index-probe form (`sql/common/audit_probe.sql`: one count per member through the messages'
//! `(conversation, position)` index, from the member's own threshold up). Both give the same
//! rows, values and classes; they differ only in what they read.

use crate::dialect::SqlContext;
use crate::mapping::Shape;

/// `--audit-form`: the form of the audit statement (and of the backfill's change count, which
/// runs the audit's statement counted). The variants' comments are the `--help` text; `Auto`
/// is [`choose`], `Probe` falls back where [`probe_fits`] says no.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum AuditForm {
    /// Per batch, the form that reads less, judged from the batch's stored counters
    #[default]
    Auto,
    /// The batch's messages sorted once, the members' thresholds merged in
    OnePass,
    /// One count per member through the (conversation, position) index (the one pass for
    /// mention counters, restricted or addressed messages and read flags)
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

/// How many times the one-pass form's rows ([`BatchFigures::rows`] + [`BatchFigures::deepest`])
/// the probes may read ([`BatchFigures::rows`] + [`BatchFigures::behind`]) and still be picked:
/// 1, from the figures in [`choose`].
pub const PROBE_PER_SORTED: i64 = 1;

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
/// [`probe_fits`]). Under `Auto`, with the batch's `figures` (None: not measured, the one-pass
/// form), the probe form when the engine probes by range (`Spelling::probes_by_range`) and
///
/// `rows + behind <= PROBE_PER_SORTED * (rows + deepest)`
///
/// The probes read one index descent per member plus its unread messages (`rows + behind`);
/// the one pass sorts every member and every message above each conversation's lowest
/// threshold (at least `rows + deepest`). The stored counters only steer the choice: a wrong
/// one costs time, never a different result (both forms give the same rows).
///
/// Measured (debug build, 2 shared cores, one batch run by hand with the plan's SQL; the
/// times vary by up to 2× between runs on this machine):
/// - PostgreSQL 15, `EXPLAIN (ANALYZE, BUFFERS)`, jit off as the stages run: a batch of 400
///   conversations of the default shape (80 % direct, 19 % groups, 1 % channels; 4 912
///   members 0 to 4 messages behind, 3 % drifting; rows 4 912, behind 6 862, deepest 694):
///   one pass 116 / 134 / 214 ms (7 285 buffers), probes 89 / 154 / 227 ms (28 983 buffers).
///   Large channels (2 channels of 1 000 members and 5 000 messages, one member per channel
///   never read, the others 0 to 2 behind, two thirds drifting; rows 2 000, behind 11 798,
///   deepest 9 800): one pass 388 / 455 ms, probes 1 413 / 1 756 ms. 20 such channels, half
///   the members 5 000 behind: one pass 2.7 s, probes 13.4 s.
/// - MariaDB 10.11, `ANALYZE FORMAT=JSON`: the probes read the whole conversation per member
///   (`ref` access, see `probes_by_range`): the default batch 1 054 ms against 18 ms, the
///   large channels 17.3 s against 0.58 s.
/// - Whole audits (`tidemark audit --audit-form …`, 47 958 members, 157 600 messages):
///   PostgreSQL one pass 2.8 s, probes 2.6 s; MariaDB one pass 10.2 s, probes 19.8 s.
///   Large channels (20 000 members, 100 000 messages, half 5 000 behind): PostgreSQL one
///   pass 3.9–4.6 s against probes 102–136 s, MariaDB 9.3 s against 279 s; with no
///   watermark at all, PostgreSQL 5.1 s against 69.6 s. Every report identical (md5).
///
/// So the probes win narrowly, on PostgreSQL and SQLite, only where the members are caught
/// up; a few members far behind, or many drifting rows (whose classification facts each probe
/// again), make them lose by 3× to 35×. Hence the factor 1: the probes are picked where the
/// counters say that at most about one member per conversation is behind.
pub fn choose(asked: AuditForm, ctx: &SqlContext, figures: Option<BatchFigures>) -> AuditForm {
    if !probe_fits(ctx) {
        return AuditForm::OnePass;
    }
    match (asked, figures) {
        (AuditForm::Auto, Some(f)) if ctx.dialect.probes_by_range() => {
            let probe = f.rows.saturating_add(f.behind);
            let pass = f.rows.saturating_add(f.deepest);
            if probe <= PROBE_PER_SORTED.saturating_mul(pass) {
                AuditForm::Probe
            } else {
                AuditForm::OnePass
            }
        }
        (AuditForm::Auto, _) => AuditForm::OnePass,
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
        // 5 000 members of 2 500 direct conversations, one of each 3 behind.
        let f = BatchFigures {
            rows: 5_000,
            behind: 7_500,
            deepest: 7_500,
        };
        assert_eq!(choose(AuditForm::Auto, &ctx(), Some(f)), AuditForm::Probe);
        // Both 3 behind: the one pass (measured: about even).
        let f = BatchFigures {
            behind: 15_000,
            ..f
        };
        assert_eq!(choose(AuditForm::Auto, &ctx(), Some(f)), AuditForm::OnePass);
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
