//! `--read-database URL` (issue 31): a streaming replica that runs a stage's reads while the
//! ledger, the runner lock and every write stay on the primary. [`open`] connects to it and
//! refuses a server that is not a replica of the primary (exit 2) or that lags more than the
//! limit (`--max-replica-lag`, exit 3: a state of the servers that a later run may not meet,
//! as a runner lock held by another run); [`Connections`] is the pair a stage is handed.

use anyhow::Result;
use serde::{Deserialize, Serialize};
use sqlx::AnyConnection;
use std::time::Duration;

use super::Dsn;
use crate::dialect::ReplicaState;
use crate::error::input_error;
use crate::values::round_duration;

/// The replica an audit read from, as its summary (text, JSON, the ledger) records it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReplicaLag {
    /// The replica's URL as printed (the password masked).
    pub url: String,
    /// How far it was behind the primary when the run started, in milliseconds (0: it had
    /// replayed everything the primary had written).
    pub lag_ms: u64,
    /// The limit it was held to (`--max-replica-lag`), in milliseconds.
    pub max_lag_ms: u64,
    /// How the lag was measured, in words (the engine's evidence).
    pub measured: String,
}

/// The connections of a stage: the primary (the ledger, the lock, every write) and, with
/// `--read-database`, the replica its reads run on; without one, both are the primary.
pub struct Connections<'a> {
    primary: &'a mut AnyConnection,
    replica: Option<&'a mut AnyConnection>,
}

impl<'a> Connections<'a> {
    /// One connection for everything.
    pub fn one(primary: &'a mut AnyConnection) -> Self {
        Connections {
            primary,
            replica: None,
        }
    }

    /// Reads on `replica` (None: on the primary), the rest on `primary`.
    pub fn reading_on(
        primary: &'a mut AnyConnection,
        replica: Option<&'a mut AnyConnection>,
    ) -> Self {
        Connections { primary, replica }
    }

    /// Where the ledger, the runner lock and every write go.
    pub fn primary(&mut self) -> &mut AnyConnection {
        self.primary
    }

    /// Where the reads go: the replica, or the primary without one.
    pub fn reads(&mut self) -> &mut AnyConnection {
        match &mut self.replica {
            Some(replica) => replica,
            None => self.primary,
        }
    }

    /// Whether the reads go to a replica.
    pub fn has_replica(&self) -> bool {
        self.replica.is_some()
    }
}

/// Connects to the replica `replica` of the primary `primary_dsn` (connected as `primary`)
/// and measures its lag, waiting at most `max_lag` for it to replay what the primary had
/// written ([`crate::dialect::Catalog::replica_state`]).
///
/// Errors: exit 2 when the replica's engine is not the primary's, the engine has no replicas
/// (SQLite), or the server is not a replica of the primary (a primary itself, a standby of
/// another cluster), named with the engine's evidence; exit 3 when it cannot be reached or
/// lags more than `max_lag` (the lag, the limit and how it was measured named).
pub async fn open(
    primary: &mut AnyConnection,
    primary_dsn: &Dsn,
    replica: &Dsn,
    max_lag: Duration,
) -> Result<(AnyConnection, ReplicaLag)> {
    if replica.dialect != primary_dsn.dialect {
        return Err(input_error(format!(
            "--read-database {replica} is a {} URL and --database {primary_dsn} a {} one: a replica runs its primary's engine",
            replica.dialect.name(),
            primary_dsn.dialect.name()
        )));
    }
    let mut conn = replica.connect().await?;
    let state = replica
        .dialect
        .catalog()
        .replica_state(primary, &mut conn, max_lag)
        .await?;
    match state {
        ReplicaState::NotReplica(why) => Err(input_error(format!(
            "--read-database {replica} is not a replica of --database {primary_dsn}: {why}; give a streaming replica of it, or leave --read-database out to read on the primary"
        ))),
        ReplicaState::Replica {
            lag,
            within: false,
            measured,
        } => Err(anyhow::anyhow!(
            "--read-database {replica} lags at least {} behind the primary, more than --max-replica-lag {}: {measured}; run again once it has caught up, raise --max-replica-lag, or leave --read-database out",
            round_duration(lag),
            round_duration(max_lag)
        )),
        ReplicaState::Replica { lag, measured, .. } => Ok((
            conn,
            ReplicaLag {
                url: replica.to_string(),
                lag_ms: lag.as_millis() as u64,
                max_lag_ms: max_lag.as_millis() as u64,
                measured,
            },
        )),
    }
}
