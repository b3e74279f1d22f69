//! The type check of every mapped column, before any statement of a stage runs (issue 13,
//! rows 3 and 4): positions and counters must be integers, the time columns of timestamp
//! evidence date/time types (or integers: epoch numbers), and a predicate that is a bare
//! column must be a boolean (or integer) column. Otherwise a text counter holding `'7abc'` is
//! read as 7 on MariaDB and a text `id` orders `'10'` before `'9'` on SQLite, silently.
//!
//! A counter of a decimal type (or of no declared type) passes here: its values are checked
//! by [`super::counter_values`] (whole numbers within the 64-bit range).
//!
//! The declared type comes from the catalog (`sql/<dialect>/column_type.sql`); for SQLite it
//! is the declared type's affinity (a view's column has the type of the column it selects,
//! none for an expression: not checked).

use anyhow::Result;
use sqlx::AnyConnection;

use crate::db::catalog::column_type;
use crate::dialect::{Dialect, SqlContext, TypeClass};
use crate::error::input_error;
use crate::mapping::{EvidenceKind, Mapping};

/// How a type class reads in a message ("text", "a date/time type"…).
fn describe(class: TypeClass, declared: &str) -> String {
    match class {
        TypeClass::Text => "text".into(),
        TypeClass::Timestamp => format!("a date/time type ({declared})"),
        TypeClass::Boolean => "boolean".into(),
        TypeClass::Float => format!("floating point ({declared})"),
        _ => format!("of type {declared}"),
    }
}

/// What a mapped column must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A message position (messages id, join position, position evidence).
    Position,
    /// An unread counter.
    Counter,
    /// A time (messages created_at, timestamp evidence).
    Time,
    /// A predicate that is a bare column.
    Predicate,
}

/// Whether a column of `class` can play `role`, and if not, what it must be. `dates_in_text`:
/// the engine keeps dates in text columns ([`crate::dialect::Catalog::dates_in_text`]).
fn accepts(role: Role, class: TypeClass, dates_in_text: bool) -> Result<(), &'static str> {
    use TypeClass::*;
    let ok = match role {
        Role::Position => matches!(class, Integer | Decimal | Unknown),
        Role::Counter => matches!(class, Integer | Decimal | Unknown),
        Role::Time => {
            matches!(class, Timestamp | Integer | Decimal | Float | Unknown)
                || (class == Text && dates_in_text)
        }
        Role::Predicate => matches!(class, Boolean | Integer | Unknown),
    };
    if ok {
        return Ok(());
    }
    Err(match role {
        Role::Position => "a position must be an integer",
        Role::Counter => "a counter must be an integer",
        Role::Time => "a time must be a date/time type (or an integer epoch)",
        Role::Predicate => {
            "a predicate must be a boolean expression, e.g. \"<column> IS NULL\" or \"<column> = 1\""
        }
    })
}

/// The column a predicate names when it is a bare identifier (`left_at`, `"left_at"`,
/// `` `left_at` ``), else None: an expression is left to the database's own check.
fn bare_column(predicate: &str) -> Option<String> {
    let p = predicate.trim();
    let inner = ["\"", "`"]
        .iter()
        .find_map(|q| p.strip_prefix(q).and_then(|r| r.strip_suffix(q)))
        .unwrap_or(p);
    let ok = !inner.is_empty()
        && inner.chars().all(|c| c.is_alphanumeric() || c == '_')
        && !inner.chars().next().is_some_and(|c| c.is_ascii_digit());
    let keyword = ["true", "false", "null"].contains(&inner.to_ascii_lowercase().as_str());
    (ok && !keyword).then(|| inner.to_string())
}

/// One column to check: (dotted mapping key, e.g. `evidence[2].column`, and its value as
/// written; table, column, role).
type Check = ((String, String), String, String, Role);

/// Every mapped column with a type rule, with its mapping key.
fn checks(mapping: &Mapping) -> Vec<Check> {
    let mut out: Vec<Check> = Vec::new();
    let key = |k: &str, v: &str| (k.to_string(), v.to_string());
    let m = &mapping.messages;
    out.push((
        key("messages.id", &m.id),
        m.table.clone(),
        m.id.clone(),
        Role::Position,
    ));
    if let Some(c) = &m.created_at {
        out.push((
            key("messages.created_at", c),
            m.table.clone(),
            c.clone(),
            Role::Time,
        ));
    }
    for (k, p) in [
        ("messages.countable", &m.countable),
        ("messages.legacy_countable", &m.legacy_countable),
    ] {
        if let Some(col) = p.as_deref().and_then(bare_column) {
            let p = p.as_deref().unwrap_or_default();
            out.push((key(k, p), m.table.clone(), col, Role::Predicate));
        }
    }
    if let Some(mb) = &mapping.members {
        if let Some(j) = &mb.join_position {
            out.push((
                key("members.join_position", j),
                mb.table.clone(),
                j.clone(),
                Role::Position,
            ));
        }
        if let Some(j) = &mb.join_time {
            out.push((
                key("members.join_time", j),
                mb.table.clone(),
                j.clone(),
                Role::Time,
            ));
        }
        if let Some(col) = mb.active.as_deref().and_then(bare_column) {
            let p = mb.active.as_deref().unwrap_or_default();
            out.push((
                key("members.active", p),
                mb.table.clone(),
                col,
                Role::Predicate,
            ));
        }
    }
    let c = &mapping.counter;
    if let Some(m) = &c.message {
        // Shape read_flags: the flag row's message, matched with `messages.id`.
        out.push((
            key("counter.message", m),
            mapping.counter_table().to_string(),
            m.clone(),
            Role::Position,
        ));
    }
    if c.stored_column().is_some() {
        out.push((
            key("counter.column", &c.column),
            mapping.counter_table().to_string(),
            c.column.clone(),
            Role::Counter,
        ));
    }
    // Issue 12: the columns the contract drops are archived as integers.
    if mapping.contract.is_some() {
        if let crate::mapping::ContractTargets::Columns(cols) = mapping.contract_targets() {
            for dc in cols {
                out.push((
                    key("contract.columns", &format!("{}.{}", dc.table, dc.column)),
                    dc.table,
                    dc.column,
                    Role::Counter,
                ));
            }
        }
    }
    for (i, e) in mapping.evidence.iter().enumerate() {
        let role = match e.kind() {
            EvidenceKind::Position => Role::Position,
            EvidenceKind::Timestamp => Role::Time,
            // The flag row's message column, matched with `messages.id`.
            EvidenceKind::ReadFlags => Role::Position,
            _ => continue,
        };
        let column_key = if e.kind() == EvidenceKind::ReadFlags {
            "message"
        } else {
            "column"
        };
        if let Some(src) = e.source() {
            let n = i + 1;
            match &src.lookup {
                // The column holds a key (any type): the lookup's position column is the
                // position.
                Some(l) => out.push((
                    key(&format!("evidence[{n}].lookup.position"), &l.position),
                    l.table.clone(),
                    l.position.clone(),
                    Role::Position,
                )),
                None => out.push((
                    key(&format!("evidence[{n}].{column_key}"), &src.column),
                    src.table.clone(),
                    src.column.clone(),
                    role,
                )),
            }
        }
    }
    out
}

/// Checks the declared type of every mapped column (see the module documentation). A column
/// the catalog does not know is skipped here: the preflight's query reports it.
///
/// Errors (exit 2): the first column of the wrong type, named by its mapping key with where
/// it is written, e.g. `tidemark.toml:4:6: messages.id = "body": column messages.body is
/// text; a position must be an integer`. Exit 3: the catalog cannot be read.
pub async fn check(conn: &mut AnyConnection, mapping: &Mapping, dialect: Dialect) -> Result<()> {
    let ctx = SqlContext::new(mapping, dialect);
    for ((key, value), table, column, role) in checks(mapping) {
        let Some(declared) = column_type(conn, &ctx, &table, &column).await? else {
            continue;
        };
        let class = dialect.catalog().type_class(&declared);
        if let Err(must) = accepts(role, class, dialect.catalog().dates_in_text()) {
            return Err(input_error(format!(
                "{} = {value:?}: column {table}.{column} is {}; {must}",
                mapping.located(&key),
                describe(class, &declared)
            )));
        }
    }
    Ok(())
}

/// Checks the type of `[counter] value`, an SQL expression (issue 12), before any stage
/// reads it: it must be an integer, as a counter column must. `from` is the counter's own
/// rows as the stages read them (`<counter table> this [LEFT JOIN … conv] [LEFT JOIN … usr]
/// WHERE (<rows>)`), already checked to resolve. How the type is found is the dialect's
/// ([`crate::dialect::Catalog::expression_type`]): the declared type of the expression
/// over zero rows on PostgreSQL and MySQL/MariaDB; on SQLite, whose values carry their own
/// types, the type of the first value that is not an integer (or NULL).
///
/// Errors (exit 2): `file:line:col: counter.value = "…": the expression is text (…); a
/// counter must be an integer`. Exit 3: the database fails.
pub async fn check_value(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
    from: &str,
) -> Result<()> {
    let Some(value) = mapping.counter.value.as_deref() else {
        return Ok(());
    };
    let Some(found) = dialect.catalog().expression_type(conn, value, from).await? else {
        return Ok(());
    };
    let class = dialect.catalog().type_class(&found);
    if let Err(must) = accepts(Role::Counter, class, dialect.catalog().dates_in_text()) {
        let mut what = describe(class, &found);
        // The engine's own name of the type, unless the description already gives it.
        if !what.contains(&format!("({found})")) && !what.starts_with("of type") {
            what.push_str(&format!(" ({} type {found})", dialect.name()));
        }
        return Err(input_error(format!(
            "{} = {value:?}: the expression is {what}; {must}",
            mapping.located("counter.value"),
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_per_dialect() {
        use TypeClass as Family;
        let family = |d: Dialect, t: &str| d.catalog().type_class(t);
        let pg = Dialect::Postgres;
        assert_eq!(family(pg, "bigint"), Family::Integer);
        assert_eq!(family(pg, "character varying(20)"), Family::Text);
        assert_eq!(family(pg, "timestamp with time zone"), Family::Timestamp);
        assert_eq!(family(pg, "interval"), Family::Other);
        assert_eq!(family(pg, "boolean"), Family::Boolean);
        let my = Dialect::Mysql;
        assert_eq!(family(my, "int(11) unsigned"), Family::Integer);
        assert_eq!(
            family(my, "text CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"),
            Family::Text
        );
        assert_eq!(family(my, "datetime(6)"), Family::Timestamp);
        let lite = Dialect::Sqlite;
        assert_eq!(family(lite, "INTEGER"), Family::Integer);
        assert_eq!(family(lite, ""), Family::Unknown);
        assert_eq!(family(lite, "TEXT"), Family::Text);
        assert_eq!(family(lite, "NUMBER"), Family::Decimal);
    }

    #[test]
    fn bare_columns() {
        assert_eq!(bare_column("left_at").as_deref(), Some("left_at"));
        assert_eq!(bare_column(" \"left_at\" ").as_deref(), Some("left_at"));
        assert_eq!(bare_column("left_at IS NULL"), None);
        assert_eq!(bare_column("active = 1"), None);
        assert_eq!(bare_column("TRUE"), None);
    }

    #[test]
    fn roles() {
        let lite = Dialect::Sqlite.catalog().dates_in_text();
        let pg = Dialect::Postgres.catalog().dates_in_text();
        assert!(accepts(Role::Position, TypeClass::Text, lite).is_err());
        assert!(accepts(Role::Counter, TypeClass::Integer, lite).is_ok());
        assert!(accepts(Role::Time, TypeClass::Text, lite).is_ok());
        assert!(accepts(Role::Time, TypeClass::Text, pg).is_err());
        assert!(accepts(Role::Predicate, TypeClass::Timestamp, lite).is_err());
    }
}
