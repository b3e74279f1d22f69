//! The stages of the migration (expand, backfill, audit, status) and what they share: keys and
//! conversation-range batches ([`batch`]), snapshot transactions ([`crate::db::tx`]).

pub mod audit;
pub mod backfill;
pub mod batch;
pub mod contract;
pub mod expand;
pub mod status;

pub use batch::{bind_scope, next_batch, scope_params, Batch, BatchUnit, Key, MinAge, Scope};
// Moved below the stages (so that `lock`, `schema` and `ledger` need nothing from here);
// re-exported for the stages and the tests that use them by these paths.
pub use crate::db::tx::{begin_snapshot, begin_write, commit, rollback};
pub use crate::values::{now_ms, text};
