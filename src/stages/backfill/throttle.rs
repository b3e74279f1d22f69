//! The throttle of `--max-rows-per-second`, over active time (issue 13 row 1), and the
//! backoff of a batch that lost a lock wait.

use backon::{BackoffBuilder, ExponentialBuilder};
use std::time::Duration;

/// The pauses before each retry of a batch that lost a lock wait: exponential from 200 ms to
/// 10 s with jitter, `retries` of them.
pub(super) fn lock_wait_backoff(retries: usize) -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(10))
        .with_max_times(retries)
        .with_jitter()
        .build()
}

/// The size of the next batch under `--chunk-time` (`chunk_time`; zero keeps `size`): the
/// rows the last batch (`rows` in `took`) would have done in that time, between 1 and `max`,
/// and at most twice `size`.
pub(super) fn next_size(
    size: u64,
    max: u64,
    chunk_time: Duration,
    rows: u64,
    took: Duration,
) -> u64 {
    if chunk_time.is_zero() || rows == 0 {
        return size;
    }
    let rate = rows as f64 / took.as_secs_f64().max(0.001);
    let want = (rate * chunk_time.as_secs_f64()).round() as u64;
    want.clamp(1, max).min(size.saturating_mul(2).max(1))
}

/// How long the throttle waits so that `rows` done in `active` time (wall time minus the time
/// paused: pause file, lock backoff, `--pause-between-batches`) stay at or below `limit` rows
/// per second. Over active time, a pause builds up no allowance: no burst after it (issue 13
/// row 1). Zero when the run is at or below the limit, or the limit is not positive.
pub fn throttle_delay(rows: u64, active: Duration, limit: f64) -> Duration {
    if limit <= 0.0 || !limit.is_finite() {
        return Duration::ZERO;
    }
    let ahead = rows as f64 / limit - active.as_secs_f64();
    if ahead > 0.0 {
        Duration::from_secs_f64(ahead)
    } else {
        Duration::ZERO
    }
}

#[cfg(test)]
mod tests {
    use super::throttle_delay;
    use std::time::Duration;

    #[test]
    fn throttle_holds_over_active_time() {
        // 100 rows at 25/s need 4 s of active time.
        assert_eq!(
            throttle_delay(100, Duration::from_secs(1), 25.0),
            Duration::from_secs(3)
        );
        assert_eq!(
            throttle_delay(100, Duration::from_secs(4), 25.0),
            Duration::ZERO
        );
        assert_eq!(
            throttle_delay(100, Duration::from_secs(9), 25.0),
            Duration::ZERO
        );
        assert_eq!(throttle_delay(100, Duration::ZERO, 0.0), Duration::ZERO);
        assert_eq!(throttle_delay(100, Duration::ZERO, -1.0), Duration::ZERO);
    }

    /// Issue 13 row 1: 1 s of work, then the pause file for 8 s, then 200 rows more. Over wall
    /// time (9 s, allowance 225 rows) the 225 rows would pass at once: a burst. Over active
    /// time (1 s) the throttle waits until 9 s of active time have passed.
    #[test]
    fn no_burst_after_a_pause() {
        let wall = Duration::from_secs(9);
        let paused = Duration::from_secs(8);
        let active = wall.saturating_sub(paused);
        assert_eq!(throttle_delay(225, wall, 25.0), Duration::ZERO);
        assert_eq!(throttle_delay(225, active, 25.0), Duration::from_secs(8));
    }
}
