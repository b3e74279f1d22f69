//! Dialects: everything that differs between the engines tidemark runs on, in one place.
//!
//! [`Dialect`] is the small handle the rest of tidemark passes around (constructed from the
//! URL's scheme in [`crate::db::Dsn::parse`]); it dereferences to [`SqlDialect`], the trait
//! that each engine implements in a file of its own ([`postgres`], [`mysql`], [`sqlite`]).
//! Every spelling, catalog query, locking or transaction rule that is not the same on all
//! engines is a method of that trait or a file under `sql/<dialect>/`, and nowhere else.
//!
//! Statements are minijinja templates ([`templates`]) filled with the mapping's quoted
//! identifiers ([`SqlContext`]); predicates from the mapping are inserted verbatim (they are
//! the DBA's SQL, validated in [`crate::mapping`]). [`quote`] holds identifier quoting and the
//! identifier scanner.
//!
//! Adding an engine: a new file implementing [`SqlDialect`], a variant of [`Dialect`] with its
//! arm in [`Dialect::sql`], its scheme in [`crate::db::Dsn::parse`], and its `sql/<name>/` and
//! `migrations/<name>/` files.

use serde::Serialize;

use crate::mapping::{EvidenceKind, Mapping, Shape};

pub mod mysql;
pub mod postgres;
pub mod quote;
pub mod sqlite;
pub mod templates;

pub use quote::identifiers;
pub use templates::{render, RangeParams};

/// The engine of a target database: a handle that dereferences to its [`SqlDialect`].
/// Outside this module it is only constructed (from a URL's scheme) and compared in tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    /// PostgreSQL 12 or later ([`postgres::Postgres`]).
    Postgres,
    /// MySQL 8 or MariaDB 10.6 or later ([`mysql::Mysql`]).
    Mysql,
    /// SQLite 3.35 or later, the bundled library ([`sqlite::Sqlite`]).
    Sqlite,
}

impl Dialect {
    /// Every dialect, for tests that render each template for each engine.
    pub const ALL: [Dialect; 3] = [Dialect::Postgres, Dialect::Mysql, Dialect::Sqlite];

    /// The engine's implementation of [`SqlDialect`].
    pub fn sql(self) -> &'static dyn SqlDialect {
        match self {
            Dialect::Postgres => &postgres::Postgres,
            Dialect::Mysql => &mysql::Mysql,
            Dialect::Sqlite => &sqlite::Sqlite,
        }
    }
}

impl std::ops::Deref for Dialect {
    type Target = dyn SqlDialect;

    fn deref(&self) -> &Self::Target {
        self.sql()
    }
}

/// What differs between engines. One implementation per engine, each in its own file; the
/// methods are grouped by subject (spelling, transactions, locks, DDL, catalog).
pub trait SqlDialect: Sync + std::fmt::Debug {
    /// The folder under `sql/` and `migrations/`: `postgres`, `mysql` or `sqlite`.
    fn name(&self) -> &'static str;

    /// Quotes one identifier part (no dots). Identifiers were validated by
    /// [`crate::mapping::check_identifier`], so they hold no quote characters.
    fn quote_part(&self, part: &str) -> String;

    /// The `n`-th (1-based) bind placeholder: `$n` on PostgreSQL, `?` elsewhere.
    fn placeholder(&self, n: usize) -> String;

    /// The type name for `CAST(x AS …)` to a 64-bit integer.
    fn int_cast(&self) -> &'static str;

    /// The two-argument maximum: `GREATEST` (PostgreSQL, MySQL) or SQLite's scalar `MAX`.
    fn greatest(&self) -> &'static str;

    /// `MATERIALIZED` where the engine accepts it on a CTE (an optimisation fence), else empty.
    fn cte_materialized(&self) -> &'static str;

    // ---- transactions, locks and catalog ----
    // (runner lock, lock timeouts, isolation, catalog queries, key types)
    // ---- end transactions, locks and catalog ----

    // ---- ledger, gate and contract ----
    // (RETURNING, DDL plans, statement statistics, the SQLite rebuild)
    // ---- end ledger, gate and contract ----

    // ---- stage SQL spellings ----
    // (values the audit and backfill templates need)

    /// Session settings (each one statement) run on the connection before the one-pass audit
    /// statement runs on it (the audit, and the backfill's change count). SQLite:
    /// `PRAGMA temp_store = MEMORY`, since the window sort otherwise spills to temporary files
    /// (issue 11: 10.9 s on disk against 2.4 s in memory on the standard data). MariaDB:
    /// `split_materialized=off`, so the lowest threshold per conversation is computed once, not
    /// as a LATERAL DERIVED table per message. Empty where the engine needs nothing.
    fn audit_session(&self) -> &'static [&'static str];
    // ---- end stage SQL spellings ----

    // ---- demo and generator ----
    // (what the demo and the generator need)
    // ---- end demo and generator ----
}

impl dyn SqlDialect {
    /// Quotes one identifier, or a `schema.table` pair part by part.
    pub fn quote(&self, ident: &str) -> String {
        ident
            .split('.')
            .map(|part| self.quote_part(part))
            .collect::<Vec<_>>()
            .join(".")
    }
}

/// A mapping's identifiers, quoted for one dialect, as the templates see them.
#[derive(Debug, Clone, Serialize)]
pub struct SqlContext {
    /// `postgres`, `mysql` or `sqlite`.
    pub dialect: Dialect,
    /// `CAST(x AS {{ int }})` target.
    pub int: &'static str,
    /// `GREATEST` or `MAX`.
    pub greatest: &'static str,
    /// `MATERIALIZED` where the dialect accepts it on a CTE (an optimisation fence).
    pub materialized: &'static str,
    /// Messages table columns.
    pub msg: MsgIdents,
    /// Members table columns, if mapped.
    pub mem: Option<MemIdents>,
    /// Counter location.
    pub ctr: CtrIdents,
    /// Evidence sources, best first.
    pub evidence: Vec<EvIdents>,
    /// Watermark table.
    pub wm: String,
    /// Watermark table name unquoted (for index names).
    pub wm_name: String,
    /// Shape: `per_member` or `per_message`.
    pub shape: Shape,
    // ---- stage SQL spellings (fields) ----
    // ---- end stage SQL spellings (fields) ----
}

/// Quoted `[messages]` identifiers and predicates.
#[derive(Debug, Clone, Serialize)]
pub struct MsgIdents {
    pub table: String,
    pub id: String,
    pub conv: String,
    pub sender: String,
    pub created_at: Option<String>,
    pub countable: Option<String>,
    pub legacy: Option<String>,
}

/// Quoted `[members]` identifiers and predicate.
#[derive(Debug, Clone, Serialize)]
pub struct MemIdents {
    pub table: String,
    pub user: String,
    pub conv: String,
    pub active: Option<String>,
    pub join: Option<String>,
}

/// Quoted `[counter]` identifiers (user/conv empty for per_message).
#[derive(Debug, Clone, Serialize)]
pub struct CtrIdents {
    pub table: String,
    pub user: String,
    pub conv: String,
    pub column: String,
}

/// One quoted `[[evidence]]` entry.
#[derive(Debug, Clone, Serialize)]
pub struct EvIdents {
    pub kind: &'static str,
    pub table: String,
    pub user: String,
    pub conv: String,
    pub column: String,
}

impl SqlContext {
    /// Quotes every identifier of `mapping` for `dialect`.
    pub fn new(mapping: &Mapping, dialect: Dialect) -> SqlContext {
        let q = |s: &str| dialect.quote(s);
        let oq = |s: &Option<String>| s.as_deref().map(q);
        let m = &mapping.messages;
        let ctr = &mapping.counter;
        SqlContext {
            dialect,
            int: dialect.int_cast(),
            greatest: dialect.greatest(),
            materialized: dialect.cte_materialized(),
            msg: MsgIdents {
                table: q(&m.table),
                id: q(&m.id),
                conv: q(&m.conversation),
                sender: q(&m.sender),
                created_at: oq(&m.created_at),
                countable: m.countable.clone(),
                legacy: m.legacy_countable.clone(),
            },
            mem: mapping.members.as_ref().map(|mb| MemIdents {
                table: q(&mb.table),
                user: q(&mb.user),
                conv: q(&mb.conversation),
                active: mb.active.clone(),
                join: oq(&mb.join_position),
            }),
            ctr: CtrIdents {
                table: q(mapping.counter_table()),
                user: ctr.user.as_deref().map(q).unwrap_or_default(),
                conv: ctr.conversation.as_deref().map(q).unwrap_or_default(),
                column: q(&ctr.column),
            },
            evidence: mapping
                .evidence
                .iter()
                .map(|e| EvIdents {
                    kind: e.kind.as_str(),
                    table: e.table.as_deref().map(q).unwrap_or_default(),
                    user: e.user.as_deref().map(q).unwrap_or_default(),
                    conv: e.conversation.as_deref().map(q).unwrap_or_default(),
                    column: e.column.as_deref().map(q).unwrap_or_default(),
                })
                .collect(),
            wm: q(&mapping.watermarks.table),
            wm_name: mapping
                .watermarks
                .table
                .rsplit('.')
                .next()
                .unwrap_or_default()
                .to_string(),
            shape: mapping.counter.shape,
            // ---- stage SQL spellings (values) ----
            // ---- end stage SQL spellings (values) ----
        }
    }

    /// Whether the mapping lists an evidence kind.
    pub fn has_evidence(&self, kind: EvidenceKind) -> bool {
        self.evidence.iter().any(|e| e.kind == kind.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_per_dialect() {
        assert_eq!(
            Dialect::Postgres.quote("public.messages"),
            "\"public\".\"messages\""
        );
        assert_eq!(Dialect::Mysql.quote("messages"), "`messages`");
        assert_eq!(Dialect::Sqlite.quote("m"), "\"m\"");
        assert_eq!(Dialect::Postgres.placeholder(3), "$3");
        assert_eq!(Dialect::Mysql.placeholder(3), "?");
    }
}
