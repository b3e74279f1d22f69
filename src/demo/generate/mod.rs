//! A deterministic generator of a realistic legacy chat database with injected drift and its
//! ground truth, for benchmarks and end-to-end tests at scale.
//!
//! The data goes into the legacy schema of [`crate::legacy_schema::schema_sql`] (tables `messages`,
//! `members`, `unread_counters`, `read_receipts`) so that the scenario mapping
//! (`scenario::mapping_toml("per_member", false)`) applies unchanged: countable messages are
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
use std::collections::BTreeMap;

use crate::dialect::Dialect;
use crate::drift::DriftClass;
use crate::legacy_schema::schema_sql;

/// What to generate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenerateOptions {
    /// Member rows to generate (rows of `members`), e.g. 1 000 000. Messages follow at about
    /// 3 rows per member row.
    pub members: u64,
    /// The PRNG seed: the same seed (and `members`) always gives the same rows.
    pub seed: u64,
}

/// What was generated, and the drift that an audit must find.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroundTruth {
    /// Rows of `members` (equals [`GenerateOptions::members`]).
    pub members: u64,
    /// Rows of `messages`.
    pub messages: u64,
    /// Conversations (distinct `conv_id`, numbered 1, 2, …).
    pub conversations: u64,
    /// Rows of `unread_counters` (what an audit checks).
    pub counter_rows: u64,
    /// Rows of `read_receipts`.
    pub receipt_rows: u64,
    /// Drifting counter rows injected, per class name (as in [`DriftClass::as_str`]), every
    /// class listed (0 when none was injected). An audit with the scenario mapping must report
    /// exactly these rows per class.
    pub injected: BTreeMap<String, u64>,
}

impl GroundTruth {
    /// Drifting rows injected in all (the sum of [`GroundTruth::injected`]).
    pub fn drifting_rows(&self) -> u64 {
        self.injected.values().sum()
    }
}

/// Rows per multi-row `INSERT` statement.
const ROWS_PER_STATEMENT: usize = 1000;
/// Rows per transaction (a commit happens at the first statement boundary past this).
const ROWS_PER_TRANSACTION: u64 = 50_000;

/// The fraction of member rows injected per class, in [`DriftClass::ALL`] order.
const RATES: [f64; 9] = [
    0.002,  // null_counter
    0.003,  // orphan
    0.0015, // negative
    0.004,  // own_messages_counted
    0.003,  // excluded_counted
    0.005,  // cleared
    0.002,  // exceeds_history
    0.006,  // overcount
    0.006,  // undercount
];

const NULL_COUNTER: usize = 0;
const ORPHAN: usize = 1;
const NEGATIVE: usize = 2;
const OWN: usize = 3;
const EXCLUDED: usize = 4;
const CLEARED: usize = 5;
const EXCEEDS: usize = 6;
const OVERCOUNT: usize = 7;
const UNDERCOUNT: usize = 8;

/// splitmix64: a tiny, fast, well-mixed PRNG; only integer and exact floating-point arithmetic
/// is used on its output, so a seed gives the same stream on every platform.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in 0..n (0 when n is 0).
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
}

/// Conversation-size plan, scaled to the target.
#[derive(Debug, Clone)]
struct Plan {
    total: u64,
    p_dm: f64,
    p_small: f64,
    large_min: u64,
    large_max: u64,
    max_messages: u64,
    users: u64,
    targets: [u64; 9],
}

impl Plan {
    fn new(total: u64) -> Plan {
        let large_max = (total / 20).min(5000);
        let large_min = 100.min(large_max / 2).max(21);
        let large = large_max > large_min;
        // Shares of member rows: 45% direct messages, 35% small groups, 20% large groups.
        let (dm_share, small_share, large_share) = if large {
            (0.45, 0.35, 0.20)
        } else {
            (0.55, 0.45, 0.0)
        };
        let dm_mean = 2.0;
        let small_mean = 5.6;
        let large_mean = if large {
            large_min as f64 + (large_max - large_min) as f64 / 4.0
        } else {
            1.0
        };
        let w = [
            dm_share / dm_mean,
            small_share / small_mean,
            large_share / large_mean,
        ];
        let sum = w[0] + w[1] + w[2];
        let targets = RATES.map(|r| ((total as f64 * r).round() as u64).max(1));
        Plan {
            total,
            p_dm: w[0] / sum,
            p_small: w[1] / sum,
            large_min,
            large_max,
            max_messages: (total * 3 / 10).clamp(2000, 50_000),
            users: (total / 6).max(large_max * 2).max(64),
            targets,
        }
    }
}

mod conversation;
mod loader;

use conversation::Gen;
use loader::Loader;

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
