//! The conversation-size plan, scaled to the number of member rows asked for.

use super::classes::RATES;

/// Conversation-size plan, scaled to the target.
#[derive(Debug, Clone)]
pub(super) struct Plan {
    pub(super) total: u64,
    pub(super) p_dm: f64,
    pub(super) p_small: f64,
    pub(super) large_min: u64,
    pub(super) large_max: u64,
    pub(super) max_messages: u64,
    pub(super) users: u64,
    pub(super) targets: [u64; 9],
}

impl Plan {
    pub(super) fn new(total: u64) -> Plan {
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
