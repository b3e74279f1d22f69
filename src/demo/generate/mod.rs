//! A deterministic generator of a realistic legacy chat database with injected drift and its
//! ground truth, for benchmarks and end-to-end tests at scale.
//!
//! The data goes into the legacy schema of [`crate::legacy_schema::schema_sql`] (tables `messages`,
//! `members`, `unread_counters`, `read_receipts`) so that the scenario mapping
//! (`scenario::mapping_toml(crate::mapping::Shape::PerMember, false)`) applies unchanged: countable messages are
//! `is_deleted = 0 AND is_system = 0`, members are active when `active = 1`, late joiners have a
//! `join_position`, and the evidence is the read receipts (their maximum per member), then the
//! counter.
//!
//! Shape of the data (all drawn from one seeded PRNG, so one seed always gives the same rows):
//!
//! - conversations: mostly direct messages (2 members), many small groups (3–20 members) and a
//!   few large groups (100–5000 members, scaled down when the target is small);
//! - messages: about 3 per member row overall, skewed over conversations (many quiet ones, a
//!   few busy ones, a few empty ones); positions are per-conversation ids from 1 with
//!   occasional gaps (rolled-back inserts); some are deleted, some are system messages (sender
//!   `system`);
//! - members: some left (`active = 0`), some joined late (`join_position` set); about 60% of the
//!   active members have read receipts (sometimes two rows: the maximum counts), the others
//!   only their counter;
//! - counters: every active member has one. Its value is the true unread for the watermark the
//!   backfill will derive: for a receipt-backed member, the countable messages after the
//!   highest receipt, not the member's own, after the join position; for a counter-only member
//!   the counter itself defines the watermark (semantics.md, Backfill 3), so any value from 0
//!   to the member's countable messages is true, and the generator picks one. Members who left
//!   have a counter of 0 (or none).
//!
//! Drift is injected into distinct receipt-backed members (whose watermark does not depend on
//! the counter) and into members who left, in known numbers per class (semantics.md, "Drift
//! classes"), each value chosen so that the classification rules, in their order, give exactly
//! the intended class. Every other counter is exact, so an audit after the backfill must report
//! exactly [`GroundTruth::injected`].

use anyhow::{Context, Result};
use sqlx::AnyConnection;

use crate::dialect::Dialect;
use crate::drift::DriftClass;
use crate::legacy_schema::schema_sql;

mod classes;
mod conversation;
mod loader;
mod plan;
mod rng;
mod truth;

pub use truth::GroundTruth;

use conversation::Gen;
use loader::Loader;
use plan::Plan;
use rng::Rng;

/// What to generate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenerateOptions {
    /// Member rows to generate (rows of `members`), e.g. 1 000 000. Messages follow at about
    /// 3 rows per member row.
    pub members: u64,
    /// The PRNG seed: the same seed (and `members`) always gives the same rows.
    pub seed: u64,
}

/// Generates a legacy chat database of `opts.members` member rows into `conn` and returns its
/// ground truth.
///
/// Creates the tables of [`crate::legacy_schema::schema_sql`] first when `messages` does not exist;
/// otherwise they must exist and be empty (conversation ids start at 1). Rows are loaded with
/// multi-row `INSERT`s of at most 1000 rows (inline literals, no bind parameters) in
/// transactions of about 50 000 rows; memory holds one conversation at a time.
///
/// Deterministic: the same `opts` give the same rows in the same order.
///
/// Errors: a database failure (the transaction in flight is rolled back; earlier ones stay
/// committed), or existing tables that do not match the schema.
pub async fn generate(
    conn: &mut AnyConnection,
    dialect: Dialect,
    opts: &GenerateOptions,
) -> Result<GroundTruth> {
    if !crate::db::catalog::table_exists(conn, dialect, "messages").await? {
        for sql in schema_sql() {
            sqlx::raw_sql(&sql)
                .execute(&mut *conn)
                .await
                .with_context(|| format!("generate: creating the schema: {sql}"))?;
        }
    }
    let mut g = Gen {
        rng: Rng(opts.seed),
        plan: Plan::new(opts.members),
        done: 0,
        injected: [0; 9],
        truth: GroundTruth::default(),
    };
    let mut out = Loader::new(dialect);
    let result: Result<()> = async {
        let mut conv = 0i64;
        while g.done < opts.members {
            conv += 1;
            g.conversation(conv, &mut out)?;
            out.drain(conn).await?;
        }
        out.finish(conn).await
    }
    .await;
    if let Err(e) = result {
        if out.open {
            let _ = sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await;
        }
        return Err(e);
    }
    g.truth.injected = DriftClass::ALL
        .iter()
        .zip(g.injected)
        .map(|(c, n)| (c.as_str().to_string(), n))
        .collect();
    Ok(g.truth)
}

#[cfg(test)]
mod tests {
    use super::classes::ORPHAN;
    use super::conversation::{expected_class, Facts};
    use super::*;

    #[test]
    fn rng_is_stable() {
        let mut a = Rng(42);
        let mut b = Rng(42);
        let xs: Vec<u64> = (0..5).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..5).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        // splitmix64's published first output for seed 0.
        assert_eq!(Rng(0).next_u64(), 0xE220_A839_7B1D_CDAF);
        let mut r = Rng(7);
        for _ in 0..1000 {
            assert!(r.below(10) < 10);
            let u = r.unit();
            assert!((0.0..1.0).contains(&u));
        }
        assert_eq!(r.below(0), 0);
    }

    #[test]
    fn expected_class_agrees_with_drift_classify() {
        use crate::drift::{classify, Facts as DFacts, Membership};
        let mut r = Rng(3);
        for _ in 0..200_000 {
            let total = r.below(8) as i64;
            let f = Facts {
                recomputed: r.below(total as u64 + 1) as i64,
                own: r.below(4) as i64,
                excluded: r.below(4) as i64,
                total,
            };
            let stored = if r.chance(0.05) {
                None
            } else {
                Some(r.below(16) as i64 - 3)
            };
            let member = r.chance(0.9);
            let want = expected_class(stored, member, &f).map(|c| DriftClass::ALL[c]);
            let got = classify(
                &DFacts {
                    stored,
                    recomputed: f.recomputed,
                    membership: Membership::PerMember { is_member: member },
                    own: f.own,
                    excluded: f.excluded,
                    total: f.total,
                    flags: None,
                },
                None,
            )
            .map(|d| d.class);
            assert_eq!(want, got, "{stored:?} {member} {f:?}");
        }
    }

    #[test]
    fn candidates_classify_as_intended() {
        let mut g = Gen {
            rng: Rng(5),
            plan: Plan::new(1000),
            done: 0,
            injected: [0; 9],
            truth: GroundTruth::default(),
        };
        for _ in 0..100_000 {
            let total = g.rng.below(12) as i64;
            let f = Facts {
                recomputed: g.rng.below(total as u64 + 1) as i64,
                own: g.rng.below(5) as i64,
                excluded: g.rng.below(5) as i64,
                total,
            };
            for c in 0..9 {
                if c == ORPHAN {
                    continue;
                }
                if let Some(v) = g.candidate(c, &f) {
                    assert_eq!(expected_class(v, true, &f), Some(c), "{c} {v:?} {f:?}");
                }
            }
        }
    }

    #[test]
    fn plan_scales() {
        let p = Plan::new(1_000_000);
        assert_eq!((p.large_min, p.large_max), (100, 5000));
        assert!(p.p_dm > 0.7 && p.p_small > 0.1, "{p:?}");
        let small = Plan::new(1000);
        assert!(small.large_max <= 50);
        assert!(small.targets.iter().all(|&t| t >= 1));
    }
}
