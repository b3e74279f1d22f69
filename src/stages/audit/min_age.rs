//! `--min-age`: leave out conversations with recent writes (writes still in flight in the
//! application are not drift), as a predicate added to the run's scope.

use anyhow::Result;
use sqlx::{AnyConnection, Row};
use std::time::Duration;

use crate::dialect::SqlContext;
use crate::error::input_error;
use crate::mapping::Mapping;
use crate::stages::{MinAge, Scope};

/// The `--min-age` filter ([`MinAge`]: conversations with a message newer than now - `age`
/// are left out), and how many conversations it leaves out now. An integer `created_at` is
/// read as Unix seconds, or milliseconds when its newest value is above 10^11 (after 1973 in
/// ms, beyond 5138 in s). `ctx` is the run's: its conversation keys compared as it says
/// (issue 25).
///
/// Errors (exit 2): the mapping has no `messages.created_at`.
pub(crate) async fn quiescence(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    ctx: &SqlContext,
    scope: &Scope,
    age: Duration,
) -> Result<(MinAge, u64)> {
    let Some(created) = mapping.messages.created_at.as_deref() else {
        return Err(input_error(
            "--min-age needs messages.created_at in the mapping: the time of each message",
        ));
    };
    let dialect = ctx.dialect;
    let q = |s: &str| dialect.quote(s);
    let (table, conv, created_q) = (
        q(&mapping.messages.table),
        q(&mapping.messages.conversation),
        q(created),
    );
    let declared = crate::db::catalog::column_type(conn, ctx, &mapping.messages.table, created)
        .await?
        .unwrap_or_default()
        .to_ascii_lowercase();
    let secs = age.as_secs();
    let cutoff = if declared.contains("int") {
        let newest: Option<i64> = sqlx::query(&format!(
            "SELECT CAST(MAX({created_q}) AS {}) AS newest FROM {table}",
            dialect.int_cast()
        ))
        .fetch_one(&mut *conn)
        .await?
        .try_get("newest")?;
        let now_s = crate::values::now_ms() / 1000;
        if newest.unwrap_or(0) > 100_000_000_000 {
            ((now_s - secs as i64) * 1000).to_string()
        } else {
            (now_s - secs as i64).to_string()
        }
    } else {
        dialect.seconds_ago(secs)
    };
    // The creation time as the stages compare times (issue 29 row 3: SQLite text times).
    let at = |alias: &str| ctx.msg.time.replace("{v}", &format!("{alias}{created_q}"));
    let recent = at("tm_recent.");
    let k = &ctx.msg.conv_k;
    let filter = MinAge {
        quiet_sql: format!(
            "NOT EXISTS (SELECT 1 FROM {table} tm_recent WHERE {} AND {recent} > {cutoff})",
            k.eq(&format!("tm_recent.{conv}"), "{col}")
        ),
        // The keys passed on as the statements pass them on (`out`: a uuid key on PostgreSQL
        // as its text, issue 29 row 14).
        recent_sql: format!(
            "SELECT DISTINCT {} AS conv FROM {table} tm_recent WHERE {recent} > {cutoff}",
            k.out.replace("{v}", &format!("tm_recent.{conv}"))
        ),
        recent_col: format!("tm_recent.{conv}"),
        cutoff: cutoff.clone(),
        recent_k: k.clone(),
    };
    let ordered = k.order_of(&conv);
    let mut in_scope = String::new();
    if let Some(sample) = &scope.sample_sql {
        in_scope = format!(" AND {}", sample.replace("{col}", &conv));
    }
    let mut binds = Vec::new();
    if let Some(from) = &scope.from {
        in_scope.push_str(&format!(
            " AND {ordered} >= {}",
            dialect.placeholder(binds.len() + 1)
        ));
        binds.push(from.clone());
    }
    if let Some(to) = &scope.to {
        in_scope.push_str(&format!(
            " AND {ordered} <= {}",
            dialect.placeholder(binds.len() + 1)
        ));
        binds.push(to.clone());
    }
    let sql = format!(
        "SELECT COUNT(DISTINCT {conv}) AS n FROM {table} WHERE {} > {cutoff}{in_scope}",
        at("")
    );
    let mut query = sqlx::query(&sql);
    for k in &binds {
        query = k.bind(query);
    }
    let left_out: i64 = query.fetch_one(&mut *conn).await?.try_get("n")?;
    Ok((filter, left_out.max(0) as u64))
}
