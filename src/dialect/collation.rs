//! Key collations (issue 25, "Mixed key collations"): how a text key column compares, as the
//! catalog says ([`Collation`], read by [`super::traits::Catalog::column_collation`]), and how
//! the statements compare it when the key columns of a mapping do not all compare alike
//! ([`KeyCompare`], spelt by [`super::traits::Spelling::key_compare`]).
//!
//! The rule (semantics: keys are equal when their bytes are equal, as the watermark table's
//! primary key tells two members apart): when every key column has the same collation, the
//! statements compare keys as the columns do, unchanged. When they differ, a batch is no longer
//! a range of keys (a range in one table's order is another set of rows in another table's
//! order) but the list of its conversations' keys, each table is read by equality with that
//! list in a form that compares bytes and keeps the column's index where the engine allows it,
//! and every key a derived table passes on (joins, window partitions, the report's order) is
//! in the engine's byte-wise collation.

use serde::Serialize;

/// A text key column's collation, as the engine's catalog names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Collation {
    /// The collation's name: `en-x-icu`, `default`, `utf8mb4_general_ci`, `NOCASE`, `BINARY`.
    pub name: String,
    /// What the name stands for when it is an alias, else empty: PostgreSQL's `default` is the
    /// database's collation (`C.UTF-8`).
    pub detail: String,
    /// Whether two values are equal in it only when their bytes are: PostgreSQL's deterministic
    /// collations (ties are broken by the bytes), MySQL/MariaDB's `_bin` collations and
    /// `binary` (a PAD SPACE `_bin` collation still ignores trailing spaces, as the watermark
    /// table's primary key then does), SQLite's `BINARY`.
    pub exact: bool,
    /// The character set (MySQL/MariaDB: `utf8mb4`), empty elsewhere.
    pub charset: String,
    /// The name as SQL writes it after `COLLATE` (PostgreSQL: quoted and schema-qualified).
    pub sql_name: String,
}

impl Collation {
    /// The name with what it stands for, as notices show it: `en-x-icu`, `default: C.UTF-8`.
    pub fn describe(&self) -> String {
        if self.detail.is_empty() {
            self.name.clone()
        } else {
            format!("{}: {}", self.name, self.detail)
        }
    }
}

/// How the statements compare one key column, as SQL patterns over `{v}` (an expression):
/// each is `{v}` itself when the mapping's key columns all compare alike, so the statements are
/// then exactly those of a one-collation database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyCompare {
    /// A key a derived table passes on (SELECT list, GROUP BY): in the engine's byte-wise
    /// collation, so that joins, partitions and the report's order agree between tables.
    pub out: String,
    /// The column where a batch's keys are found in order (the bounds query, `--conversations`):
    /// the column itself when its collation is exact (the order is its index's), else in the
    /// byte-wise collation (grouping case variants apart).
    pub order: String,
    /// The column side of an equality with a key (`col = v`, `col IN (…)`).
    pub col: String,
    /// The value side of that equality: collated so that the comparison compares bytes while
    /// the column keeps its index (PostgreSQL: the column's own deterministic collation;
    /// MySQL/MariaDB: the column's charset's `_bin`).
    pub val: String,
}

impl Default for KeyCompare {
    /// Every pattern `{v}`: the column compared as it is.
    fn default() -> Self {
        let v = "{v}".to_string();
        KeyCompare {
            out: v.clone(),
            order: v.clone(),
            col: v.clone(),
            val: v,
        }
    }
}

impl KeyCompare {
    /// `col = v` under these patterns (`col` the column, `v` the value it is compared with).
    pub fn eq(&self, col: &str, v: &str) -> String {
        format!(
            "{} = {}",
            self.col.replace("{v}", col),
            self.val.replace("{v}", v)
        )
    }

    /// `col` in order (see [`KeyCompare::order`]).
    pub fn order_of(&self, col: &str) -> String {
        self.order.replace("{v}", col)
    }
}
