//! Postgres's runner lock ([`RunnerLocks`]).

use anyhow::Result;
use sqlx::{AnyConnection, Row};

use super::Postgres;
use crate::dialect::lock_support::advisory_key;
use crate::dialect::traits::RunnerLocks;
use crate::dialect::types::{BoxFuture, LockAttempt, LockKind};
use crate::values::text;

impl RunnerLocks for Postgres {
    /// A session advisory lock (`pg_try_advisory_lock`) on the name's [`advisory_key`]; the
    /// holder is named from `pg_locks` and `pg_stat_activity`. The session that takes it is
    /// named `tidemark` (`application_name`), so that a second runner can say who holds it.
    fn try_runner_lock<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        name: &'a str,
    ) -> BoxFuture<'a, Result<LockAttempt>> {
        Box::pin(async move {
            let key = advisory_key(name);
            let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
                .bind(key)
                .fetch_one(&mut *conn)
                .await?;
            if !got {
                let holder = sqlx::query(
                    "SELECT CAST(a.pid AS BIGINT), COALESCE(a.client_addr::text, 'local'), COALESCE(a.application_name, ''), \
                     COALESCE(to_char(a.backend_start, 'YYYY-MM-DD HH24:MI:SS'), '') \
                     FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
                     WHERE l.locktype = 'advisory' AND l.granted \
                       AND ((CAST(l.classid AS BIGINT) << 32) | CAST(l.objid AS BIGINT)) = $1 LIMIT 1",
                )
                .bind(key)
                .fetch_optional(&mut *conn)
                .await
                .ok()
                .flatten()
                .map(|r| {
                    format!(
                        "server process {} from {} ({}), connected since {}",
                        r.try_get::<i64, _>(0).unwrap_or_default(),
                        text(&r, 1).ok().flatten().unwrap_or_default(),
                        text(&r, 2).ok().flatten().unwrap_or_default(),
                        text(&r, 3).ok().flatten().unwrap_or_default()
                    )
                })
                .unwrap_or_else(|| "another session".to_string());
                return Ok(LockAttempt::Held(format!("held by {holder}")));
            }
            // `Executor::execute` with plain text, as `raw_sql` would run it: `raw_sql` inside
            // this boxed `Send` future trips the "Executor is not general enough" limitation.
            sqlx::Executor::execute(&mut *conn, "SET application_name = 'tidemark'").await?;
            Ok(LockAttempt::Taken(LockKind::Session))
        })
    }

    fn release_runner_lock<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        name: &'a str,
        _kind: LockKind,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            sqlx::query("SELECT pg_advisory_unlock($1)")
                .bind(advisory_key(name))
                .execute(&mut *conn)
                .await?;
            Ok(())
        })
    }

    fn runner_lock_held<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        name: &'a str,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let n: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND granted \
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                 AND ((CAST(classid AS BIGINT) << 32) | CAST(objid AS BIGINT)) = $1",
            )
            .bind(advisory_key(name))
            .fetch_one(&mut *conn)
            .await?;
            Ok(n > 0)
        })
    }
}
