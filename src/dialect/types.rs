//! The data the engines' operations take and give, shared by the traits ([`super::traits`]) and
//! every engine: the class of a declared column type (one classifier for `inspect`, the
//! preflight's type check and the watermark table's key types), a runner lock's kind and the
//! answer of an attempt, a privilege probe, and the steps of the contract's drop.

/// A boxed, sendable future, as the engines' operations that talk to the database return it
/// (the traits are used as `dyn`, so their async methods cannot be `async fn`).
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// What a declared column type is, as far as tidemark cares: a position or a counter must be
/// an [`TypeClass::Integer`] (or an integer-valued [`TypeClass::Decimal`]), a time a
/// [`TypeClass::Timestamp`] (or an epoch integer), a bare predicate a boolean or integer, a
/// key an integer, text or uuid (issue 29: [`crate::schema::KeyFamily`]). Each engine classifies its own type names
/// ([`crate::dialect::traits::Catalog::type_class`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypeClass {
    /// An integer type of any width (SQLite: a declared type containing `INT`).
    Integer,
    /// `numeric` / `decimal` (SQLite: NUMERIC affinity that is not a date or boolean name).
    Decimal,
    /// `real`, `float`, `double`.
    Float,
    /// Text of any length (`char`, `varchar`, `text`, `clob`, MySQL `enum`/`set`).
    Text,
    /// A date, time or timestamp.
    Timestamp,
    /// A boolean (MySQL `bit(1)` included).
    Boolean,
    /// No declared type (SQLite, or a view's expression column): not checked.
    Unknown,
    /// Anything else (binary, uuid, json, interval, arrays…).
    Other,
}

impl TypeClass {
    /// The class of a server's type name as its catalog spells it (PostgreSQL's `format_type`
    /// and `pg_typeof`, MySQL/MariaDB's `COLUMN_TYPE` without its character set): the first
    /// word, without its `(…)` length, decides; a name it does not know is read by the words
    /// it contains (`int`, `char`, `time`…).
    pub fn of_server_type(declared: &str) -> TypeClass {
        let lower = declared.trim().to_ascii_lowercase();
        if lower.is_empty() {
            return TypeClass::Unknown;
        }
        let first = lower.split(['(', ' ']).next().unwrap_or_default();
        match first {
            "smallint" | "integer" | "int" | "bigint" | "int2" | "int4" | "int8" | "tinyint"
            | "mediumint" | "serial" | "bigserial" | "smallserial" => TypeClass::Integer,
            "boolean" | "bool" => TypeClass::Boolean,
            "bit" if lower == "bit" || lower.starts_with("bit(1)") => TypeClass::Boolean,
            "numeric" | "decimal" => TypeClass::Decimal,
            "real" | "double" | "float" | "float4" | "float8" => TypeClass::Float,
            "character" | "char" | "varchar" | "text" | "tinytext" | "mediumtext" | "longtext"
            | "citext" | "name" | "enum" | "set" => TypeClass::Text,
            "timestamp" | "timestamptz" | "datetime" | "date" | "time" => TypeClass::Timestamp,
            _ => Self::by_words(&lower),
        }
    }

    /// The class of a SQLite declared type, by SQLite's affinity rules ("Datatypes In
    /// SQLite", 3.1: a type containing `INT` is an integer; `CHAR`, `CLOB` or `TEXT` text;
    /// `BLOB` none; `REAL`, `FLOA` or `DOUB` a float; anything else NUMERIC), with boolean and
    /// date/time names told apart from other NUMERIC ones.
    pub fn of_sqlite_type(declared: &str) -> TypeClass {
        let lower = declared.trim().to_ascii_lowercase();
        if lower.is_empty() {
            return TypeClass::Unknown;
        }
        match Self::by_words(&lower) {
            TypeClass::Other if !lower.contains("blob") => TypeClass::Decimal,
            class => class,
        }
    }

    /// The class of a lower-case type name by the words it contains.
    fn by_words(t: &str) -> TypeClass {
        if t.starts_with("interval") || t == "point" {
            TypeClass::Other
        } else if t.contains("int") {
            TypeClass::Integer
        } else if t.contains("char")
            || t.contains("text")
            || t.contains("clob")
            || t.starts_with("enum")
            || t.starts_with("set(")
        {
            TypeClass::Text
        } else if t.contains("time") || t.contains("date") {
            TypeClass::Timestamp
        } else if t.starts_with("bool") {
            TypeClass::Boolean
        } else if t.starts_with("numeric") || t.starts_with("decimal") {
            TypeClass::Decimal
        } else if t.contains("real") || t.contains("floa") || t.contains("doub") {
            TypeClass::Float
        } else {
            TypeClass::Other
        }
    }
}

/// Which kind of runner lock a session took: what keeping it alive and releasing it take.
/// Decided once, when the lock is taken ([`crate::dialect::traits::RunnerLocks::try_runner_lock`]), and kept by
/// [`crate::lock::RunnerLock`], so that the per-batch heartbeat asks the server nothing it
/// already answered (a MySQL-dialect server is asked `wsrep_on` once, not once per batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// A lock the server ties to the session (`pg_try_advisory_lock`, `GET_LOCK`): it lives
    /// as long as the connection; released by the server's unlock call. No heartbeat on
    /// MySQL/MariaDB; on PostgreSQL the heartbeat renews the session's lease
    /// (`src/dialect/postgres/locks.rs`), after which another runner takes the lock over.
    Session,
    /// A row in `tidemark_lock` (SQLite; a MariaDB Galera cluster, where `GET_LOCK` is per
    /// node): kept alive by a heartbeat, released by deleting the row.
    Row,
}

/// The answer of one attempt to take a runner lock without waiting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockAttempt {
    /// This session holds the lock now, of this kind.
    Taken(LockKind),
    /// Another runner holds it: who, as the engine can tell (e.g. `held by server process 42
    /// from local (tidemark), connected since …`, or `process 42 on host, last seen 3 s ago`).
    /// [`crate::lock::RunnerLock::acquire`] puts it after the lock's name in its error.
    Held(String),
}

/// A probe of the right to change a table, as [`crate::dialect::traits::Catalog::ddl_privilege_probe`] gives it.
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

/// What the contract drops, as an engine's [`crate::dialect::traits::ColumnDrop::plan_drop`]
/// needs it: names as the mapping writes them (unquoted; `schema.table` allowed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DropTarget {
    /// The table holding the column.
    pub table: String,
    /// The column dropped (with `drop_table`, the counter column the table holds).
    pub column: String,
    /// The whole table is dropped (`--drop-table`, `drop = "table"`).
    pub drop_table: bool,
}

/// One step of the drop, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum DropStep {
    /// A statement, run as is.
    Sql(String),
    /// Inside the lock: the column must still equal the archive, row by row (keys and value)
    /// and by checksum.
    Verify,
    /// `PRAGMA foreign_key_check` after SQLite's table rebuild: it must return no row.
    ForeignKeyCheck(String),
    /// `ALGORITHM=INSTANT`, and the default algorithm if the server refuses INSTANT for this
    /// table ([`crate::dialect::traits::ColumnDrop::instant_refused`]).
    InstantOrDefault {
        /// The statement with `ALGORITHM=INSTANT`.
        instant: String,
        /// The same without it.
        default: String,
    },
}

impl DropStep {
    /// The step as printed (statements end with `;`, tidemark's own checks are comments).
    pub fn lines(&self, target: &DropTarget) -> Vec<String> {
        match self {
            DropStep::Sql(s) => vec![format!("{s};")],
            DropStep::Verify => vec![format!(
                "-- tidemark: {}.{} must still equal the archive, row by row (keys and value) and by checksum (rows, non-NULL values, sum, sum of squares), else stop",
                target.table, target.column
            )],
            DropStep::ForeignKeyCheck(s) => vec![format!("{s}; -- must return no row")],
            DropStep::InstantOrDefault { instant, default } => vec![
                format!("{instant};"),
                format!("-- if the server refuses INSTANT for this table: {default};"),
            ],
        }
    }
}

/// The statements that drop a column or table on one engine: its lock, the check inside it,
/// the drop and the end of the lock.
#[derive(Debug, Clone)]
pub struct DropPlan {
    /// The steps, in order.
    pub steps: Vec<DropStep>,
    /// What undoes a failed attempt (ROLLBACK, UNLOCK TABLES, pragmas back on).
    pub on_failure: Vec<String>,
    /// Remarks for the person reading the plan.
    pub notes: Vec<String>,
}

impl DropPlan {
    /// The plan most engines follow: the statements that take the lock, the check inside it,
    /// the drop, then `end` (COMMIT, UNLOCK TABLES); `on_failure` undoes an attempt.
    pub fn locked(lock: Vec<String>, drop: DropStep, end: &str, on_failure: &str) -> DropPlan {
        let mut steps: Vec<DropStep> = lock.into_iter().map(DropStep::Sql).collect();
        steps.push(DropStep::Verify);
        steps.push(drop);
        steps.push(DropStep::Sql(end.to_string()));
        DropPlan {
            steps,
            on_failure: vec![on_failure.to_string()],
            notes: Vec::new(),
        }
    }

    /// Every line as printed.
    pub fn lines(&self, target: &DropTarget) -> Vec<String> {
        self.steps.iter().flat_map(|s| s.lines(target)).collect()
    }
}

/// What `expand` asks of a distributed database ([`super::traits::Distribution::colocate`]):
/// the chat tables that may be distributed, each with its conversation column, and tidemark's
/// per-conversation tables. Names are unquoted, as the mapping writes them (`schema.table`
/// allowed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Colocation {
    /// (table, conversation column), in order of preference: the messages table, then the
    /// members table, then the counter table. The first one distributed by its conversation
    /// column is the one tidemark's tables are colocated with.
    pub chat: Vec<(String, String)>,
    /// The watermark table; its conversation column is `conversation_id` (migration V1).
    pub watermarks: String,
    /// The counter archive (`tidemark_counter_archive`, migration V3).
    pub archive: String,
}

#[cfg(test)]
mod tests {
    use super::TypeClass::{self, *};

    #[test]
    fn server_types() {
        for (declared, class) in [
            ("bigint", Integer),
            ("int(11)", Integer),
            ("bigint(20) unsigned", Integer),
            ("int (Tiny)", Integer),
            ("character varying(64)", Text),
            ("text/blob", Text),
            ("enum('a','b')", Text),
            ("timestamp with time zone", Timestamp),
            ("datetime(3)", Timestamp),
            ("numeric(10,0)", Decimal),
            ("numeric(10,2)", Decimal),
            ("point", Other),
            ("double precision", Float),
            ("boolean", Boolean),
            ("bit(1)", Boolean),
            ("bit(8)", Other),
            ("uuid", Other),
            ("interval", Other),
            ("", Unknown),
        ] {
            assert_eq!(TypeClass::of_server_type(declared), class, "{declared}");
        }
    }

    #[test]
    fn sqlite_affinity() {
        for (declared, class) in [
            ("INTEGER", Integer),
            ("BIGINT", Integer),
            ("VARCHAR(10)", Text),
            ("DATETIME", Timestamp),
            ("REAL", Float),
            ("BOOL", Boolean),
            ("TIMESTAMP", Timestamp),
            ("VARCHAR(64)", Text),
            ("BOOLEAN", Boolean),
            ("NUMBER", Decimal),
            ("BLOB", Other),
            ("", Unknown),
        ] {
            assert_eq!(TypeClass::of_sqlite_type(declared), class, "{declared}");
        }
    }
}

/// What a `--read-database` server is (issue 31), as its engine measured it against the
/// primary ([`super::traits::Catalog::replica_state`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicaState {
    /// Not a streaming replica of the primary (a primary itself, a server that replicates
    /// from nothing, or a replica of another cluster): the engine's evidence in words, e.g.
    /// "pg_is_in_recovery() is false".
    NotReplica(String),
    /// A replica of the primary.
    Replica {
        /// How far its data is behind the primary's: zero when it had replayed everything the
        /// primary had written when asked; else the time it took to catch up with that, or,
        /// when it did not within the limit, at least the limit (and at least the engine's
        /// own figure, e.g. `now() - pg_last_xact_replay_timestamp()`).
        lag: std::time::Duration,
        /// Whether it caught up within the limit asked.
        within: bool,
        /// How the lag was measured, in words (for the summary and the refusal).
        measured: String,
    },
}
