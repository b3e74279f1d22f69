//! The stages of the migration (expand, backfill, audit, contract, status) and what they share:
//! keys and conversation-range batches ([`batch`]). A library that never prints: each stage
//! takes resolved options and returns a typed outcome.

pub mod audit;
pub mod backfill;
pub mod batch;
pub mod contract;
pub mod expand;
pub mod keepalive;
pub mod parallel;
pub mod status;

pub use batch::{bind_scope, next_batch, scope_params, Batch, BatchUnit, Key, MinAge, Scope};
