//! Progress of long stages, as events: the stages report how far they are and why they wait
//! through a [`Reporter`] in their options; what is shown (an indicatif bar on a terminal,
//! plain lines on cron and CI, nothing) is decided by whoever supplies the [`Sink`]: the
//! command line (`crate::cli`), or nobody (tests, the library's default: no output).

use std::fmt;
use std::sync::Arc;

/// Receives the progress of one stage run (created by [`Sink::start`]).
pub trait Bar: Send {
    /// `n` more units (members, rows) are done.
    fn advance(&mut self, n: u64);
    /// Why the stage is waiting (lock wait, throttle, pause file); empty when it no longer
    /// waits.
    fn message(&mut self, msg: &str);
    /// The stage is done with its rows (the display goes away).
    fn finish(&mut self);
}

/// Makes a [`Bar`] for each stage run that reports progress.
pub trait Sink: Send + Sync {
    /// A display for `total` units of `what` (e.g. "members"), labelled `stage` (e.g.
    /// "backfill").
    fn start(&self, stage: &str, what: &str, total: u64) -> Box<dyn Bar>;
}

/// Where a stage sends its progress: a shared [`Sink`], or nowhere (the default).
#[derive(Clone, Default)]
pub struct Reporter(Option<Arc<dyn Sink>>);

impl fmt::Debug for Reporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Reporter(sink)"
        } else {
            "Reporter(none)"
        })
    }
}

impl Reporter {
    /// Progress goes to `sink`.
    pub fn new(sink: Arc<dyn Sink>) -> Reporter {
        Reporter(Some(sink))
    }

    /// No progress output (the same as `Reporter::default()`).
    pub fn none() -> Reporter {
        Reporter(None)
    }

    /// Starts the progress of one stage run: `total` units of `what`, labelled `stage`;
    /// nothing is reported when `quiet` or when there is no sink.
    pub fn start(&self, stage: &str, what: &str, total: u64, quiet: bool) -> Progress {
        Progress(match &self.0 {
            Some(sink) if !quiet => Some(sink.start(stage, what, total)),
            _ => None,
        })
    }
}

/// The progress of one stage run (see [`Reporter::start`]); every method does nothing when
/// progress is not reported.
pub struct Progress(Option<Box<dyn Bar>>);

impl Progress {
    /// Adds `n` finished units.
    pub fn advance(&mut self, n: u64) {
        if let Some(bar) = &mut self.0 {
            bar.advance(n);
        }
    }

    /// Says why the stage is waiting (empty: it no longer waits).
    pub fn message(&mut self, msg: &str) {
        if let Some(bar) = &mut self.0 {
            bar.message(msg);
        }
    }

    /// Ends the display.
    pub fn finish(&mut self) {
        if let Some(bar) = &mut self.0 {
            bar.finish();
        }
    }
}
