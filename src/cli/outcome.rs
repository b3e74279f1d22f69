//! How a command ended ([`Outcome`]) and its exit code: the one table of tidemark's exit codes
//! (`shared/spec/interface.md`, "Exit codes"), which `main.rs` applies to every command and the
//! contract's JSON prints. Cron jobs and release checklists branch on these codes.

use crate::error::{kind, ErrorKind};

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Done; for `audit`, drift within tolerance; for `contract`, the gate open (or the
    /// counter dropped, or nothing to drop). Exit 0.
    Done,
    /// `audit` found drift above tolerance. Exit 1.
    DriftAboveTolerance,
    /// `contract`: the gate is closed, nothing was dropped. Exit 1.
    GateClosed,
    /// `inspect`: no complete mapping could be proposed (what is missing was named). Exit 1.
    MappingIncomplete,
    /// Bad usage, a bad mapping or bad input, named with the file/line or table/column at
    /// fault. Exit 2.
    BadInput,
    /// The database or I/O failed: connection refused, lock timeout after retries, another
    /// runner holds the lock, disk full. Exit 3.
    Failed,
    /// Stopped before covering every row (`audit --run-time`, or an audit or a backfill
    /// stopped by Ctrl-C or SIGTERM); running the same command again (audit: `--resume`)
    /// continues from the checkpoint. Exit 4.
    Incomplete,
}

impl Outcome {
    /// The exit code of this ending.
    pub fn code(self) -> u8 {
        match self {
            Outcome::Done => 0,
            Outcome::DriftAboveTolerance | Outcome::GateClosed | Outcome::MappingIncomplete => 1,
            Outcome::BadInput => 2,
            Outcome::Failed => 3,
            Outcome::Incomplete => 4,
        }
    }

    /// How bad an ending is, for the several databases of a sharded run (issue 31: the worst
    /// ending wins): a failure (3) over bad input (2) over drift or a closed gate (1) over a
    /// run stopped early (4, which promises no drift above tolerance in what it covered: not
    /// true when another shard found some) over done (0).
    pub fn severity(self) -> u8 {
        match self {
            Outcome::Done => 0,
            Outcome::Incomplete => 1,
            Outcome::DriftAboveTolerance | Outcome::GateClosed | Outcome::MappingIncomplete => 2,
            Outcome::BadInput => 3,
            Outcome::Failed => 4,
        }
    }

    /// The worst of several endings ([`Outcome::severity`]); done when there are none.
    pub fn worst(endings: impl IntoIterator<Item = Outcome>) -> Outcome {
        endings
            .into_iter()
            .max_by_key(|o| o.severity())
            .unwrap_or(Outcome::Done)
    }

    /// How a command that returned `error` ended: bad input, or a failure (anything
    /// unforeseen included: a failure never exits 0 or 1).
    pub fn of_error(error: &anyhow::Error) -> Outcome {
        match kind(error) {
            ErrorKind::BadInput => Outcome::BadInput,
            ErrorKind::Failure => Outcome::Failed,
        }
    }

    /// The exit code of a command that returned `error`.
    pub fn code_of(error: &anyhow::Error) -> u8 {
        Outcome::of_error(error).code()
    }

    /// The exit codes in words, for the man page's EXIT STATUS section: each code once, with
    /// what it means.
    pub const MEANINGS: &'static [(Outcome, &'static str)] = &[
        (Outcome::Done, "success; for audit, drift within tolerance; for contract, the gate is open (or the counter was dropped, or there is nothing to drop)"),
        (Outcome::DriftAboveTolerance, "audit: drift above tolerance; contract: the gate is closed; inspect: no complete mapping"),
        (Outcome::BadInput, "bad input: usage, URL, mapping file, schema that does not match it"),
        (Outcome::Failed, "the database failed (connection, statement, lock wait given up)"),
        (Outcome::Incomplete, "incomplete: stopped before covering every row (audit --run-time, an audit or a backfill stopped by a signal); run the same command again (audit: with --resume) to continue"),
    ];
}

#[cfg(test)]
mod tests {
    use super::Outcome;

    #[test]
    fn codes_are_the_documented_ones() {
        let codes: Vec<u8> = Outcome::MEANINGS.iter().map(|(o, _)| o.code()).collect();
        assert_eq!(codes, [0, 1, 2, 3, 4]);
        assert_eq!(Outcome::GateClosed.code(), 1);
        assert_eq!(Outcome::MappingIncomplete.code(), 1);
        let bad = crate::error::input_error("x");
        assert_eq!(Outcome::of_error(&bad), Outcome::BadInput);
        assert_eq!(
            Outcome::of_error(&anyhow::anyhow!("disk full")),
            Outcome::Failed
        );
    }

    #[test]
    fn the_worst_ending_of_several_shards_wins() {
        use Outcome::*;
        assert_eq!(Outcome::worst([]), Done);
        assert_eq!(Outcome::worst([Done, Incomplete, Done]).code(), 4);
        assert_eq!(Outcome::worst([Incomplete, DriftAboveTolerance]).code(), 1);
        assert_eq!(Outcome::worst([GateClosed, BadInput, Done]).code(), 2);
        assert_eq!(Outcome::worst([BadInput, Failed, Incomplete]).code(), 3);
    }
}
