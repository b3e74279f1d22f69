//! tidemark's integration tests: one test binary (`cargo test --test integration`), one module
//! per suite, one support module (`common`).
//!
//! Running:
//!
//! - everything: `cargo test`; one suite: `cargo test --test integration cli::`; one test:
//!   `cargo test --test integration -- contract::gate::cli_exit_codes::sqlite --exact`.
//! - backends and servers: see `common` (`TIDEMARK_TEST_BACKENDS`, `TIDEMARK_TEST_POSTGRES_URL`,
//!   `TIDEMARK_TEST_MYSQL_URL`; with `CI` set a server that does not answer fails the run).
//!
//! Sizes (checked by `house::lengths`): a test file at most 700 lines, a test function at most
//! 150. A suite that outgrows one file becomes a folder, `tests/integration/NAME/mod.rs` with
//! its shared helpers and one module per topic (`contract/gate.rs`, `contract/execute.rs`,
//! ...), each starting with `use super::*;`. A real schema's suite loads its folder under
//! `tests/fixtures/` with `common::fixture::Fixture` (the one fixture runner) and keeps only
//! what is particular to it.
//!
//! Adding a suite: put it in `tests/integration/NAME.rs` (or move a `tests/NAME.rs` here with
//! `git mv`), drop its `mod common;` line, and add one `mod NAME;` line below. Inside a suite,
//! `use crate::common::{...}` replaces `mod common; use common::{...}`, and
//! `crate::scenario` holds the shared scenarios. Cargo.toml has `autotests = false`: a file
//! left directly in `tests/` is not built at all.
//!
//! Snapshots (`snapshot` suite, insta; files in `tests/integration/snapshots/`): when what users
//! see changes on purpose (a `--help` text, the SQL `tidemark plan` prints), review and accept
//! the new snapshots with `cargo insta review` / `cargo insta accept` (cargo-insta), or without
//! it `INSTA_UPDATE=always cargo test --test integration snapshot::` and check the `.snap` diff
//! in git. With `CI` set insta writes nothing (`INSTA_UPDATE` defaults to `no` there) and a
//! missing or different snapshot fails the test.

mod common;
mod scenario;

mod app_sql;
mod audit;
mod audit_model;
mod audit_throttle;
mod audit_wording;
mod backfill;
mod backfill_policy;
mod citus;
mod citus_lint;
mod cli;
mod collations;
mod column_types;
mod contract;
mod contract_dependents;
mod contract_failure;
mod contract_gate;
mod contract_privileges;
mod counter_rows;
mod demo;
mod differential;
mod docs_examples;
mod duplicate_members;
mod every_counter;
mod evidence_forms;
mod evidence_share;
mod faults;
mod flags_conversation;
mod forum;
mod forum_fixture;
mod galera;
mod generate;
mod grafana;
mod house;
mod html_report;
mod inspect;
mod inspect_foreign_keys;
mod inspect_known;
mod jobs;
mod json_output;
mod key_types;
mod least_privilege;
mod mapping_fuzz;
mod mattermost;
mod mention_readers;
mod numeric_edges;
mod poolers;
mod positions;
mod predicates;
mod privileges;
mod provenance;
mod read_flags;
mod readers;
mod replicas;
mod report_files;
mod runner_lock;
mod scenarios;
mod secrets;
mod settle;
mod several_counters;
mod shards;
mod snapshot;
mod synapse;
mod time_evidence;
mod tolerance;
mod total_minus_seen;
mod two_connections;
mod unfinished_runs;
mod zulip;
