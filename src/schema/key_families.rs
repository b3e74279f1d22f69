//! Key types across tables (issue 29, rows 13, 14 and 21; `interface.md`, "Keys"): every
//! column a mapping compares conversation or user keys on (the list
//! [`super::KeyCollations::columns_of`] gives, which [`super::KeyCollations::read`] passes
//! here) is classed from its declared type into a
//! [`KeyFamily`] (integer, text, uuid). Columns of one family of keys (conversations, users)
//! are compared with each other in joins, unions and ranges, so:
//!
//! - integers of any width and signedness are one family and compared as values: where the
//!   columns mix signed and unsigned types (MariaDB `INT UNSIGNED` beside `INT`), the server
//!   would type a `UNION` or `CASE` of them DECIMAL, so every key of that family that a derived
//!   table passes on is cast to the engine's 64-bit signed integer ([`KeyFamilies::casts`],
//!   applied by [`super::KeyCollations::apply`]); an unsigned 64-bit key above 2^63 − 1,
//!   which no signed 64-bit integer holds, is refused (exit 2) naming the column and value;
//! - text beside integers (or uuids beside either) is refused before anything runs (exit 2),
//!   naming both columns and their declared types: a text key is not comparable with an
//!   integer exactly (`'007'` and `7`), and PostgreSQL refuses the comparison at run time.
//!
//! A column without a declared type (a SQLite view's expression column) is left out: its
//! values are read by their storage class ([`crate::stages::batch::Key::read`]).

use anyhow::Result;
use sqlx::AnyConnection;

use crate::db::catalog::column_type;
use crate::dialect::{Dialect, KeyCompare, SqlContext, TypeClass};
use crate::error::input_error;
use crate::mapping::Mapping;
use crate::values::text;

/// The family of one key column's declared type: keys of one family compare as values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyFamily {
    /// An integer of any width; `unsigned` for MySQL/MariaDB `… UNSIGNED` types.
    Integer {
        /// The type is unsigned.
        unsigned: bool,
    },
    /// Text of any length (SQLite: TEXT affinity).
    Text,
    /// A uuid type (PostgreSQL `uuid`, MariaDB `UUID`).
    Uuid,
}

impl KeyFamily {
    /// The family of a declared type as `column_type.sql` returns it (PostgreSQL's
    /// `format_type`, MySQL's `COLUMN_TYPE`, SQLite's declared type); None for a type that is
    /// neither (no declared type, or a type the watermark table's key check refuses anyway).
    pub fn of(dialect: Dialect, declared: &str) -> Option<KeyFamily> {
        let lower = declared.trim().to_ascii_lowercase();
        if lower == "uuid" {
            return Some(KeyFamily::Uuid);
        }
        match dialect.catalog().type_class(declared) {
            TypeClass::Integer => Some(KeyFamily::Integer {
                unsigned: lower.contains("unsigned"),
            }),
            TypeClass::Text => Some(KeyFamily::Text),
            _ => None,
        }
    }

    /// The family in words, for messages: `integer`, `text`, `uuid`.
    pub fn word(self) -> &'static str {
        match self {
            KeyFamily::Integer { .. } => "integer",
            KeyFamily::Text => "text",
            KeyFamily::Uuid => "uuid",
        }
    }

    fn same_kind(self, other: KeyFamily) -> bool {
        std::mem::discriminant(&self) == std::mem::discriminant(&other)
    }
}

/// One key column with its declared type and family.
#[derive(Debug, Clone, PartialEq)]
pub struct TypedKey {
    /// The table, as the mapping names it.
    pub table: String,
    /// The column.
    pub column: String,
    /// Which keys it holds, in words: `conversation` or `user`.
    pub family: &'static str,
    /// The declared type, as the catalog spells it.
    pub declared: String,
    /// Its family.
    pub kind: KeyFamily,
}

/// The key columns' types, checked: what the statements must do about them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeyFamilies {
    /// Integer key columns (table, column, as the mapping names them) of a family that mixes
    /// signed and unsigned types: each is passed on as `CAST(… AS <int_cast>)`.
    pub casts: Vec<(String, String)>,
    /// Uuid key columns (table, column): compared as the engine's
    /// [`crate::dialect::Spelling::uuid_key_compare`] says.
    pub uuids: Vec<(String, String)>,
}

impl KeyFamilies {
    /// Reads the declared type of every key column of `columns` (table, column, and which
    /// keys it holds: `conversation` or `user`); a column not found, such as the watermark
    /// table's before `expand`, is left out. Checks them ([`KeyFamilies::check`]), then that
    /// no unsigned 64-bit key exceeds 2^63 − 1.
    ///
    /// Errors (exit 2): key columns of one family in different type families, named with
    /// their types; an unsigned key too large for a signed 64-bit integer, named with its
    /// largest value. Exit 3: the catalog or the table cannot be read.
    pub async fn read(
        conn: &mut AnyConnection,
        mapping: &Mapping,
        dialect: Dialect,
        columns: &[(String, String, &'static str)],
    ) -> Result<KeyFamilies> {
        let ctx = SqlContext::new(mapping, dialect);
        let mut typed = Vec::new();
        for (table, column, family) in columns {
            let Some(declared) = column_type(conn, &ctx, table, column).await? else {
                continue;
            };
            if let Some(kind) = KeyFamily::of(dialect, &declared) {
                typed.push(TypedKey {
                    table: table.clone(),
                    column: column.clone(),
                    family,
                    declared: shown(&declared),
                    kind,
                });
            }
        }
        if let Some(k) = typed
            .iter()
            .find(|k| dialect.catalog().key_type_unreadable(&k.declared))
        {
            return Err(input_error(format!(
                "{}.{} is {}: tidemark's database driver cannot read {} keys of this type \
                 back (MySQL/MariaDB MEDIUMINT); give the column a type of INT or BIGINT, or \
                 map a view that passes it on as CAST({} AS SIGNED) (the book: docs/src/key-types.md, \"Key types\")",
                k.table, k.column, k.declared, k.family, k.column
            )));
        }
        let families = Self::check(&typed, &mapping.watermarks.table)?;
        for key in &typed {
            check_unsigned_range(conn, dialect, key).await?;
        }
        Ok(families)
    }

    /// Checks the typed key columns: within each family of keys, one type family.
    /// `watermarks` (the watermark table, as the mapping names it) is left out of that check:
    /// `expand` creates its keys of the members' (or the counter's) key types, and where that
    /// column has no declared type (a SQLite view's expression) as text, which SQLite compares
    /// with integers by value. Its integer keys still count for the signedness.
    ///
    /// Errors (exit 2): the first two columns of one family of keys whose type families
    /// differ, with their declared types.
    pub fn check(typed: &[TypedKey], watermarks: &str) -> Result<KeyFamilies> {
        let mut casts = Vec::new();
        for family in ["conversation", "user"] {
            let columns: Vec<&TypedKey> = typed.iter().filter(|k| k.family == family).collect();
            let legacy: Vec<&&TypedKey> =
                columns.iter().filter(|k| k.table != watermarks).collect();
            let Some(first) = legacy.first() else {
                continue;
            };
            if let Some(other) = legacy.iter().find(|k| !k.kind.same_kind(first.kind)) {
                return Err(input_error(format!(
                    "{} keys of different types: {}.{} is {} ({}) and {}.{} is {} ({}); tidemark \
                     compares these keys across tables as values and cannot compare {} with {} \
                     exactly: give the columns one type, or map a view that converts one of \
                     them (the book: docs/src/key-types.md, \"Key types\")",
                    family,
                    first.table,
                    first.column,
                    first.declared,
                    first.kind.word(),
                    other.table,
                    other.column,
                    other.declared,
                    other.kind.word(),
                    first.kind.word(),
                    other.kind.word(),
                )));
            }
            let signs: Vec<bool> = columns
                .iter()
                .filter_map(|k| match k.kind {
                    KeyFamily::Integer { unsigned } => Some(unsigned),
                    _ => None,
                })
                .collect();
            if signs.contains(&true) && signs.contains(&false) {
                casts.extend(columns.iter().map(|k| (k.table.clone(), k.column.clone())));
            }
        }
        let uuids = typed
            .iter()
            .filter(|k| k.kind == KeyFamily::Uuid)
            .map(|k| (k.table.clone(), k.column.clone()))
            .collect();
        Ok(KeyFamilies { casts, uuids })
    }

    /// Whether some key column needs a comparison other than as it is.
    pub fn any(&self) -> bool {
        !self.casts.is_empty() || !self.uuids.is_empty()
    }

    /// How the key column `table.column` is compared, where its type asks for it: a uuid as
    /// the engine spells it, an integer of a family that mixes signedness passed on (`out`)
    /// cast to a signed 64-bit integer; None otherwise.
    pub fn compare_of(&self, dialect: Dialect, table: &str, column: &str) -> Option<KeyCompare> {
        let is = |list: &[(String, String)]| list.iter().any(|(t, c)| t == table && c == column);
        if is(&self.uuids) {
            Some(dialect.uuid_key_compare())
        } else if is(&self.casts) {
            Some(KeyCompare {
                out: format!("CAST({{v}} AS {})", dialect.int_cast()),
                ..Default::default()
            })
        } else {
            None
        }
    }
}

/// A declared type as messages show it: without MySQL's `CHARACTER SET …` / `COLLATE …`.
fn shown(declared: &str) -> String {
    let lower = declared.to_ascii_lowercase();
    let end = [" character set", " collate"]
        .iter()
        .filter_map(|w| lower.find(w))
        .min()
        .unwrap_or(declared.len());
    declared[..end].trim().to_string()
}

/// An unsigned 64-bit key column (`BIGINT UNSIGNED`) holding a value above 2^63 − 1: refused,
/// since keys are read, bound and stored (the watermark table) as signed 64-bit integers.
///
/// Errors (exit 2): such a value, named with its column; exit 3: the table cannot be read.
async fn check_unsigned_range(
    conn: &mut AnyConnection,
    dialect: Dialect,
    key: &TypedKey,
) -> Result<()> {
    let lower = key.declared.to_ascii_lowercase();
    if key.kind != (KeyFamily::Integer { unsigned: true }) || !lower.contains("bigint") {
        return Ok(());
    }
    let column = dialect.quote(&key.column);
    let sql = format!(
        "SELECT CAST(MAX({column}) AS {}) FROM {} WHERE {column} > {}",
        dialect.text_type(),
        dialect.quote(&key.table),
        i64::MAX
    );
    let row = sqlx::raw_sql(&sql).fetch_one(&mut *conn).await?;
    if let Some(max) = text(&row, 0)? {
        return Err(input_error(format!(
            "{}.{} ({}) holds {max}, above 9223372036854775807: tidemark reads and stores \
             keys as signed 64-bit integers (the book: docs/src/key-types.md, \"Key types\")",
            key.table, key.column, key.declared
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(table: &str, family: &'static str, declared: &str, dialect: Dialect) -> TypedKey {
        TypedKey {
            table: table.into(),
            column: "k".into(),
            family,
            declared: declared.into(),
            kind: KeyFamily::of(dialect, declared).unwrap(),
        }
    }

    #[test]
    fn families_of_declared_types() {
        let my = Dialect::Mysql;
        assert_eq!(
            KeyFamily::of(my, "int(10) unsigned"),
            Some(KeyFamily::Integer { unsigned: true })
        );
        assert_eq!(
            KeyFamily::of(my, "bigint(20)"),
            Some(KeyFamily::Integer { unsigned: false })
        );
        assert_eq!(KeyFamily::of(my, "uuid"), Some(KeyFamily::Uuid));
        assert_eq!(KeyFamily::of(my, "char(36)"), Some(KeyFamily::Text));
        assert_eq!(
            KeyFamily::of(Dialect::Postgres, "uuid"),
            Some(KeyFamily::Uuid)
        );
        assert_eq!(KeyFamily::of(Dialect::Sqlite, ""), None);
    }

    #[test]
    fn mixed_signedness_casts_and_text_beside_integer_is_refused() {
        let my = Dialect::Mysql;
        let ok = KeyFamilies::check(
            &[
                key("a", "user", "int(10) unsigned", my),
                key("b", "user", "int(11)", my),
                key("a", "conversation", "bigint(20)", my),
            ],
            "wm",
        )
        .unwrap();
        assert_eq!(
            ok.casts,
            vec![("a".into(), "k".into()), ("b".into(), "k".into())]
        );
        assert_eq!(
            ok.compare_of(my, "b", "k").map(|k| k.out).as_deref(),
            Some("CAST({v} AS SIGNED)")
        );
        assert_eq!(ok.compare_of(my, "a", "x"), None);
        let pg = Dialect::Postgres;
        let err = KeyFamilies::check(
            &[
                key("messages", "conversation", "character varying(64)", pg),
                key("att", "conversation", "bigint", pg),
            ],
            "wm",
        )
        .unwrap_err();
        let msg = format!("{err:#}");
        // The watermark table's keys (tidemark's own) are not compared for the family.
        let wm_text = KeyFamilies::check(
            &[
                key("messages", "user", "INTEGER", Dialect::Sqlite),
                key("wm", "user", "TEXT", Dialect::Sqlite),
            ],
            "wm",
        );
        assert!(wm_text.is_ok());
        assert_eq!(
            shown("varchar(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"),
            "varchar(64)"
        );
        assert!(
            msg.contains(
                "messages.k is character varying(64) (text) and att.k is bigint (integer)"
            ),
            "{msg}"
        );
    }
}
