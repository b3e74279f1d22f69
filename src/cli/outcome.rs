//! How a command ended ([`Outcome`]): what `cli::run` returns and `main.rs` turns into the exit
//! code. A leaf of `cli`: it imports nothing.

/// How a command ended, when it ended without an error (`main.rs` turns it into the exit
/// code of `shared/spec/interface.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Done; for `audit`, drift within tolerance; for `contract`, the gate open (or the
    /// counter dropped, or nothing to drop).
    Done,
    /// `audit` found drift above tolerance.
    DriftAboveTolerance,
    /// `contract`: the gate is closed, nothing was dropped.
    GateClosed,
    /// `inspect`: no complete mapping could be proposed (what is missing was named).
    MappingIncomplete,
    /// Stopped before covering every row (`audit --run-time`, or an audit or a backfill
    /// stopped by Ctrl-C or SIGTERM); running the same command again (audit: `--resume`)
    /// continues from the checkpoint.
    Incomplete,
}
