//! Dialects: everything that differs between the engines tidemark runs on, in one folder.
//!
//! [`Dialect`] ([`handle`]) is the handle the rest of tidemark passes around, learnt from the
//! URL's scheme in [`crate::db::Dsn::parse`]. Each engine owns whole operations, one small
//! trait per job ([`traits`]): SQL rendering ([`Spelling`], which the handle dereferences to),
//! sessions and transactions ([`Sessions`]), the runner lock ([`RunnerLocks`]), catalog
//! reading and the one classifier of column types ([`Catalog`]), the contract's drop
//! ([`ColumnDrop`]: SQLite's table rebuild, MySQL's INSTANT and version check included), tables
//! spread over nodes ([`Distribution`]: Citus), and what only the demo and the tests need
//! ([`Admin`]). Each engine implements them in a folder
//! of its own ([`postgres`], [`mysql`], [`sqlite`]); the data they exchange is in [`types`].
//! Stages ask the handle for an operation and never branch on which engine it is.
//!
//! Statements are minijinja templates ([`templates`]) under `sql/common/` (or
//! `sql/<dialect>/`, which overrides a common one), filled with the mapping's quoted
//! identifiers ([`context::SqlContext`]).
//!
//! Adding an engine: a folder `src/dialect/<engine>/` implementing every trait of [`traits`]
//! (the compiler lists the methods), a variant of [`Dialect`] with its arms in [`handle`], its
//! `sql/<engine>/` files registered in [`templates`], and its `migrations/<engine>/`.

pub mod collation;
pub mod context;
pub mod handle;
pub mod lock_support;
pub mod mysql;
pub mod postgres;
pub mod sqlite;
pub mod templates;
pub mod traits;
pub mod types;

pub use collation::{Collation, KeyCompare};
pub use context::{
    CtrIdents, EvIdents, Joins, LookupIdents, MemIdents, MsgIdents, RowIdents, SqlContext,
};
pub use handle::Dialect;
pub use templates::{render, render_plain, RangeParams};
pub use traits::{Admin, Catalog, ColumnDrop, Distribution, RunnerLocks, Sessions, Spelling};
pub use types::{
    BoxFuture, Colocation, DdlProbe, DropPlan, DropStep, DropTarget, LockAttempt, LockKind,
    RefusedProbe, ReplicaState, TypeClass,
};
