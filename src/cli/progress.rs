//! Progress for long stages on the command line: an indicatif bar (done / total, rows per
//! second, ETA) on a terminal; on cron and CI (stderr not a terminal) plain lines instead (see
//! [`PlainLines`]: a progress line every 10 s, a waiting reason once when the stage enters
//! it); nothing with `--quiet` (the stages ask for no bar then, see
//! [`crate::progress::Reporter::start`]). Rates are whole units with thousands separators
//! (`1,820/s`).

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::Arc;

use crate::progress::{Bar, Reporter, Sink};
use std::time::{Duration, Instant};

/// How often a plain progress line is printed off a terminal.
const LINE_EVERY: Duration = Duration::from_secs(10);

/// How long a waiting reason must have gone unreported before it is printed again off a
/// terminal: a reason that comes back every batch (the throttle, the pause between batches)
/// is one state, printed once; one that comes back after a minute (a pause file put back an
/// hour later) is news.
const REENTER_AFTER: Duration = Duration::from_secs(60);

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

/// The progress of several shards at once (issue 31): one display on stderr (on a terminal,
/// the bars of every shard stacked, each labelled with its shard's name; off one, plain lines
/// prefixed with it).
#[derive(Clone)]
pub struct ShardsDisplay {
    /// The stacked bars (None off a terminal).
    multi: Option<MultiProgress>,
}

impl ShardsDisplay {
    /// A display on stderr.
    pub fn new() -> ShardsDisplay {
        ShardsDisplay {
            multi: std::io::stderr()
                .is_terminal()
                .then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr())),
        }
    }

    /// The [`Reporter`] of the shard `name`: its stages' bars in this display, labelled
    /// `name stage`.
    pub fn reporter(&self, name: &str) -> Reporter {
        Reporter::new(Arc::new(ShardSink {
            display: self.clone(),
            name: name.to_string(),
        }))
    }

    /// Prints a line above the bars (or on stderr when there are none).
    pub fn println(&self, line: &str) {
        match &self.multi {
            Some(multi) => {
                let _ = multi.println(line);
            }
            None => eprintln!("{line}"),
        }
    }
}

impl Default for ShardsDisplay {
    fn default() -> Self {
        ShardsDisplay::new()
    }
}

/// One shard's [`Sink`] in a [`ShardsDisplay`].
struct ShardSink {
    display: ShardsDisplay,
    name: String,
}

impl Sink for ShardSink {
    fn start(&self, stage: &str, what: &str, total: u64) -> Box<dyn Bar> {
        let label = format!("{} {stage}", self.name);
        Box::new(StderrBar::in_display(
            self.display.multi.as_ref(),
            &label,
            what,
            total,
        ))
    }
}

/// A count with thousands separators: `1234567` -> `1,234,567`.
pub fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A rate per second, rounded to whole units, with thousands separators: `1819.9953` ->
/// `1,820/s`. A rate that is not finite or below 0 (no time elapsed yet) shows as `0/s`.
pub fn format_rate(per_second: f64) -> String {
    let rounded = if per_second.is_finite() && per_second > 0.0 {
        per_second.round() as u64
    } else {
        0
    };
    format!("{}/s", group(rounded))
}

/// What is printed off a terminal, as lines (kept apart from stderr so it can be tested): a
/// progress line at most every [`LINE_EVERY`], and a waiting reason when the stage enters it
/// (first seen, or unreported for [`REENTER_AFTER`]), not once per batch.
#[derive(Debug)]
pub struct PlainLines {
    stage: String,
    what: String,
    total: u64,
    done: u64,
    started: Instant,
    last_line: Instant,
    /// Each waiting reason with when it was last reported by the stage.
    seen: HashMap<String, Instant>,
}

impl PlainLines {
    /// Lines for `total` units of `what`, labelled `stage`, started at `now`.
    pub fn new(stage: &str, what: &str, total: u64, now: Instant) -> PlainLines {
        PlainLines {
            stage: stage.to_string(),
            what: what.to_string(),
            total,
            done: 0,
            started: now,
            last_line: now,
            seen: HashMap::new(),
        }
    }

    /// `n` more units are done at `now`; the progress line to print, if one is due
    /// (`backfill: 12000/50000 members (1,820/s)`).
    pub fn advance(&mut self, n: u64, now: Instant) -> Option<String> {
        self.done += n;
        if now.duration_since(self.last_line) < LINE_EVERY {
            return None;
        }
        self.last_line = now;
        let secs = now.duration_since(self.started).as_secs_f64().max(0.001);
        Some(format!(
            "{}: {}/{} {} ({})",
            self.stage,
            self.done,
            self.total,
            self.what,
            format_rate(self.done as f64 / secs)
        ))
    }

    /// The stage says why it waits at `now` (empty: it no longer waits); the line to print
    /// when it enters that state.
    pub fn message(&mut self, msg: &str, now: Instant) -> Option<String> {
        if msg.is_empty() {
            return None;
        }
        let entering = self
            .seen
            .get(msg)
            .is_none_or(|last| now.duration_since(*last) >= REENTER_AFTER);
        self.seen.insert(msg.to_string(), now);
        entering.then(|| msg.to_string())
    }
}

/// A stage's progress display on stderr.
pub struct StderrBar {
    bar: Option<ProgressBar>,
    /// Off a terminal: the plain lines.
    plain: Option<PlainLines>,
}

impl StderrBar {
    /// A display for `total` units of `what` (e.g. "members"), labelled `stage`.
    pub fn new(stage: &str, what: &str, total: u64) -> StderrBar {
        let terminal = std::io::stderr().is_terminal();
        StderrBar::shown(terminal.then_some(None), stage, what, total)
    }

    /// A display for one stage of a shard: a bar added to `multi` (a terminal), or plain lines
    /// when there is none.
    fn in_display(multi: Option<&MultiProgress>, stage: &str, what: &str, total: u64) -> StderrBar {
        StderrBar::shown(multi.map(Some), stage, what, total)
    }

    /// A bar when `terminal` is Some (added to the stacked display it holds, if any), plain
    /// lines otherwise.
    fn shown(
        terminal: Option<Option<&MultiProgress>>,
        stage: &str,
        what: &str,
        total: u64,
    ) -> StderrBar {
        if let Some(multi) = terminal {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            let bar = match multi {
                Some(multi) => multi.add(bar),
                None => bar,
            };
            let style = ProgressStyle::with_template(&format!(
                "{stage:>9} [{{bar:30}}] {{pos}}/{{len}} {what} {{rate}} ETA {{eta}} {{msg}}"
            ))
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .with_key(
                "rate",
                |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                    let _ = w.write_str(&format_rate(state.per_sec()));
                },
            )
            .progress_chars("=> ");
            bar.set_style(style);
            StderrBar {
                bar: Some(bar),
                plain: None,
            }
        } else {
            StderrBar {
                bar: None,
                plain: Some(PlainLines::new(stage, what, total, Instant::now())),
            }
        }
    }
}

impl Bar for StderrBar {
    /// Adds `n` finished units.
    fn advance(&mut self, n: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(n);
        }
        if let Some(line) = self
            .plain
            .as_mut()
            .and_then(|p| p.advance(n, Instant::now()))
        {
            eprintln!("{line}");
        }
    }

    /// Says why the stage is waiting (beside the bar; as a line of its own when the output is
    /// not a terminal, once when the stage enters that state).
    fn message(&mut self, msg: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(msg.to_string());
        }
        if let Some(line) = self
            .plain
            .as_mut()
            .and_then(|p| p.message(msg, Instant::now()))
        {
            eprintln!("{line}");
        }
    }

    /// Removes the bar.
    fn finish(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_rounded_with_separators() {
        assert_eq!(format_rate(1819.9953), "1,820/s");
        assert_eq!(format_rate(999.4), "999/s");
        assert_eq!(format_rate(1_234_567.5), "1,234,568/s");
        assert_eq!(format_rate(0.4), "0/s");
        assert_eq!(format_rate(f64::NAN), "0/s");
        assert_eq!(format_rate(f64::INFINITY), "0/s");
        assert_eq!(group(0), "0");
        assert_eq!(group(100), "100");
        assert_eq!(group(1000), "1,000");
        assert_eq!(group(12_345_678), "12,345,678");
    }

    #[test]
    fn a_progress_line_at_most_every_ten_seconds() {
        let t0 = Instant::now();
        let mut p = PlainLines::new("backfill", "members", 50_000, t0);
        assert_eq!(p.advance(1000, t0 + Duration::from_secs(1)), None);
        assert_eq!(
            p.advance(17_200, t0 + Duration::from_secs(10)).as_deref(),
            Some("backfill: 18200/50000 members (1,820/s)")
        );
        assert_eq!(p.advance(100, t0 + Duration::from_secs(15)), None);
        assert!(p.advance(100, t0 + Duration::from_secs(20)).is_some());
    }

    #[test]
    fn a_waiting_reason_is_printed_once_per_state_change() {
        let t0 = Instant::now();
        let mut p = PlainLines::new("backfill", "members", 100, t0);
        let throttled = "throttled: --max-rows-per-second 25";
        let pause = "pause between batches";
        let mut printed = Vec::new();
        // 50 batches a second apart, each throttled then paused, cleared in between.
        for i in 0..50 {
            let now = t0 + Duration::from_secs(i);
            for msg in ["", throttled, pause, ""] {
                printed.extend(p.message(msg, now));
            }
        }
        assert_eq!(printed, vec![throttled.to_string(), pause.to_string()]);
        // A pause file polled every 500 ms for 8 s: one line.
        let paused = "paused: /tmp/stop exists";
        let mut lines = 0;
        for i in 0..16 {
            let now = t0 + Duration::from_secs(60) + Duration::from_millis(500 * i);
            lines += p.message(paused, now).into_iter().count();
        }
        assert_eq!(lines, 1);
        // Back an hour later: a new state, printed again.
        let later = t0 + Duration::from_secs(3600);
        assert_eq!(p.message(paused, later).as_deref(), Some(paused));
        assert_eq!(p.message(paused, later + Duration::from_secs(1)), None);
    }
}
