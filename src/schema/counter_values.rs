//! The check of the counter's values (issue 25 rows 2 and 3): every stage reads the counter as
//! `CAST(… AS <64-bit integer>)` (`sql/common/macros.sql`, `counter_rows`) and the contract
//! archives the columns it drops as integers, so a value that is not a whole number within
//! the i64 range is bad input, refused before any stage reads it. Otherwise MariaDB reads a
//! `BIGINT UNSIGNED` 18446744073709551615 as -1 (the backfill then marks everything read),
//! PostgreSQL fails mid-stage with "bigint out of range" naming nothing, and a `numeric` 2.7
//! is audited as 3 (SQLite: 2) and archived as 3.
//!
//! The declared type decides whether the values need reading at all
//! ([`crate::dialect::Catalog::holds_only_int64`]): a PostgreSQL `bigint` or a MariaDB `INT`
//! cannot hold a bad value; a `numeric`, a `DECIMAL`, a `BIGINT UNSIGNED` and any SQLite
//! column can. When they can, one query (`sql/common/preflight_counter_values.sql`) streams
//! the table and stops at the first bad row (`LIMIT 1`, no sort): on a table whose values are
//! all good, one sequential read of it; with `combine = "sum"` also one aggregation of the
//! members' sums, which can leave the range when the rows do not.

use anyhow::Result;
use sqlx::AnyConnection;

use crate::db::catalog::column_type;
use crate::dialect::{render, Dialect, Joins, SqlContext};
use crate::error::input_error;
use crate::mapping::{Combine, Mapping, Shape};
use crate::values::text;

/// The values to check: a table's rows as `preflight_counter_values.sql` reads them (every
/// identifier quoted, every SQL text over the row `this`).
pub struct Values<'a> {
    /// The table.
    pub table: &'a str,
    /// The rows its SQL texts read besides their own (`conv`, `usr`).
    pub joins: &'a Joins,
    /// The conversation key column.
    pub conv: &'a str,
    /// The user key column the `usr` row is joined by (empty: none).
    pub user: &'a str,
    /// The subject key column: the user, the message's position (empty: the conversation
    /// alone keys the rows).
    pub subject: &'a str,
    /// The value.
    pub value: &'a str,
    /// Which rows count (None: all).
    pub keep: Option<&'a str>,
}

/// The first value found that is not a whole number within the 64-bit range, as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Its row's conversation key.
    pub conv: String,
    /// Its row's subject key (empty: none).
    pub subject: String,
    /// The value as the database prints it (`2.7`, `18446744073709551615`, `1.0e+20`).
    pub value: String,
}

/// The first of `values` that is not a whole number within the 64-bit integer range (each
/// row's value, or `grouped`, the sum of each (conversation, subject)'s rows), or None.
///
/// Errors (exit 3): the database fails.
pub async fn first_not_int64(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    values: &Values<'_>,
    grouped: bool,
) -> Result<Option<Found>> {
    let sql = statement(ctx, values, grouped)?;
    let Some(row) = sqlx::query(&sql).fetch_optional(&mut *conn).await? else {
        return Ok(None);
    };
    Ok(Some(Found {
        conv: text(&row, "conv")?.unwrap_or_default(),
        subject: text(&row, "sub")?.unwrap_or_default(),
        value: text(&row, "v")?.unwrap_or_default(),
    }))
}

/// The statement [`first_not_int64`] sends (`preflight_counter_values.sql`): at most one row
/// (`conv`, `sub`, `v`).
///
/// Errors: a template that fails to render (a bug in tidemark, exit 3).
pub fn statement(ctx: &SqlContext, values: &Values<'_>, grouped: bool) -> Result<String> {
    let d = ctx.dialect;
    render(
        "preflight_counter_values.sql",
        ctx,
        minijinja::context! {
            t => values.table,
            j => values.joins,
            conv_col => values.conv,
            user_col => values.user,
            sub_col => values.subject,
            value => values.value,
            keep => values.keep,
            grouped => grouped,
            not_int64 => d.not_int64(),
            wide_sum => d.wide_sum(),
            text_type => d.text_type(),
        },
    )
}

/// The counter's values as [`check`] reads them under `ctx` (a per-message counter keyed by
/// its message, a member's by its user).
pub fn counter_values<'a>(ctx: &'a SqlContext, shape: Shape) -> Values<'a> {
    let (conv, subject) = match shape {
        Shape::PerMember | Shape::ReadFlags => (&ctx.ctr.conv, &ctx.ctr.user),
        Shape::PerMessage => (&ctx.msg.conv, &ctx.msg.id),
    };
    Values {
        table: &ctx.ctr.table,
        joins: &ctx.ctr.joins,
        conv,
        user: &ctx.ctr.user,
        subject,
        value: &ctx.ctr.value,
        keep: ctx.ctr.rows.as_deref(),
    }
}

/// Whether a column or expression of type `declared` (None: unknown) may hold a value that
/// is not a whole number within the 64-bit range, so that its values must be read.
pub fn may_hold_other(dialect: Dialect, declared: Option<&str>) -> bool {
    !declared.is_some_and(|t| dialect.catalog().holds_only_int64(t))
}

/// Checks that every counter value (`[counter] column` or `value`, over the rows `[counter]
/// rows` keeps; under `combine = "sum"` each row and each member's sum) is a whole number
/// within the 64-bit integer range. `from` is the counter's own rows as the stages read them
/// (for the type of `[counter] value`, [`crate::dialect::Catalog::expression_type`]).
///
/// Errors (exit 2): the first bad value found, naming the mapping key with where it is
/// written, the table and column (or the expression), the value and the row's keys:
/// `tidemark.toml:19:10: counter.column = "unread_count": unread_counters.unread_count holds
/// 2.7 for conversation 1, user u2 (the first such row found): …`. Exit 3: the database fails.
pub async fn check(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
    from: &str,
) -> Result<()> {
    let c = &mapping.counter;
    if c.shape == Shape::ReadFlags {
        // A count of flag rows: always a whole number in range.
        return Ok(());
    }
    let ctx = SqlContext::new(mapping, dialect);
    let declared = match (&c.value, c.stored_column()) {
        (Some(value), _) => dialect.catalog().expression_type(conn, value, from).await?,
        (None, Some(column)) => column_type(conn, &ctx, mapping.counter_table(), column).await?,
        (None, None) => None,
    };
    let values = counter_values(&ctx, c.shape);
    let rows = may_hold_other(dialect, declared.as_deref());
    let sums = c.combine == Some(Combine::Sum);
    for grouped in [false, true] {
        if (grouped && !sums) || (!grouped && !rows) {
            continue;
        }
        if let Some(found) = first_not_int64(conn, &ctx, &values, grouped).await? {
            return Err(input_error(message(mapping, &found, grouped)));
        }
    }
    Ok(())
}

/// The error's words: the mapping key at fault, what holds the value, the value, the row's
/// keys and the rule.
fn message(mapping: &Mapping, found: &Found, grouped: bool) -> String {
    let c = &mapping.counter;
    let table = mapping.counter_table();
    let (key, written) = match &c.value {
        Some(v) => ("counter.value", v.as_str()),
        None => ("counter.column", c.column.as_str()),
    };
    let what = match (&c.value, grouped) {
        (_, true) => format!("the sum of a member's rows in {table}"),
        (Some(_), false) => format!("the expression over {table}"),
        (None, false) => format!("{table}.{}", c.column),
    };
    // Only a per_member counter takes `rows` (crate::mapping::rows).
    let (subject, fix) = match c.shape {
        Shape::PerMember | Shape::ReadFlags => (
            "user",
            "correct the row, or leave it out with `[counter] rows = \"…\"`",
        ),
        Shape::PerMessage => ("message", "correct the row"),
    };
    format!(
        "{} = {written:?}: {what} holds {} for conversation {}, {subject} {} (the first such row found): {}; {fix}",
        mapping.located(key),
        found.value,
        found.conv,
        found.subject,
        RULE
    )
}

/// What a counter value must be, in words.
pub const RULE: &str = "a counter must be a whole number within the 64-bit integer range (-9223372036854775808 to 9223372036854775807)";
