//! Progress for long stages on the command line: an indicatif bar (done / total, rows per
//! second, ETA) on a terminal; on cron and CI (stderr not a terminal) a plain line every 10 s
//! instead; nothing with `--quiet` (the stages ask for no bar then, see
//! [`crate::progress::Reporter::start`]).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::Arc;

use crate::progress::{Bar, Reporter, Sink};
use std::time::{Duration, Instant};

/// The command line's [`Sink`]: a [`StderrBar`] on stderr for each stage run.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stderr;

impl Stderr {
    /// A [`Reporter`] that shows progress on stderr.
    pub fn reporter() -> Reporter {
        Reporter::new(Arc::new(Stderr))
    }
}

impl Sink for Stderr {
    fn start(&self, stage: &str, what: &str, total: u64) -> Box<dyn Bar> {
        Box::new(StderrBar::new(stage, what, total))
    }
}

/// A stage's progress display on stderr.
pub struct StderrBar {
    bar: Option<ProgressBar>,
    /// Off a terminal: the line format and when the last line was printed.
    plain: Option<(String, Instant)>,
    done: u64,
    started: Instant,
    last_message: String,
}

impl StderrBar {
    /// A display for `total` units of `what` (e.g. "members"), labelled `stage`.
    pub fn new(stage: &str, what: &str, total: u64) -> StderrBar {
        let started = Instant::now();
        if std::io::stderr().is_terminal() {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template(&format!(
                "{stage:>9} [{{bar:30}}] {{pos}}/{{len}} {what} {{per_sec}} ETA {{eta}} {{msg}}"
            ))
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
            bar.set_style(style);
            StderrBar {
                bar: Some(bar),
                plain: None,
                done: 0,
                started,
                last_message: String::new(),
            }
        } else {
            StderrBar {
                bar: None,
                plain: Some((format!("{stage}: {{}}/{total} {what}"), started)),
                done: 0,
                started,
                last_message: String::new(),
            }
        }
    }
}

impl Bar for StderrBar {
    /// Adds `n` finished units.
    fn advance(&mut self, n: u64) {
        self.done += n;
        if let Some(bar) = &self.bar {
            bar.inc(n);
        }
        if let Some((fmt, last)) = &mut self.plain {
            if last.elapsed() >= Duration::from_secs(10) {
                *last = Instant::now();
                let rate = self.done as f64 / self.started.elapsed().as_secs_f64().max(0.001);
                eprintln!(
                    "{} ({rate:.0}/s)",
                    fmt.replace("{}", &self.done.to_string())
                );
            }
        }
    }

    /// Says why the stage is waiting (beside the bar; as a line of its own when the output is
    /// not a terminal, once per change of reason).
    fn message(&mut self, msg: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(msg.to_string());
        }
        if self.plain.is_some() {
            if !msg.is_empty() && self.last_message != msg {
                eprintln!("{msg}");
            }
            self.last_message = msg.to_string();
        }
    }

    /// Removes the bar.
    fn finish(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
