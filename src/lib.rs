//! tidemark moves a live chat database from stored unread counters to read watermarks, in the
//! stages DBAs use for risky changes: expand (migrations), backfill (watermarks from evidence),
//! audit (recompute, compare, classify drift, CSV report) and contract.
//!
//! The rules come from `shared/spec/semantics.md`; the commands, exit codes, mapping file and
//! CSV columns from `shared/spec/interface.md`.

pub mod app_sql;
pub mod cli;

pub mod db;
pub mod demo;
pub mod dialect;
pub mod drift;
pub mod error;
pub mod gate;
pub mod inspect;
pub mod ledger;
pub mod legacy_schema;
pub mod lock;
pub mod mapping;
pub mod migrate;
pub mod progress;
pub mod render;
pub mod report;
pub mod schema;
pub mod sql_text;
pub mod stages;
pub mod tables;
pub mod values;

/// The generator moved under [`demo`]; its old path stays for the tests and the benchmark.
pub use demo::generate;
