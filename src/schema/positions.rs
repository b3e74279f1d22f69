//! The check that the messages' positions are positions (issue 29, row 4; semantics.md
//! "Terms", position): every position is > 0, since a watermark of 0 means "nothing read".
//! With positions at or below 0 (ids counting up from −29 997), counter evidence k >= the
//! member's countable messages writes watermark 0, which is above every message: everything
//! unread becomes read, and the audit calls it `overcount`. Such a mapping is refused before
//! any stage reads or writes anything (`sql/common/preflight_positions.sql`).

use anyhow::Result;
use sqlx::{AnyConnection, Row};

use crate::dialect::{render, Dialect, SqlContext};
use crate::error::input_error;
use crate::mapping::Mapping;

/// Refuses a messages table with a position <= 0.
///
/// Errors: exit 2 (bad input) naming `messages.id` (where the mapping writes it), the
/// table, how many messages have such a position and the smallest of them; exit 3 when the
/// database fails.
pub async fn check(conn: &mut AnyConnection, mapping: &Mapping, dialect: Dialect) -> Result<()> {
    let ctx = SqlContext::new(mapping, dialect);
    let sql = render("preflight_positions.sql", &ctx, minijinja::context! {})?;
    let row = sqlx::query(&sql).fetch_one(&mut *conn).await?;
    let lo: Option<i64> = row.try_get("lo")?;
    let n: i64 = row.try_get("n")?;
    let Some(lo) = lo else {
        return Ok(());
    };
    Err(input_error(format!(
        "{} = {:?}: {n} message(s) of {} have a position <= 0 (the smallest: {lo}); positions must be > 0, since a watermark of 0 means \"nothing read\": map a position column whose values start at 1 (for example a per-conversation sequence, or the id offset by a constant in a view)",
        mapping.located("messages.id"),
        mapping.messages.id,
        mapping.messages.table,
    )))
}
