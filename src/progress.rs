//! Progress for long stages: an indicatif bar (done / total, rows per second, ETA) on a
//! terminal; on cron and CI (stderr not a terminal) a plain line every 10 s instead; nothing
//! with `--quiet`.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// A stage's progress display.
pub struct Progress {
    bar: Option<ProgressBar>,
    /// Off a terminal: the line format and when the last line was printed.
    plain: Option<(String, Instant)>,
    done: u64,
    started: Instant,
    last_message: String,
}

impl Progress {
    /// A display for `total` units of `what` (e.g. "members"), labelled `stage`.
    pub fn new(stage: &str, what: &str, total: u64, quiet: bool) -> Progress {
        let started = Instant::now();
        if quiet {
            return Progress {
                bar: None,
                plain: None,
                done: 0,
                started,
                last_message: String::new(),
            };
        }
        if std::io::stderr().is_terminal() {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template(&format!(
                "{stage:>9} [{{bar:30}}] {{pos}}/{{len}} {what} {{per_sec}} ETA {{eta}} {{msg}}"
            ))
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
            bar.set_style(style);
            Progress {
                bar: Some(bar),
                plain: None,
                done: 0,
                started,
                last_message: String::new(),
            }
        } else {
            Progress {
                bar: None,
                plain: Some((format!("{stage}: {{}}/{total} {what}"), started)),
                done: 0,
                started,
                last_message: String::new(),
            }
        }
    }

    /// Adds `n` finished units.
    pub fn advance(&mut self, n: u64) {
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
    pub fn message(&mut self, msg: &str) {
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
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
