//! A MariaDB (or MySQL) binlog replica as `--read-database` (issue 31): whether the server is
//! one (`SHOW REPLICA STATUS` returns a row), and its lag: on MariaDB the time it takes to
//! apply the primary's `@@gtid_binlog_pos` of the moment asked (`MASTER_GTID_WAIT`, bounded by
//! the limit); where the primary has no such variable (MySQL), `Seconds_Behind_Master`
//! (`Seconds_Behind_Source`), which is NULL while replication is stopped.

use anyhow::{Context, Result};
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Column, Row};
use std::time::{Duration, Instant};

use crate::dialect::types::ReplicaState;
use crate::values::round_duration;

/// What `SHOW REPLICA STATUS` says of the replica's replication.
struct Status {
    /// `Seconds_Behind_Master` (`Seconds_Behind_Source`); None when NULL (stopped).
    behind: Option<u64>,
    /// `Slave_IO_Running` / `Slave_SQL_Running` (`Replica_…`), as the server words them.
    running: String,
}

/// [`crate::dialect::Catalog::replica_state`] on MariaDB/MySQL.
pub(super) async fn state(
    primary: &mut AnyConnection,
    replica: &mut AnyConnection,
    limit: Duration,
) -> Result<ReplicaState> {
    let Some(status) = replica_status(replica).await? else {
        return Ok(ReplicaState::NotReplica(
            "SHOW REPLICA STATUS returns no row there: it replicates from no primary".into(),
        ));
    };
    let position = match sqlx::query("SELECT @@gtid_binlog_pos AS pos")
        .fetch_one(&mut *primary)
        .await
    {
        Ok(row) => crate::values::text(&row, "pos")?,
        // MySQL has no @@gtid_binlog_pos: Seconds_Behind_Source alone tells.
        Err(_) => None,
    };
    let behind = status.behind.map(Duration::from_secs);
    let stopped = match behind {
        Some(_) => String::new(),
        None => format!(" (replication is stopped: {})", status.running),
    };
    let seconds = match behind {
        Some(b) => format!("Seconds_Behind_Master {}", round_duration(b)),
        None => "Seconds_Behind_Master NULL".to_string(),
    };
    let Some(position) = position else {
        let Some(lag) = behind else {
            return Ok(ReplicaState::Replica {
                lag: limit,
                within: false,
                measured: format!("its lag is unknown{stopped}"),
            });
        };
        return Ok(ReplicaState::Replica {
            lag,
            within: lag <= limit,
            measured: seconds,
        });
    };
    let started = Instant::now();
    let reached: Option<i64> = sqlx::query_scalar("SELECT CAST(MASTER_GTID_WAIT(?, ?) AS SIGNED)")
        .bind(&position)
        .bind(limit.as_secs_f64())
        .fetch_one(&mut *replica)
        .await
        .context("MASTER_GTID_WAIT on the replica")?;
    let waited = started.elapsed();
    if reached == Some(0) {
        let lag = if waited < Duration::from_millis(100) {
            Duration::ZERO
        } else {
            waited
        };
        let when = match lag.is_zero() {
            true => "at once".to_string(),
            false => format!("after {}", round_duration(lag)),
        };
        return Ok(ReplicaState::Replica {
            lag,
            within: lag <= limit,
            measured: format!("it had applied the primary's GTID position {position:?} {when}"),
        });
    }
    Ok(ReplicaState::Replica {
        lag: waited.max(limit).max(behind.unwrap_or_default()),
        within: false,
        measured: format!(
            "it had not applied the primary's GTID position {position:?} after {}; {seconds}{stopped}",
            round_duration(waited)
        ),
    })
}

/// The replica's `SHOW REPLICA STATUS` (`SHOW SLAVE STATUS` on a server older than MariaDB
/// 10.5.1 or MySQL 8.0.22), or None when it replicates from nothing.
///
/// Errors (exit 3): the statement fails, e.g. for want of the privilege to run it.
async fn replica_status(replica: &mut AnyConnection) -> Result<Option<Status>> {
    // Prepared: MariaDB and MySQL prepare SHOW REPLICA STATUS.
    let rows = match sqlx::query("SHOW REPLICA STATUS")
        .fetch_all(&mut *replica)
        .await
    {
        Ok(rows) => rows,
        Err(_) => sqlx::query("SHOW SLAVE STATUS")
            .fetch_all(&mut *replica)
            .await
            .context(
                "SHOW REPLICA STATUS on the --read-database server (its user needs the REPLICA MONITOR privilege on MariaDB, REPLICATION CLIENT on MySQL)",
            )?,
    };
    let Some(row) = rows.into_iter().next() else {
        return Ok(None);
    };
    let behind = column(&row, &["Seconds_Behind_Master", "Seconds_Behind_Source"])
        .and_then(|v| v.trim().parse::<u64>().ok());
    let mut running = Vec::new();
    for names in [
        ["Slave_IO_Running", "Replica_IO_Running"],
        ["Slave_SQL_Running", "Replica_SQL_Running"],
    ] {
        if let Some(v) = column(&row, &names) {
            running.push(format!("{} {v}", names[0]));
        }
    }
    Ok(Some(Status {
        behind,
        running: running.join(", "),
    }))
}

/// The first of `names` the row has, as text (a number is written out); None when NULL or
/// missing.
fn column(row: &AnyRow, names: &[&str]) -> Option<String> {
    let index = row
        .columns()
        .iter()
        .position(|c| names.iter().any(|n| c.name().eq_ignore_ascii_case(n)))?;
    if let Ok(v) = row.try_get::<Option<i64>, _>(index) {
        return v.map(|v| v.to_string());
    }
    crate::values::text(row, index).ok().flatten()
}
