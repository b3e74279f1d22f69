//! The kinds of the mapping's time columns, compared pairwise before any stage runs (issue 29,
//! rows 2 and 9; semantics.md "Backfill", timestamp evidence): a message's `created_at` is
//! compared with each timestamp evidence's "read at" time and with `[members] join_time`.
//!
//! - A number (an epoch integer) beside a date/time type cannot be compared by the server
//!   (PostgreSQL: `operator does not exist: bigint <= timestamp with time zone`; MariaDB:
//!   `1292 Incorrect datetime value`): refused, exit 2, naming both columns and their types,
//!   before anything is written (before the ledger's run). SQLite compares every time as Unix
//!   seconds ([`crate::dialect::Spelling::time_value`]): never refused there.
//! - A wall time without zone (PostgreSQL `timestamp`, MariaDB `DATETIME`) beside an instant
//!   (`timestamptz`, `TIMESTAMP`) compares through the session's time zone, which tidemark
//!   sets to the database's own or `--time-zone` ([`crate::dialect::Sessions::session_time_zone`]):
//!   allowed, with a notice naming both columns, since the result depends on that zone.

use anyhow::Result;
use sqlx::AnyConnection;

use crate::db::catalog::column_type;
use crate::dialect::{Dialect, SqlContext, TypeClass};
use crate::error::input_error;
use crate::mapping::{EvidenceKind, Mapping};

/// What a time column holds, as far as comparing two of them goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeKind {
    /// A number (integer, decimal or floating point): an epoch time.
    Number,
    /// A date/time without zone: a wall time, read in the session's zone where it meets an
    /// instant.
    Wall,
    /// A date/time with zone: an instant.
    Zoned,
    /// Anything else (SQLite text, no declared type): compared as the engine reads it.
    Other,
}

impl TimeKind {
    /// The kind of a column declared `declared` on `dialect`.
    pub fn of(dialect: Dialect, declared: &str) -> TimeKind {
        let catalog = dialect.catalog();
        match catalog.type_class(declared) {
            TypeClass::Integer | TypeClass::Decimal | TypeClass::Float => TimeKind::Number,
            TypeClass::Timestamp if catalog.time_has_zone(declared) => TimeKind::Zoned,
            TypeClass::Timestamp => TimeKind::Wall,
            _ => TimeKind::Other,
        }
    }

    /// How the kind reads in a message.
    fn describe(self) -> &'static str {
        match self {
            TimeKind::Number => "a number",
            TimeKind::Wall => "a time without time zone",
            TimeKind::Zoned => "a time with time zone",
            TimeKind::Other => "a time",
        }
    }
}

/// One mapped time column: its mapping key, table and column.
struct TimeColumn {
    key: String,
    table: String,
    column: String,
}

/// The time columns compared with `messages.created_at`: each timestamp evidence's column and
/// `[members] join_time`.
fn compared(mapping: &Mapping) -> Vec<TimeColumn> {
    let mut out = Vec::new();
    for (i, e) in mapping.evidence.iter().enumerate() {
        if e.kind() != EvidenceKind::Timestamp {
            continue;
        }
        if let Some(src) = e.source() {
            out.push(TimeColumn {
                key: format!("evidence[{}].column", i + 1),
                table: src.table.clone(),
                column: src.column.clone(),
            });
        }
    }
    if let Some(mb) = &mapping.members {
        if let Some(j) = &mb.join_time {
            out.push(TimeColumn {
                key: "members.join_time".into(),
                table: mb.table.clone(),
                column: j.clone(),
            });
        }
    }
    out
}

/// Whether two kinds cannot be compared by the server: a number beside a date/time.
fn incomparable(a: TimeKind, b: TimeKind) -> bool {
    let time = |k| matches!(k, TimeKind::Wall | TimeKind::Zoned);
    (a == TimeKind::Number && time(b)) || (b == TimeKind::Number && time(a))
}

/// Checks `messages.created_at` against every time column compared with it (see the module
/// documentation) and returns the notices: one per pair of a wall time and an instant. A
/// column the catalog does not know is skipped (the preflight's query reports it).
///
/// Errors (exit 2): a number beside a date/time, on an engine that does not compare times as
/// numbers, e.g. `tidemark.toml:6:14: messages.created_at = "created_at": column
/// messages.created_at is a number (bigint) and evidence[1].column reads.last_read_at is a
/// time with time zone (timestamp with time zone): …`. Exit 3: the catalog cannot be read.
pub async fn check(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
) -> Result<Vec<String>> {
    let Some(created) = mapping.messages.created_at.clone() else {
        return Ok(Vec::new());
    };
    let others = compared(mapping);
    if others.is_empty() {
        return Ok(Vec::new());
    }
    let ctx = SqlContext::new(mapping, dialect);
    let table = mapping.messages.table.clone();
    let Some(declared) = column_type(conn, &ctx, &table, &created).await? else {
        return Ok(Vec::new());
    };
    let kind = TimeKind::of(dialect, &declared);
    let mut notices = Vec::new();
    for other in others {
        let Some(other_declared) = column_type(conn, &ctx, &other.table, &other.column).await?
        else {
            continue;
        };
        let other_kind = TimeKind::of(dialect, &other_declared);
        let pair = format!(
            "column {table}.{created} is {} ({declared}) and {} {}.{} is {} ({other_declared})",
            kind.describe(),
            other.key,
            other.table,
            other.column,
            other_kind.describe(),
        );
        if incomparable(kind, other_kind) && !dialect.catalog().dates_in_text() {
            return Err(input_error(format!(
                "{} = {created:?}: {pair}: the database cannot compare a number with a time; \
                 map two times or two numbers (for example a view or a generated column that \
                 converts one of them)",
                mapping.located("messages.created_at"),
            )));
        }
        let zones = [kind, other_kind];
        if zones.contains(&TimeKind::Wall) && zones.contains(&TimeKind::Zoned) {
            notices.push(format!(
                "the time columns differ in kind: {pair}; they are compared in the session's \
                 time zone, the database's own (as psql or mysql would) unless --time-zone \
                 names another (the book: docs/src/time-zones.md, \"Time zones and zero dates\")"
            ));
        }
    }
    Ok(notices)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_per_dialect() {
        let pg = Dialect::Postgres;
        assert_eq!(TimeKind::of(pg, "bigint"), TimeKind::Number);
        assert_eq!(
            TimeKind::of(pg, "timestamp with time zone"),
            TimeKind::Zoned
        );
        assert_eq!(
            TimeKind::of(pg, "timestamp without time zone"),
            TimeKind::Wall
        );
        let my = Dialect::Mysql;
        assert_eq!(TimeKind::of(my, "timestamp"), TimeKind::Zoned);
        assert_eq!(TimeKind::of(my, "datetime(6)"), TimeKind::Wall);
        assert_eq!(TimeKind::of(my, "int(10) unsigned"), TimeKind::Number);
        assert!(incomparable(TimeKind::Number, TimeKind::Wall));
        assert!(!incomparable(TimeKind::Wall, TimeKind::Zoned));
        assert!(!incomparable(TimeKind::Number, TimeKind::Other));
    }
}
