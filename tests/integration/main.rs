//! tidemark's integration tests: one test binary (`cargo test --test integration`), one module
//! per suite, one support module (`common`).
//!
//! Running:
//!
//! - everything: `cargo test`; one suite: `cargo test --test integration cli::`; one test:
//!   `cargo test --test integration -- contract::cli_exit_codes::sqlite --exact`.
//! - backends and servers: see `common` (`TIDEMARK_TEST_BACKENDS`, `TIDEMARK_TEST_POSTGRES_URL`,
//!   `TIDEMARK_TEST_MYSQL_URL`; with `CI` set a server that does not answer fails the run).
//!
//! Adding a suite: put it in `tests/integration/NAME.rs` (or move a `tests/NAME.rs` here with
//! `git mv`), drop its `mod common;` line, and add one `mod NAME;` line below. Inside a suite,
//! `use crate::common::{...}` replaces `mod common; use common::{...}`, and
//! `crate::scenario` holds the shared scenarios. Cargo.toml has `autotests = false`: a file
//! left directly in `tests/` is not built at all.

mod common;
mod scenario;

mod audit;
mod backfill;
mod cli;
mod contract;
mod demo;
mod generate;
mod scenarios;
mod synapse;
