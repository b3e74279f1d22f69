//! The engines' operations, one small trait per job: SQL rendering ([`Spelling`]), sessions and
//! transactions ([`Sessions`]), the runner lock ([`RunnerLocks`]), catalog reading
//! ([`Catalog`]), the contract's drop ([`ColumnDrop`]), tables spread over nodes
//! ([`Distribution`]) and what only the demo and the tests need ([`Admin`]). Each engine implements every trait in its own folder
//! (`src/dialect/<engine>/`); [`super::handle::Dialect`] hands out the one a caller needs, so
//! that stages ask an engine for an operation and never branch on which engine it is.

use anyhow::Result;
use sqlx::AnyConnection;
use std::time::Duration;

use super::collation::{Collation, KeyCompare};
use super::types::{
    BoxFuture, Colocation, DdlProbe, DropPlan, DropTarget, LockAttempt, LockKind, RefusedProbe,
    ReplicaState, TypeClass,
};

/// SQL rendering: how this engine spells what the templates and the stages write (quoting,
/// placeholders, casts, type names, its migrations). Pure: no method talks to the database.
/// [`super::handle::Dialect`] dereferences to it.
pub trait Spelling: Sync + std::fmt::Debug {
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

    /// Whether a correlated count `WHERE conv = outer.conv AND position > outer.t` reads the
    /// `(conversation, position)` index from `t` up (PostgreSQL, SQLite), rather than every
    /// entry of the conversation with `position > t` as a filter (MariaDB/MySQL: `ref` access on
    /// the equality prefix, ANALYZE FORMAT=JSON `r_rows` 236 a probe on conversations of 30 to
    /// 400 messages, members 0 to 4 behind). The audit's index-probe form is chosen only where
    /// it does (`src/stages/audit/form.rs`).
    fn probes_by_range(&self) -> bool {
        true
    }

    /// The SQL type of an exact decimal for sums of counters (None: the engine's integers
    /// are summed exactly as they are, SQLite).
    fn exact_decimal(&self) -> Option<&'static str>;

    /// The SQL type of `CAST(x AS …)` to text.
    fn text_type(&self) -> &'static str {
        "TEXT"
    }

    /// A predicate over `{x}` (a value that is not NULL, of any numeric type the engine has,
    /// or on SQLite any storage class), true when `{x}` is not a whole number within the
    /// 64-bit integer range, i.e. when `CAST({x} AS <int>)` would fail, round or wrap it
    /// (issue 25 rows 2 and 3): the preflight's check of the counter's values
    /// (`sql/common/preflight_counter_values.sql`). It compares `{x}` as it is (a decimal, an
    /// unsigned integer), never after a cast to a signed integer.
    fn not_int64(&self) -> &'static str;

    /// The aggregate that sums values exactly or without failing, for the preflight's check
    /// of a member's summed counter (`combine = "sum"`): `SUM`, whose result on the servers
    /// is a decimal wide enough for any sum of 64-bit integers; SQLite's `TOTAL` (a REAL),
    /// since its `SUM` of integers fails with "integer overflow".
    fn wide_sum(&self) -> &'static str {
        "SUM"
    }

    /// An expression for the time `secs` seconds ago, comparable with the engine's timestamp
    /// columns (`--min-age` on a timestamp `created_at`).
    fn seconds_ago(&self, secs: u64) -> String;

    /// How a time column is read where two times are compared (semantics.md "Backfill",
    /// timestamp evidence; issue 29 rows 3 and 5): a pattern over `{v}` (the column), NULL
    /// for a value that is no time. `evidence`: the "read at" time of timestamp evidence
    /// (else a message's or a join time). The identity where the engine compares its time
    /// types itself (PostgreSQL).
    fn time_value(&self, _evidence: bool) -> &'static str {
        "{v}"
    }

    /// An integer expression over `{col}` that hashes a text key, for `--sample`.
    ///
    /// Errors (exit 2): the engine has no built-in hash for text.
    fn text_key_hash(&self) -> Result<&'static str>;

    /// The watermark table's DDL type for a text key column declared as `declared` (as
    /// `column_type.sql` returns it): the key must compare as the legacy key does.
    fn text_key_ddl(&self, declared: &str) -> String;

    /// The name to create an index `index` under, for a table in `schema` (None: the default
    /// one), quoted. SQLite names the index with the table's schema; the servers put an index
    /// in its table's schema by themselves.
    fn index_name(&self, schema: Option<&str>, index: &str) -> String;

    /// The clause appended to an `INSERT` to get the new row's `id` back (`RETURNING id`), or
    /// None where the engine has none and [`Self::last_insert_id`] reads it afterwards.
    fn returning_id(&self) -> Option<&'static str> {
        Some("RETURNING id")
    }

    /// The query that reads the id of the row the connection inserted last (one BIGINT
    /// column), where [`Self::returning_id`] is None.
    fn last_insert_id(&self) -> Option<&'static str> {
        None
    }

    /// The migration files under `migrations/<dialect>/`, in version order: (refinery name,
    /// template). The templates see `wm`, `wm_table`, `wm_index`, `user_type`, `conv_type`.
    fn migrations(&self) -> &'static [(&'static str, &'static str)];

    /// sqlparser-rs's dialect for this engine: what the mapping's predicates are parsed with
    /// before any statement runs ([`crate::mapping::Mapping::check_predicates`]).
    fn sql_parser_dialect(&self) -> &'static dyn sqlparser::dialect::Dialect;

    /// The statement(s) that give `column` of `table` (both quoted) a 64-bit integer type,
    /// for `inspect`'s warning about a counter or position that is not an integer.
    fn inspect_integer_fix(&self, table: &str, column: &str) -> String;

    /// How the statements compare a text key column of collation `c` when the mapping's key
    /// columns do not all have the same collation (issue 25: [`KeyCompare`], patterns over
    /// `{v}`): keys passed on between tables in the engine's byte-wise collation
    /// ([`Self::bytewise_collation`]), a batch's keys looked up by equality in a form that
    /// compares bytes and keeps the column's index where the engine allows it (measured with
    /// EXPLAIN: the book's "Mixed key collations" (docs/src/collations.md)).
    fn key_compare(&self, c: &Collation) -> KeyCompare;

    /// The collation keys are compared in when the key columns' collations differ, as notices
    /// name it: `COLLATE "C"`, `utf8mb4_bin`, `BINARY`.
    fn bytewise_collation(&self) -> &'static str;

    /// How the statements compare a uuid key column (issue 29 row 14; [`KeyCompare`],
    /// patterns over `{v}`): tidemark reads and binds a uuid key as its text form, so keys are
    /// passed on, ordered and bound as text and looked up with the bound text converted to the
    /// column's type. The default (as it is) serves an engine that converts between a uuid
    /// column and text by itself (MariaDB's `UUID`).
    fn uuid_key_compare(&self) -> KeyCompare {
        KeyCompare::default()
    }

    /// Quotes one identifier, or a `schema.table` pair part by part.
    fn quote(&self, ident: &str) -> String {
        ident
            .split('.')
            .map(|part| self.quote_part(part))
            .collect::<Vec<_>>()
            .join(".")
    }
}

/// Sessions and transactions: the statements that set a connection up, open the stages'
/// transactions, bound their lock waits, and what a lock-wait error looks like.
pub trait Sessions: Sync {
    /// Statements run once on every new connection ([`crate::db::Dsn::connect`]); a failure
    /// is ignored (a setting an older server does not know). Empty where nothing is needed.
    fn session_setup_sql(&self) -> &'static [&'static str] {
        &[]
    }

    /// Sets the time zone this session compares times in (semantics.md "Backfill", timestamp
    /// evidence; issue 29 row 2): `zone` when the DBA names one (`--time-zone`), else the
    /// zone the database's own session would have (PostgreSQL: the role's and database's
    /// `timezone` setting, which the driver's startup `TimeZone=UTC` hides; MySQL/MariaDB:
    /// `@@global.time_zone`, which the driver's `+00:00` hides). Run once on every new
    /// connection ([`crate::db::Dsn::connect`]). SQLite has no session zone: nothing.
    ///
    /// Errors (exit 2): the server does not know `zone`, named with the server's reason.
    /// Reading the database's own zone never fails the connection (the driver's zone stays).
    fn session_time_zone<'a>(
        &'a self,
        _conn: &'a mut AnyConnection,
        _zone: Option<&'a str>,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    /// The statement that marks this server session with `token` and reads its server
    /// process id (two columns: the pid as BIGINT, the mark as text), for the shared-session
    /// probe ([`crate::db::pooling`], issue 29 row 6); None where no pooler can stand between
    /// tidemark and the engine (the probe is then skipped). `token` is tidemark's own text
    /// (digits and `-`), never input.
    fn session_mark_sql(&self, _token: &str) -> Option<String> {
        None
    }

    /// The statement that reads this server session's process id and mark (as
    /// [`Self::session_mark_sql`] sets it; an empty text when unmarked); None as there.
    fn session_mark_read_sql(&self) -> Option<&'static str> {
        None
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
    /// [`Self::lock_wait_codes`] (for errors whose code the driver does not pass on).
    fn lock_wait_messages(&self) -> &'static [&'static str];

    /// Error codes, as the driver reports them, of a server that ended the session (an
    /// administrator's kill, a shutdown): the statement's fate is not known to the client
    /// ([`crate::dialect::Dialect::error_is_connection_lost`]). A lost socket needs no code.
    fn session_ended_codes(&self) -> &'static [&'static str] {
        &[]
    }

    /// Whether DDL is transactional: then a migration and its history row commit together.
    /// (MySQL commits DDL implicitly, so a transaction there would mislead.)
    fn transactional_ddl(&self) -> bool;

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

    /// Why this engine runs a stage's batches one at a time, refusing `--jobs N` above 1
    /// (exit 2, [`crate::stages::parallel::Jobs::check`]); None where N batches may run at
    /// once on N connections (issue 30, "parallel batches on one big server").
    fn parallel_batches_refused(&self) -> Option<&'static str> {
        None
    }
}

/// The runner lock: one tidemark per mapping and stage at a time (a PostgreSQL advisory lock, a
/// MySQL/MariaDB named lock or a Galera lock row, a SQLite lock row). [`crate::lock::RunnerLock`]
/// is the handle the stages hold.
pub trait RunnerLocks: Sync {
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
    /// [`Self::runner_lock_name`] returned it) for this session; a lock taken says its
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
    /// row's heartbeat; PostgreSQL's lease (one `SET application_name`); nothing, and no
    /// statement, for MySQL's [`LockKind::Session`] lock.
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
}

/// Reading the catalog: column and expression types (one classifier, [`Self::type_class`], for
/// `inspect`, the preflight and the key types), tables and views, privileges, statement
/// statistics, and the catalog queries `inspect` runs.
pub trait Catalog: Sync {
    /// The type of the SQL expression `expr` (the mapping's `[counter] value`) over the rows
    /// `from` (`<table> this [LEFT JOIN …] WHERE (<rows>)`, already known to resolve), named
    /// as this engine names types (for [`crate::schema::column_types::family`]), or None when it
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

    /// The collation of `table.column` (both unquoted; `table` maybe `schema.name`), or None
    /// when the column does not exist or has none (not a text column; SQLite: a view's
    /// column, whose collation its expression decides). PostgreSQL: `pg_attribute.attcollation`
    /// in `pg_collation`; MySQL/MariaDB: `information_schema.COLUMNS.COLLATION_NAME`; SQLite:
    /// the `COLLATE` of the column's definition in `sqlite_master` (`BINARY` when none).
    ///
    /// Errors (exit 3): the catalog cannot be read.
    fn column_collation<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        table: &'a str,
        column: &'a str,
    ) -> BoxFuture<'a, Result<Option<Collation>>>;

    /// A query answering one integer, above 0 when `table` (unquoted, maybe `schema.name`) is
    /// a view, with its bind values in order ([`crate::db::catalog::is_view`]).
    fn view_count_query(&self, table: &str) -> (String, Vec<Option<String>>);

    /// Splits a declared column type as `column_type.sql` returns it into the type and the
    /// attributes the engine appends (MySQL: ` CHARACTER SET … COLLATE …`; empty elsewhere).
    fn split_type_attributes<'a>(&self, declared: &'a str) -> (&'a str, &'a str) {
        (declared, "")
    }

    /// The bind values of `contract_columns.sql` for `table` (as the mapping names it,
    /// possibly `schema.table`), in order.
    fn table_columns_binds(&self, table: &str) -> Vec<Option<String>>;

    /// The query of the session's user as the database knows it (one text column), or None
    /// where the database has no users or privileges (SQLite): then
    /// [`crate::db::privileges`] checks nothing.
    fn current_user_sql(&self) -> Option<&'static str> {
        None
    }

    /// `user` (as [`Self::current_user_sql`] returned it) as the grantee of a GRANT
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

    /// Whether the server keeps statement statistics tidemark can read: `Ok(source)` (the
    /// view `contract_statements.sql` reads), or `Err(reason)` in words. Never fails otherwise.
    fn statement_statistics<'a>(
        &'a self,
        conn: &'a mut sqlx::AnyConnection,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<&'static str, String>> + Send + 'a>,
    >;

    /// Why reading the statement statistics from `source` failed with `message`, in words.
    fn statement_statistics_error(&self, source: &str, message: &str) -> String {
        format!("cannot read {source}: {message}")
    }

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

    /// The query listing the declared foreign keys, one row per referencing column: schema
    /// (text, empty for the default one), table (text), column (text), referenced table's own
    /// name (text), ordered by schema, table, column ([`crate::inspect::catalog`]; issue 32).
    fn inspect_foreign_keys_query(&self) -> &'static str;
    /// The class of a declared column type as this engine's catalog spells it (as
    /// `sql/<dialect>/column_type.sql`, [`Self::inspect_columns_query`] and
    /// [`Self::expression_type`] return it): the one classifier of types in tidemark.
    fn type_class(&self, declared: &str) -> TypeClass {
        TypeClass::of_server_type(self.split_type_attributes(declared).0)
    }

    /// Whether `replica` (the `--read-database` connection, issue 31) is a streaming replica
    /// of `primary`, and how far behind it is: waits at most `limit` for the replica to
    /// replay what the primary had written when asked (PostgreSQL: `pg_current_wal_lsn()`
    /// against `pg_last_wal_replay_lsn()`; MariaDB: `@@gtid_binlog_pos` and
    /// `MASTER_GTID_WAIT`, with `SHOW REPLICA STATUS`'s `Seconds_Behind_Master` where GTIDs
    /// cannot tell).
    ///
    /// Errors: exit 2 where the engine has no replicas (SQLite, the default); exit 3 when
    /// either server cannot be asked (a missing privilege named).
    fn replica_state<'a>(
        &'a self,
        _primary: &'a mut AnyConnection,
        _replica: &'a mut AnyConnection,
        _limit: Duration,
    ) -> BoxFuture<'a, Result<ReplicaState>> {
        Box::pin(async {
            Err(crate::error::input_error(
                "--read-database: this engine has no replicas (SQLite is one file); leave --read-database out",
            ))
        })
    }

    /// The tables among `tables` (as the mapping names them, maybe `schema.name`) that are
    /// MariaDB Spider tables (`ENGINE=SPIDER` in `information_schema.TABLES`, issue 31),
    /// whose pushed-down aggregates return wrong correlated counts; empty where the engine
    /// has no Spider (the default).
    ///
    /// Errors (exit 3): the catalog cannot be read.
    fn spider_tables<'a>(
        &'a self,
        _conn: &'a mut AnyConnection,
        _tables: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<String>>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// Whether a key column of this declared type cannot be read back through the database
    /// driver (MySQL/MariaDB `MEDIUMINT`: sqlx's Any driver has no mapping for the wire type
    /// `Int24`, and every statement that returns such a column fails). False by default.
    fn key_type_unreadable(&self, _declared: &str) -> bool {
        false
    }

    /// Whether every value of a column (or expression) of type `declared` is a whole number
    /// within the 64-bit integer range, so that the preflight need not read the values to
    /// know it ([`crate::schema::counter_values`]): an integer type of at most 64 bits,
    /// signed (MySQL/MariaDB: not `BIGINT UNSIGNED`; SQLite: never, its values carry their
    /// own types whatever the declared one).
    fn holds_only_int64(&self, declared: &str) -> bool {
        self.type_class(declared) == TypeClass::Integer
    }

    /// Whether the engine keeps dates in text columns by design (SQLite: ISO-8601 text is its
    /// documented date form, "Date And Time Functions"), so a text column may hold a time.
    fn dates_in_text(&self) -> bool {
        false
    }

    /// Whether a date/time column of type `declared` (as `column_type.sql` returns it) holds
    /// an instant (PostgreSQL `timestamp with time zone`, MySQL/MariaDB `TIMESTAMP`, kept in
    /// UTC and shown in the session's zone) rather than a wall time without zone (`timestamp`,
    /// `DATETIME`): the two compare through the session's time zone (issue 29 row 2,
    /// [`crate::schema::time_kinds`]). False where the engine has no such types (SQLite).
    fn time_has_zone(&self, _declared: &str) -> bool {
        false
    }
}

/// The contract's drop, owned whole by each engine: the lock it takes, the check inside it, the
/// statements that drop a column or a table (SQLite: in place or by the documented table
/// rebuild), and what the server's errors mean on the way.
pub trait ColumnDrop: Sync {
    /// The database's detail of an error, where the engine gives one besides its message
    /// (PostgreSQL's DETAIL, e.g. the view that depends on a column); None elsewhere.
    fn error_detail(&self, _error: &sqlx::Error) -> Option<String> {
        None
    }
    /// The steps that drop `target` on this engine, waiting at most `lock_timeout` for its
    /// lock; `execute`: the plan is to be run (SQLite refuses a view that uses the column then;
    /// a dry run names it through the gate). Reads the catalog (SQLite: the table's definition
    /// and the objects that use it; MySQL/MariaDB: the server's version, for INSTANT), writes
    /// nothing.
    ///
    /// Errors (exit 2): on SQLite, a trigger or view that still uses the column (or the table,
    /// with `drop_table`), a counter column that is part of the primary key or that another
    /// column's definition uses. Exit 3: the catalog cannot be read.
    fn plan_drop<'a>(
        &'a self,
        conn: &'a mut AnyConnection,
        target: &'a DropTarget,
        lock_timeout: Duration,
        execute: bool,
    ) -> BoxFuture<'a, Result<DropPlan>>;

    /// Whether `error` is the server refusing `ALGORITHM=INSTANT` for this table, so that the
    /// plan's [`super::types::DropStep::InstantOrDefault`] runs the default algorithm instead.
    fn instant_refused(&self, _error: &sqlx::Error) -> bool {
        false
    }
}

/// Tables spread over several nodes (Citus on PostgreSQL, issue 21): tidemark's own tables
/// follow the chat tables, so that a batch's statements join tables that live together.
pub trait Distribution: Sync {
    /// After `expand`'s migrations (or, with `dry_run`, instead of them): where a chat table of
    /// `plan` is distributed by its conversation column, makes the watermark table distributed
    /// by `conversation_id` and colocated with it (each conversation's watermarks on the node
    /// that holds its messages and members), and the counter archive a table the contract's
    /// checks join on every node. Returns each thing done (with `dry_run`: to be done), or
    /// found done already, in words: what `expand` says. Empty where the engine spreads no
    /// tables (the default: one server, a Galera cluster, SQLite) or the chat tables are not
    /// distributed.
    ///
    /// Errors (exit 2): the watermark table cannot be colocated (its conversation column's type
    /// differs from the chat table's). Exit 3: the database fails.
    fn colocate<'a>(
        &'a self,
        _conn: &'a mut AnyConnection,
        _plan: &'a Colocation,
        _dry_run: bool,
    ) -> BoxFuture<'a, Result<Vec<String>>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

/// What the demo and the tests need of an engine, outside the production traits: scratch
/// databases, the generator's and the demo application's transactions.
pub trait Admin: Sync {
    /// The statement that opens each of the generator's load transactions: `BEGIN`, or
    /// `START TRANSACTION` on MySQL.
    fn generator_begin(&self) -> &'static str;

    /// The statement that opens a write transaction of the demo's application (dual-write
    /// period): `BEGIN`, or `BEGIN IMMEDIATE` on SQLite (the write lock from the start, so two
    /// writers never deadlock on the upgrade).
    fn demo_begin_write(&self) -> &'static str;

    /// Whether the database is a file of the demo's own (SQLite: it is recreated, and copied
    /// with `VACUUM INTO` for the destructive part) rather than a database on a server (it
    /// must be empty or a demo's, and the contract runs on it).
    fn demo_database_is_file(&self) -> bool;

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

    /// The environment variable that names the admin URL of this engine's test and benchmark
    /// server, and its default (`TIDEMARK_TEST_POSTGRES_URL`, …); None for an engine without
    /// servers (SQLite).
    fn test_server(&self) -> Option<(&'static str, &'static str)> {
        None
    }
}
