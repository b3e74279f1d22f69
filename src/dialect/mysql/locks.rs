//! Mysql's runner lock ([`RunnerLocks`]).

use anyhow::Result;
use sqlx::{AnyConnection, Row};

use super::Mysql;
use crate::dialect::lock_support::advisory_key;
use crate::dialect::traits::RunnerLocks;
use crate::dialect::types::{BoxFuture, LockAttempt, LockKind};
use crate::values::text;

impl RunnerLocks for Mysql {
    /// GET_LOCK names are server-wide (PostgreSQL advisory locks are per database): the
    /// database is part of the name, at most 64 characters in all.
    fn runner_lock_name<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        name: &'a str,
    ) -> BoxFuture<'a, Result<String>> {
        Box::pin(async move {
            let row = sqlx::query("SELECT DATABASE()")
                .fetch_one(&mut *conn)
                .await?;
            let db = text(&row, 0)?;
            Ok(format!(
                "{name}:{:016x}",
                advisory_key(&db.unwrap_or_default())
            ))
        })
    }

    /// A named lock (`GET_LOCK` with no wait, [`LockKind::Session`]); the holder is named from
    /// the process list. On a Galera node, where `GET_LOCK` is per node, a lock row
    /// ([`super::galera`], [`LockKind::Row`]). The only runner-lock call that asks the server
    /// whether it is a Galera node.
    fn try_runner_lock<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        name: &'a str,
    ) -> BoxFuture<'a, Result<LockAttempt>> {
        Box::pin(async move {
            if super::galera::is_galera(conn).await? {
                return super::galera::try_lock(conn, name).await;
            }
            let got: Option<i64> = sqlx::query_scalar("SELECT CAST(GET_LOCK(?, 0) AS SIGNED)")
                .bind(name.to_string())
                .fetch_one(&mut *conn)
                .await?;
            if got == Some(1) {
                return Ok(LockAttempt::Taken(LockKind::Session));
            }
            let holder = sqlx::query(
                "SELECT CAST(p.ID AS SIGNED), CAST(p.HOST AS CHAR(255)), CAST(p.TIME AS SIGNED) \
                 FROM information_schema.PROCESSLIST p WHERE p.ID = IS_USED_LOCK(?)",
            )
            .bind(name.to_string())
            .fetch_optional(&mut *conn)
            .await
            .ok()
            .flatten()
            .map(|r| {
                format!(
                    "connection {} from {}, for {} s",
                    r.try_get::<i64, _>(0).unwrap_or_default(),
                    text(&r, 1).ok().flatten().unwrap_or_default(),
                    r.try_get::<i64, _>(2).unwrap_or_default()
                )
            })
            .unwrap_or_else(|| "another connection".to_string());
            Ok(LockAttempt::Held(format!("held by {holder}")))
        })
    }

    /// The lock row's heartbeat on a Galera node ([`LockKind::Row`]); nothing, and no
    /// statement, for `GET_LOCK` ([`LockKind::Session`]: it lives with the session).
    fn refresh_runner_lock<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        name: &'a str,
        kind: LockKind,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            if kind == LockKind::Row {
                super::galera::refresh(conn, name).await?;
            }
            Ok(())
        })
    }

    /// `RELEASE_LOCK` ([`LockKind::Session`]), or the lock row deleted ([`LockKind::Row`]).
    fn release_runner_lock<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        name: &'a str,
        kind: LockKind,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            if kind == LockKind::Row {
                return super::galera::release(conn, name).await;
            }
            sqlx::query("SELECT RELEASE_LOCK(?)")
                .bind(name.to_string())
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
            if super::galera::is_galera(conn).await? {
                return super::galera::held(conn, name).await;
            }
            let holder: Option<i64> = sqlx::query_scalar("SELECT CAST(IS_USED_LOCK(?) AS SIGNED)")
                .bind(name.to_string())
                .fetch_one(&mut *conn)
                .await?;
            Ok(holder.is_some())
        })
    }
}
