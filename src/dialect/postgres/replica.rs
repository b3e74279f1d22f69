//! A PostgreSQL streaming replica as `--read-database` (issue 31): whether the server is one
//! (`pg_is_in_recovery()`), whether it is a copy of the primary's cluster (the same
//! `system_identifier`, where the role may read `pg_control_system()`), and its lag: the time
//! it takes to replay the primary's WAL position of the moment asked (`pg_current_wal_lsn()`
//! against `pg_last_wal_replay_lsn()`). `now() - pg_last_xact_replay_timestamp()` alone is not
//! the lag: on an idle primary it grows without the replica being behind at all.

use anyhow::Result;
use sqlx::{AnyConnection, Row};
use std::time::{Duration, Instant};

use crate::dialect::types::ReplicaState;

/// How often the replica's replay position is read while it catches up.
const POLL: Duration = Duration::from_millis(100);

/// [`crate::dialect::Catalog::replica_state`] on PostgreSQL.
pub(super) async fn state(
    primary: &mut AnyConnection,
    replica: &mut AnyConnection,
    limit: Duration,
) -> Result<ReplicaState> {
    let in_recovery: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
        .fetch_one(&mut *replica)
        .await?;
    if !in_recovery {
        return Ok(ReplicaState::NotReplica(
            "pg_is_in_recovery() is false there: it is a primary, not a standby".into(),
        ));
    }
    // Best effort: reading pg_control_system() may need a privilege the role lacks.
    let id = "SELECT CAST(system_identifier AS TEXT) FROM pg_control_system()";
    let ours = sqlx::query_scalar::<_, String>(id)
        .fetch_one(&mut *primary)
        .await;
    let theirs = sqlx::query_scalar::<_, String>(id)
        .fetch_one(&mut *replica)
        .await;
    if let (Ok(ours), Ok(theirs)) = (ours, theirs) {
        if ours != theirs {
            return Ok(ReplicaState::NotReplica(format!(
                "its system identifier {theirs} is not the primary's {ours}: it is a standby of another cluster"
            )));
        }
    }
    let target: String = sqlx::query_scalar("SELECT CAST(pg_current_wal_lsn() AS TEXT)")
        .fetch_one(&mut *primary)
        .await?;
    let started = Instant::now();
    loop {
        let row = sqlx::query(
            "SELECT COALESCE(pg_last_wal_replay_lsn() >= CAST($1 AS pg_lsn), FALSE) AS caught_up, \
             CAST(EXTRACT(EPOCH FROM (clock_timestamp() - pg_last_xact_replay_timestamp())) * 1000 \
             AS BIGINT) AS behind_ms",
        )
        .bind(&target)
        .fetch_one(&mut *replica)
        .await?;
        let caught_up: bool = row.try_get("caught_up")?;
        let waited = started.elapsed();
        if caught_up {
            let lag = if waited < POLL {
                Duration::ZERO
            } else {
                waited
            };
            return Ok(ReplicaState::Replica {
                lag,
                within: lag <= limit,
                measured: format!(
                    "it had replayed the primary's WAL position {target} {}",
                    after(lag)
                ),
            });
        }
        if waited >= limit {
            let behind: Option<i64> = row.try_get("behind_ms")?;
            let behind = Duration::from_millis(behind.unwrap_or(0).max(0) as u64);
            let last = match behind.is_zero() {
                true => String::new(),
                false => format!(
                    "; its last replayed transaction committed {} ago",
                    crate::values::round_duration(behind)
                ),
            };
            return Ok(ReplicaState::Replica {
                lag: waited.max(behind),
                within: false,
                measured: format!(
                    "it had not replayed the primary's WAL position {target} after {}{last}",
                    crate::values::round_duration(waited)
                ),
            });
        }
        tokio::time::sleep(POLL.min(limit.saturating_sub(waited))).await;
    }
}

/// "at once", or "after 1.2s".
fn after(lag: Duration) -> String {
    if lag.is_zero() {
        "at once".into()
    } else {
        format!("after {}", crate::values::round_duration(lag))
    }
}
