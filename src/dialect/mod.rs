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
//! the DBA's SQL, validated in [`crate::mapping`]).
//!
//! Adding an engine: a new file implementing [`SqlDialect`], a variant of [`Dialect`] with its
//! arm in [`Dialect::sql`], its scheme in [`crate::db::Dsn::parse`], and its `sql/<name>/` and
//! `migrations/<name>/` files.

use anyhow::Result;
use serde::Serialize;
use sqlx::AnyConnection;
use std::time::Duration;

use crate::mapping::{Combine, EvidenceKind, Mapping, RowRefs, Shape};

pub mod galera;
pub mod mysql;
pub mod postgres;

pub mod runner_lock;
pub mod sqlite;
pub mod templates;

pub use runner_lock::{BoxFuture, LockAttempt, LockKind};
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
/// A probe of the right to change a table, as [`SqlDialect::ddl_privilege_probe`] gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DdlProbe {
    /// A query answering one row, `allowed` (1 or 0) and `owner` (the owning role), or no row
    /// when the table is not found: PostgreSQL, where only the owner (or a member of the
    /// owning role) may ALTER or DROP a table. Run with `binds` in order.
    Owner {
        /// The query.
        sql: String,
        /// Its bind values.
        binds: Vec<Option<String>>,
    },
    /// Statements that the server refuses for want of `privileges` (a permission error) and
    /// otherwise refuses for another reason, so that they change nothing either way:
    /// MySQL/MariaDB, which check privileges before anything else.
    Refused(Vec<RefusedProbe>),
}

/// One statement of [`DdlProbe::Refused`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedProbe {
    /// What the statement needs, as a GRANT names it (`ALTER`, `ALTER, DROP`).
    pub privileges: &'static str,
    /// The statement.
    pub sql: String,
    /// A query answering one integer, above 0 when the statement must not run (it could
    /// change something there), with its bind values; the probe is then skipped.
    pub skip_if: Option<(String, Vec<Option<String>>)>,
    /// What undoes the statement when the server accepts it (`UNLOCK TABLES`).
    pub undo: Option<String>,
    /// The privilege is granted on a whole database (`LOCK TABLES`): the GRANT names
    /// `` `database`.* `` (the table's schema, or the session's database) instead of the table.
    pub on_database: bool,
    /// Why the stage needs it, for the message (`the DDL runs under LOCK TABLES … WRITE`).
    pub why: &'static str,
}

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

    /// Statements run once on every new connection ([`crate::db::Dsn::connect`]); a failure
    /// is ignored (a setting an older server does not know). Empty where nothing is needed.
    fn session_setup_sql(&self) -> &'static [&'static str] {
        &[]
    }

    /// The statements, in order, that open a read transaction whose statements all see one
    /// consistent snapshot (seed 000 §2: a message that arrives during a batch is never
    /// marked read by it). Used by [`crate::db::tx::begin_snapshot`].
    fn begin_snapshot_sql(&self) -> &'static [&'static str];

    /// The statement that opens a short write transaction ([`crate::db::tx::begin_write`]).
    fn begin_write_sql(&self) -> &'static str;

    /// The statements that bound every lock wait of this session to `timeout`, so that the
    /// tool, not the application, loses a lock wait ([`crate::lock::set_lock_timeout`]).
    fn lock_timeout_sql(&self, timeout: Duration) -> Vec<String>;

    /// Error codes, as the driver reports them (SQLSTATE, or the engine's result code), of a
    /// lock wait that gave up, a deadlock or a serialization failure: worth a retry after a
    /// pause ([`crate::lock::is_lock_wait`]).
    fn lock_wait_codes(&self) -> &'static [&'static str];

    /// Lower-case fragments of error messages with the same meaning as
    /// [`SqlDialect::lock_wait_codes`] (for errors whose code the driver does not pass on).
    fn lock_wait_messages(&self) -> &'static [&'static str];

    /// The runner lock's name on the server for tidemark's name `name` (e.g.
    /// `tidemark:backfill:<fingerprint prefix>`): the same name where locks are per database.
    ///
    /// Errors (exit 3): the database cannot be asked.
    fn runner_lock_name<'a>(
        &'a self,
        _conn: &'a mut AnyConnection,
        name: &'a str,
    ) -> BoxFuture<'a, Result<String>> {
        let name = name.to_string();
        Box::pin(async move { Ok(name) })
    }

    /// Tries once, without waiting, to take the runner lock `name` (as
    /// [`SqlDialect::runner_lock_name`] returned it) for this session; a lock taken says its
    /// [`LockKind`], which the heartbeat and the release are then given.
    ///
    /// Errors (exit 3): the database fails (not: the lock is held, that is
    /// [`LockAttempt::Held`]).
    fn try_runner_lock<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        name: &'a str,
    ) -> BoxFuture<'a, Result<LockAttempt>>;

    /// Tells the other runners that the holder of `name` (a lock of `kind`) is alive: a lock
    /// row's heartbeat; nothing, and no statement, for a [`LockKind::Session`] lock.
    ///
    /// Errors (exit 3): the database fails.
    fn refresh_runner_lock<'a>(
        &'a self,
        _conn: &'a mut AnyConnection,
        _name: &'a str,
        _kind: LockKind,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    /// Releases the runner lock `name` (of `kind`) this session holds.
    ///
    /// Errors (exit 3): the database fails.
    fn release_runner_lock<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        name: &'a str,
        kind: LockKind,
    ) -> BoxFuture<'a, Result<()>>;

    /// Whether some runner holds the lock `name` now (for `status`); takes nothing.
    ///
    /// Errors (exit 3): the database fails.
    fn runner_lock_held<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        name: &'a str,
    ) -> BoxFuture<'a, Result<bool>>;

    /// The type of the SQL expression `expr` (the mapping's `[counter] value`) over the rows
    /// `from` (`<table> this [LEFT JOIN …] WHERE (<rows>)`, already known to resolve), named
    /// as this engine names types (for [`crate::column_types::family`]), or None when it
    /// cannot tell (a NULL literal; SQLite: no value that is not an integer).
    /// PostgreSQL and MySQL/MariaDB read no row: `pg_typeof` over a zero-row subquery, and the
    /// result set's column type of a zero-row `SELECT`. SQLite has no declared type for an
    /// expression (its values carry their own): the type of the first value that is not an
    /// integer or NULL (`typeof`), which reads the rows until it finds one.
    ///
    /// Errors (exit 3): the database fails.
    fn expression_type<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        expr: &'a str,
        from: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>>>;

    /// The bind values, in order, that name `table` (`name` or `schema.name`, unquoted) in
    /// the catalog queries `sql/<dialect>/column_type.sql` (followed by the column name) and
    /// `sql/<dialect>/contract_columns.sql`.
    fn catalog_table_binds(&self, table: &str) -> Vec<Option<String>>;

    /// A query answering one integer, above 0 when `table` (unquoted, maybe `schema.name`) is
    /// a view, with its bind values in order ([`crate::schema::is_view`]).
    fn view_count_query(&self, table: &str) -> (String, Vec<Option<String>>);

    /// Splits a declared column type as `column_type.sql` returns it into the type and the
    /// attributes the engine appends (MySQL: ` CHARACTER SET … COLLATE …`; empty elsewhere).
    fn split_type_attributes<'a>(&self, declared: &'a str) -> (&'a str, &'a str) {
        (declared, "")
    }

    /// The watermark table's DDL type for a text key column declared as `declared` (as
    /// `column_type.sql` returns it): the key must compare as the legacy key does.
    fn text_key_ddl(&self, declared: &str) -> String;

    /// An integer expression over `{col}` that hashes a text key, for `--sample`.
    ///
    /// Errors (exit 2): the engine has no built-in hash for text.
    fn text_key_hash(&self) -> Result<&'static str>;

    /// An expression for the time `secs` seconds ago, comparable with the engine's timestamp
    /// columns (`--min-age` on a timestamp `created_at`).
    fn seconds_ago(&self, secs: u64) -> String;

    /// The migration files under `migrations/<dialect>/`, in version order: (refinery name,
    /// template). The templates see `wm`, `wm_table`, `wm_index`, `user_type`, `conv_type`.
    fn migrations(&self) -> &'static [(&'static str, &'static str)];

    /// Whether DDL is transactional: then a migration and its history row commit together.
    /// (MySQL commits DDL implicitly, so a transaction there would mislead.)
    fn transactional_ddl(&self) -> bool;

    /// The name to create an index `index` under, for a table in `schema` (None: the default
    /// one), quoted. SQLite names the index with the table's schema; the servers put an index
    /// in its table's schema by themselves.
    fn index_name(&self, schema: Option<&str>, index: &str) -> String;
    /// The query of the session's user as the database knows it (one text column), or None
    /// where the database has no users or privileges (SQLite): then
    /// [`crate::db::privileges`] checks nothing.
    fn current_user_sql(&self) -> Option<&'static str> {
        None
    }

    /// `user` (as [`SqlDialect::current_user_sql`] returned it) as the grantee of a GRANT
    /// statement.
    fn grantee(&self, user: &str) -> String {
        user.to_string()
    }

    /// How `contract` probes, before it writes anything, the right to change `table`
    /// (unquoted, maybe `schema.name`): ALTER, and with `drop_table` also DROP, without
    /// changing it ([`crate::db::privileges::missing_ddl_right`]). None where the engine has
    /// no privileges (SQLite).
    fn ddl_privilege_probe(&self, _table: &str, _drop_table: bool) -> Option<DdlProbe> {
        None
    }

    /// What `backfill` needs beyond write on the watermark table and the ledger, probed the
    /// same way before it writes anything: MySQL/MariaDB plan each batch into a temporary
    /// table (`sql/mysql/backfill_write.sql`), which needs CREATE TEMPORARY TABLES. Empty
    /// where nothing else is needed (PostgreSQL plans in one statement; SQLite has no
    /// privileges).
    fn backfill_privilege_probes(&self) -> Vec<RefusedProbe> {
        Vec::new()
    }
    // ---- end transactions, locks and catalog ----

    // ---- ledger, gate and contract ----
    // (RETURNING, DDL plans, statement statistics, the SQLite rebuild)

    /// The clause appended to an `INSERT` to get the new row's `id` back (`RETURNING id`), or
    /// None where the engine has none and [`SqlDialect::last_insert_id`] reads it afterwards.
    fn returning_id(&self) -> Option<&'static str> {
        Some("RETURNING id")
    }

    /// The query that reads the id of the row the connection inserted last (one BIGINT
    /// column), where [`SqlDialect::returning_id`] is None.
    fn last_insert_id(&self) -> Option<&'static str> {
        None
    }

    /// The bind values of `contract_columns.sql` for `table` (as the mapping names it,
    /// possibly `schema.table`), in order.
    fn table_columns_binds(&self, table: &str) -> Vec<Option<String>>;

    /// A query returning the current database's name (one text column) when the engine's
    /// named locks are server-wide (MySQL/MariaDB `GET_LOCK`), so a runner lock's name must
    /// hold the database; None where locks are per database.
    fn lock_namespace_query(&self) -> Option<&'static str> {
        None
    }

    /// The statements that open the contract's DDL transaction and take its table lock,
    /// waiting at most `lock_timeout` (`table` is quoted). The archive table is readable
    /// inside the lock.
    fn ddl_lock(&self, table: &str, lock_timeout: std::time::Duration) -> Vec<String>;

    /// The statement that ends the contract's DDL (COMMIT, UNLOCK TABLES).
    fn ddl_commit(&self) -> &'static str {
        "COMMIT"
    }

    /// What undoes a failed DDL attempt (ROLLBACK, UNLOCK TABLES).
    fn ddl_on_failure(&self) -> &'static str {
        "ROLLBACK"
    }

    /// A remark on what `DROP COLUMN` also removes on this engine, for the plan's notes.
    fn drop_column_note(&self) -> Option<&'static str> {
        None
    }

    /// A query returning the server's version (one text column) where `DROP COLUMN` may run
    /// with `ALGORITHM=INSTANT` depending on it (MySQL 8.0.29+, MariaDB 10.4+).
    fn instant_drop_version_query(&self) -> Option<&'static str> {
        None
    }

    /// Whether dropping a column needs the table's definition read first: SQLite, which
    /// drops in place only without constraints on the column, else rebuilds the table.
    fn drop_column_by_rebuild(&self) -> bool {
        false
    }

    /// The SQL type of an exact decimal for sums of counters (None: the engine's integers
    /// are summed exactly as they are, SQLite).
    fn exact_decimal(&self) -> Option<&'static str>;

    /// The SQL type of `CAST(x AS …)` to text.
    fn text_type(&self) -> &'static str {
        "TEXT"
    }

    /// Whether the server keeps statement statistics tidemark can read: `Ok(source)` (the
    /// view `contract_statements.sql` reads), or `Err(reason)` in words. Never fails otherwise.
    fn statement_statistics<'a>(
        &'a self,
        conn: &'a mut sqlx::AnyConnection,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<&'static str, String>> + Send + 'a>,
    >;

    /// The database's detail of an error, where the engine gives one besides its message
    /// (PostgreSQL's DETAIL, e.g. the view that depends on a column); None elsewhere.
    fn error_detail(&self, _error: &sqlx::Error) -> Option<String> {
        None
    }

    /// Why reading the statement statistics from `source` failed with `message`, in words.
    fn statement_statistics_error(&self, source: &str, message: &str) -> String {
        format!("cannot read {source}: {message}")
    }
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

    /// The statements that open a backfill batch's write transaction (issue 11: the plan,
    /// the forward-only write and the tally, with the checkpoint). PostgreSQL: `BEGIN` at
    /// READ COMMITTED (the batch is one statement, which sees one snapshot; ON CONFLICT then
    /// updates a row the application wrote meanwhile rather than failing). MySQL/MariaDB:
    /// READ COMMITTED, so that InnoDB reads the sources of `CREATE … SELECT` as a consistent
    /// snapshot without the shared next-key locks REPEATABLE READ takes on every row read.
    /// SQLite: `BEGIN IMMEDIATE` (the write lock from the start).
    fn backfill_write_begin_sql(&self) -> &'static [&'static str];

    /// Where a backfill batch's plan lives between its write and its tally: None when the
    /// engine writes and tallies in one statement (`sql/<dialect>/backfill_write.sql`, a
    /// data-modifying CTE: PostgreSQL); else the statement that drops the temporary table
    /// `tm_plan` that `backfill_write.sql` creates (run before it, for a batch that failed
    /// half-way, and after the commit).
    fn backfill_plan_drop_sql(&self) -> Option<&'static str>;
    // ---- end stage SQL spellings ----

    // ---- demo and generator ----
    // (what the demo and the generator need)

    /// The statement that opens each of the generator's load transactions: `BEGIN`, or
    /// `START TRANSACTION` on MySQL.
    fn generator_begin(&self) -> &'static str;

    /// The statement that opens a write transaction of the demo's application (dual-write
    /// period): `BEGIN`, or `BEGIN IMMEDIATE` on SQLite (the write lock from the start, so two
    /// writers never deadlock on the upgrade).
    fn demo_begin_write(&self) -> &'static str;

    /// The demo application's forward-only watermark write into `read_watermarks (user_id,
    /// conversation_id, last_read_id)`, with three bind parameters in that order: insert, or
    /// keep the larger of the stored and the new `last_read_id`.
    fn demo_watermark_upsert(&self) -> &'static str;

    /// Whether the database is a file of the demo's own (SQLite: it is recreated, and copied
    /// with `VACUUM INTO` for the destructive part) rather than a database on a server (it
    /// must be empty or a demo's, and the contract runs on it).
    fn demo_database_is_file(&self) -> bool;
    // ---- end demo and generator ----

    // ---- inspect ----
    // (catalog reading for `tidemark inspect`)

    /// The query listing every column of every table and view `inspect` may map, one row per
    /// column: schema (text, empty for the connection's default schema), table name (text),
    /// `table` or `view` (text), column name (text), declared type (text), ordinal (BIGINT),
    /// ordered by schema, table and ordinal ([`crate::inspect::catalog`]).
    fn inspect_columns_query(&self) -> &'static str;

    /// The query listing the columns of every index (the primary key included), one row per
    /// indexed column: schema (text, empty for the default one), table, index name (text),
    /// unique (BIGINT 0/1), partial (BIGINT 0/1), position in the index (BIGINT, from 1),
    /// column name (text, NULL for an expression), ordered by schema, table, index, position.
    fn inspect_indexes_query(&self) -> &'static str;

    /// The class of a declared column type, as [`SqlDialect::inspect_columns_query`] returns
    /// it (`bigint`, `int(11)`, `character varying(64)`, `timestamp with time zone`…).
    fn inspect_type_class(&self, declared: &str) -> crate::inspect::TypeClass {
        crate::inspect::TypeClass::of_server_type(declared)
    }

    /// The statement(s) that give `column` of `table` (both quoted) a 64-bit integer type,
    /// for `inspect`'s warning about a counter or position that is not an integer.
    fn inspect_integer_fix(&self, table: &str, column: &str) -> String;
    // ---- end inspect ----

    // ---- test support ----
    // (scratch databases for the tests and the benchmark: src/db/testing.rs)

    /// `DROP DATABASE IF EXISTS` for an already quoted name, or None for an engine without
    /// server databases (SQLite).
    fn drop_database_sql(&self, _quoted: &str) -> Option<String> {
        None
    }

    /// `CREATE DATABASE` for an already quoted name, or None for an engine without server
    /// databases (SQLite).
    fn create_database_sql(&self, _quoted: &str) -> Option<String> {
        None
    }
    // ---- end test support ----

    // ---- predicate parsing ----
    /// sqlparser-rs's dialect for this engine: what the mapping's predicates are parsed with
    /// before any statement runs ([`crate::mapping::Mapping::check_predicates`]).
    fn sql_parser_dialect(&self) -> &'static dyn sqlparser::dialect::Dialect;
    // ---- end predicate parsing ----
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
    /// The rows `countable` and `legacy_countable` read besides their own (`conv`).
    pub joins: Joins,
}

/// A quoted `[conversations]` / `[users]` table and its key.
#[derive(Debug, Clone, Serialize)]
pub struct RowIdents {
    pub table: String,
    pub key: String,
}

/// The rows a predicate or expression reads besides its own row `this`: each set only when
/// the text uses its name (`conv.`, `usr.`), so a template joins it only then (the macro
/// `own` of `sql/common/macros.sql`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Joins {
    /// `[conversations]`, joined as `conv` on the conversation key.
    pub conv: Option<RowIdents>,
    /// `[users]`, joined as `usr` on the user key.
    pub usr: Option<RowIdents>,
}

impl Joins {
    fn new(mapping: &Mapping, dialect: Dialect, refs: RowRefs) -> Joins {
        let row = |k: &Option<crate::mapping::KeyedTable>| {
            k.as_ref().map(|k| RowIdents {
                table: dialect.quote(&k.table),
                key: dialect.quote(&k.key),
            })
        };
        Joins {
            conv: if refs.conv {
                row(&mapping.conversations)
            } else {
                None
            },
            usr: if refs.usr { row(&mapping.users) } else { None },
        }
    }
}

/// Quoted `[members]` identifiers and predicate.
#[derive(Debug, Clone, Serialize)]
pub struct MemIdents {
    pub table: String,
    pub user: String,
    pub conv: String,
    pub active: Option<String>,
    pub join: Option<String>,
    /// `join_time`, quoted: the join position is derived from it (macros.sql `join_pos`).
    pub join_time: Option<String>,
    /// The rows `active` reads besides its own (`conv`, `usr`).
    pub joins: Joins,
}

/// Quoted `[counter]` identifiers (user/conv empty for per_message).
#[derive(Debug, Clone, Serialize)]
pub struct CtrIdents {
    pub table: String,
    pub user: String,
    pub conv: String,
    /// The stored column, quoted; empty when the mapping gives `value` instead.
    pub column: String,
    /// The counter's value over its row `this`: `[counter] value`, or `this.<column>`.
    pub value: String,
    /// `[counter] rows`: which counter rows count (None: all).
    pub rows: Option<String>,
    /// `[counter] combine = "sum"`: a member's rows are summed.
    pub sum: bool,
    /// The rows `value` and `rows` read besides their own (`conv`, `usr`).
    pub joins: Joins,
}

/// One quoted `[[evidence]]` entry (`conv` empty for a timestamp keyed by the user alone).
#[derive(Debug, Clone, Serialize)]
pub struct EvIdents {
    pub kind: &'static str,
    pub table: String,
    pub user: String,
    pub conv: String,
    pub column: String,
    /// The row filter as written (over the evidence row `this`).
    pub filter: Option<String>,
    /// The position lookup, quoted.
    pub lookup: Option<LookupIdents>,
    /// The rows `filter` reads besides its own (`conv`, `usr`).
    pub joins: Joins,
}

/// A quoted evidence `lookup`: the key column's value is matched against `table.key`, whose
/// `position` is the read position.
#[derive(Debug, Clone, Serialize)]
pub struct LookupIdents {
    pub table: String,
    pub key: String,
    pub position: String,
    /// The lookup table's conversation column, when given.
    pub conv: Option<String>,
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
                joins: Joins::new(
                    mapping,
                    dialect,
                    RowRefs::of(m.countable.as_deref())
                        .or(RowRefs::of(m.legacy_countable.as_deref())),
                ),
            },
            mem: mapping.members.as_ref().map(|mb| MemIdents {
                table: q(&mb.table),
                user: q(&mb.user),
                conv: q(&mb.conversation),
                active: mb.active.clone(),
                join: oq(&mb.join_position),
                join_time: oq(&mb.join_time),
                joins: Joins::new(mapping, dialect, RowRefs::of(mb.active.as_deref())),
            }),
            ctr: CtrIdents {
                table: q(mapping.counter_table()),
                user: ctr.user.as_deref().map(q).unwrap_or_default(),
                conv: ctr.conversation.as_deref().map(q).unwrap_or_default(),
                column: ctr.stored_column().map(q).unwrap_or_default(),
                value: ctr.value_sql(q),
                rows: ctr.rows.clone(),
                sum: ctr.combine == Some(Combine::Sum),
                joins: Joins::new(
                    mapping,
                    dialect,
                    RowRefs::of(ctr.value.as_deref()).or(RowRefs::of(ctr.rows.as_deref())),
                ),
            },
            evidence: mapping
                .evidence
                .iter()
                .map(|e| {
                    let src = e.source();
                    EvIdents {
                        kind: e.kind().as_str(),
                        table: src.map(|s| q(&s.table)).unwrap_or_default(),
                        user: src.map(|s| q(&s.user)).unwrap_or_default(),
                        conv: src
                            .and_then(|s| s.conversation.as_deref())
                            .map(q)
                            .unwrap_or_default(),
                        column: src.map(|s| q(&s.column)).unwrap_or_default(),
                        filter: src.and_then(|s| s.filter.clone()),
                        joins: Joins::new(
                            mapping,
                            dialect,
                            RowRefs::of(src.and_then(|s| s.filter.as_deref())),
                        ),
                        lookup: src.and_then(|s| s.lookup.as_ref()).map(|l| LookupIdents {
                            table: q(&l.table),
                            key: q(&l.key),
                            position: q(&l.position),
                            conv: l.conversation.as_deref().map(q),
                        }),
                    }
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
