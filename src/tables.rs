//! The names of tidemark's own tables, as its migrations (`migrations/<dialect>/`) create them.
//! One place for each name: the engines, the ledger, the contract and `expand` read them here.

/// The ledger: one row per stage run (migration `V2__ledger`).
pub const LEDGER_TABLE: &str = "tidemark_ledger";

/// The contract's archive of dropped counter values (migration `V3__counter_archive`).
pub const ARCHIVE_TABLE: &str = "tidemark_counter_archive";

/// The drifting rows an audit stored with `--store-rows` (migration `V4__drift_rows`).
pub const DRIFT_ROWS_TABLE: &str = "tidemark_drift_rows";

/// The runner lock rows on engines without server-wide named locks (SQLite: migration
/// `V2__ledger`; a MariaDB Galera cluster: created on first use).
pub const LOCK_TABLE: &str = "tidemark_lock";

/// refinery's history of applied migrations.
pub const HISTORY_TABLE: &str = "tidemark_schema_history";
