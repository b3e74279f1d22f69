//! `--jobs N` (issue 30, "parallel batches on one big server"): a batched stage (backfill,
//! audit) runs N batches at once, each on a connection of its own, over disjoint conversation
//! ranges.
//!
//! The run's own connection (the one holding the runner lock) finds the batch bounds in key
//! order ([`crate::stages::batch::next_batch`]) and hands each batch to an idle worker
//! connection; the finished batches are taken back in key order: a batch that finishes
//! before an earlier one waits until every earlier one is done, and only then is it recorded
//! ([`InOrder::apply`]: the backfill's checkpoint, the audit's report rows and summary). So
//! the checkpoint only ever advances over a contiguous prefix of finished batches, and the
//! audit's report and summary are those of `--jobs 1`, row for row. At most
//! [`WINDOW_PER_JOB`] × N batches are found ahead of the last one recorded (memory, and the
//! work a kill -9 redoes).
//!
//! Everything runs in the stage's own task, one future per batch in flight: the database does
//! the work, tidemark only waits. While it waits, the idle connections (the run's own
//! included) run `SELECT 1` every [`KEEPALIVE_EVERY`] and the runner lock beats
//! ([`Session::keep_alive`]). A stop (Ctrl-C, SIGTERM, `--run-time`), the pause file, the
//! rate throttle and a worker's error each stop the dispatch of new batches; the batches in
//! flight finish (committed or rolled back, never cut off), the contiguous prefix is
//! recorded, and the first failure in key order is the run's error.

use anyhow::{anyhow, Result};
use futures_util::future::{select, Either};
use futures_util::stream::{FuturesUnordered, StreamExt};
use sqlx::{AnyConnection, Connection};
use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::db::Dsn;
use crate::dialect::Dialect;
use crate::error::input_error;
use crate::progress::Progress;
use crate::stages::batch::{Batch, Key};
use crate::stages::keepalive::{Session, KEEPALIVE_EVERY};

/// How many batches, per job, may be found ahead of the last one recorded.
pub const WINDOW_PER_JOB: u64 = 2;

/// `--jobs N`: how many batches run at once, and the URL their connections are opened with
/// (the command's own; None when the stage runs on a connection it was handed alone, which
/// can only run one batch at a time).
#[derive(Debug, Clone, Default)]
pub struct Jobs {
    /// Batches at once (0 and 1: one, on the run's own connection, as before `--jobs`).
    pub n: usize,
    /// The database the worker connections open ([`Dsn::connect_session`]).
    pub dsn: Option<Dsn>,
}

impl Jobs {
    /// One batch at a time on the run's own connection.
    pub fn one() -> Jobs {
        Jobs::default()
    }

    /// `n` batches at once on connections to `dsn`.
    pub fn new(n: usize, dsn: &Dsn) -> Jobs {
        Jobs {
            n,
            dsn: Some(dsn.clone()),
        }
    }

    /// Whether the batches run on worker connections (more than one job).
    pub fn parallel(&self) -> bool {
        self.n > 1
    }

    /// Refuses `--jobs N` (N > 1) where the engine runs one batch at a time
    /// ([`crate::dialect::Sessions::parallel_batches_refused`]: SQLite).
    ///
    /// Errors (exit 2): the engine refuses, named with why and what to run instead.
    pub fn check(&self, dialect: Dialect) -> Result<()> {
        if !self.parallel() {
            return Ok(());
        }
        if let Some(why) = dialect.sessions().parallel_batches_refused() {
            return Err(input_error(format!(
                "--jobs {}: {why}; run with --jobs 1 (the default)",
                self.n
            )));
        }
        if self.dsn.is_none() {
            return Err(input_error(format!(
                "--jobs {}: no database URL to open the other connections with",
                self.n
            )));
        }
        Ok(())
    }

    /// Opens the N worker connections: each with the session settings every connection gets
    /// ([`Dsn::connect_session`]: setup statements, time zone), the stage's lock-wait bound
    /// and the audit's session settings ([`crate::dialect::Sessions::audit_session`]), as the
    /// run's own connection has them. The run's own connection was probed for a pooler that
    /// shares sessions ([`crate::db::pooling`]); the workers use the same URL.
    ///
    /// Errors (exit 3): a connection is refused or a setting fails.
    pub async fn open(&self, lock_timeout: Duration) -> Result<Vec<AnyConnection>> {
        let dsn = self
            .dsn
            .as_ref()
            .ok_or_else(|| anyhow!("--jobs {}: no database URL", self.n))?;
        let mut conns = Vec::with_capacity(self.n);
        for _ in 0..self.n {
            let mut conn = dsn.connect_session().await?;
            crate::lock::set_lock_timeout(&mut conn, dsn.dialect, lock_timeout).await?;
            for setting in dsn.dialect.sessions().audit_session() {
                sqlx::query(setting).execute(&mut conn).await?;
            }
            conns.push(conn);
        }
        Ok(conns)
    }
}

/// One batch's work on a worker connection (the backfill's write, the audit's snapshot read).
pub(crate) trait Work {
    /// What a finished batch hands to [`InOrder::apply`].
    type Out;
    /// Runs `batch` on `conn` (its own transaction, committed or rolled back before it
    /// returns).
    fn run(
        &self,
        conn: &mut AnyConnection,
        batch: &mut Batch,
    ) -> impl Future<Output = Result<Self::Out>>;
}

/// What the run does on its own connection: find the batches, record the finished ones in
/// key order.
pub(crate) trait InOrder {
    /// What a worker hands over ([`Work::Out`]).
    type Out;
    /// The batch after `lo` (exclusive; None: the first), or None when none is left.
    fn find(
        &mut self,
        conn: &mut AnyConnection,
        lo: Option<Key>,
    ) -> impl Future<Output = Result<Option<Batch>>>;
    /// Records a finished batch, every earlier one recorded already; returns a time before
    /// which no further batch may start (a rate throttle), if any.
    fn apply(
        &mut self,
        conn: &mut AnyConnection,
        batch: Batch,
        out: Self::Out,
        times: Times,
    ) -> impl Future<Output = Result<Option<Instant>>>;
    /// Where waits are said.
    fn progress(&mut self) -> &mut Progress;
}

/// The times of a recorded batch, for the stage's throttles.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Times {
    /// How long the batch took on its worker.
    pub took: Duration,
    /// Time the dispatch spent held so far (pause file, pauses between batches, the rate
    /// throttle): not active time.
    pub paused: Duration,
}

/// The throttles and stops the dispatch obeys.
pub(crate) struct Throttles<'a> {
    /// `--pause-file`: no batch starts while it exists.
    pub pause_file: Option<&'a Path>,
    /// Ctrl-C, SIGTERM: no batch starts once set.
    pub stop: Option<&'a AtomicBool>,
    /// `--run-time`: no batch starts after it (once one has).
    pub deadline: Option<Instant>,
    /// `--pause-between-batches`: each connection rests this long after each of its batches.
    pub rest: Duration,
}

/// How a parallel run ended without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Every batch was found and recorded.
    Covered,
    /// Stopped early: `"signal"` or `"run_time"`; every batch started was recorded.
    Stopped(&'static str),
}

/// A parallel run's error: the first in key order, with the last conversation of the batch
/// it belongs to (None: finding the next batch failed).
pub(crate) struct Failure {
    /// The error.
    pub error: anyhow::Error,
    /// The batch's last conversation.
    pub hi: Option<Key>,
}

/// A batch back from its worker.
struct Done<O> {
    seq: u64,
    conn: AnyConnection,
    batch: Batch,
    out: Result<O>,
    took: Duration,
}

async fn job<W: Work>(
    work: &W,
    mut conn: AnyConnection,
    seq: u64,
    mut batch: Batch,
) -> Done<W::Out> {
    let started = Instant::now();
    let out = work.run(&mut conn, &mut batch).await;
    Done {
        seq,
        conn,
        batch,
        out,
        took: started.elapsed(),
    }
}

/// Runs `fut` (a statement on the run's own connection) while the batches in flight go on;
/// those that finish meanwhile are put in `arrived`.
async fn alongside<F, D, T>(
    set: &mut FuturesUnordered<F>,
    arrived: &mut Vec<D>,
    fut: impl Future<Output = T>,
) -> T
where
    F: Future<Output = D>,
{
    let mut fut = pin!(fut);
    loop {
        if set.is_empty() {
            return fut.await;
        }
        match select(fut.as_mut(), set.next()).await {
            Either::Left((value, _)) => return value,
            Either::Right((Some(done), _)) => arrived.push(done),
            Either::Right((None, _)) => {}
        }
    }
}

/// The dispatch's state between two steps.
struct State<O> {
    /// Idle worker connections, each with when it may take a batch again.
    idle: Vec<(AnyConnection, Instant)>,
    /// Finished batches not recorded yet, by sequence number.
    waiting: BTreeMap<u64, (Batch, O, Duration)>,
    /// Batches found (the next one's sequence number).
    found: u64,
    /// Batches recorded (the next one to record).
    applied: u64,
    /// The last conversation of the last batch found.
    lo: Option<Key>,
    exhausted: bool,
    stopped: Option<&'static str>,
    /// The first failure in key order, and the sequence number nothing is recorded from.
    failure: Option<(u64, Failure)>,
    /// No batch starts before this (the rate throttle).
    hold: Option<Instant>,
    paused: Duration,
    last_alive: Instant,
}

impl<O> State<O> {
    fn fail(&mut self, seq: u64, failure: Failure) {
        if self.failure.as_ref().is_none_or(|(at, _)| seq < *at) {
            self.failure = Some((seq, failure));
        }
    }

    /// Whether new batches may still start.
    fn open(&self) -> bool {
        self.failure.is_none() && self.stopped.is_none() && !self.exhausted
    }
}

/// Runs the batches after `lo` on `workers` (one batch each at a time), found and recorded on
/// `main` by `stage`, until the scope is covered, a stop, or a failure (see the module
/// documentation). `session` keeps `main` alive and beats its runner lock.
///
/// Errors: the first failure in key order ([`Failure`]); every batch before it is recorded.
pub(crate) async fn drive<S, W>(
    main: &mut AnyConnection,
    workers: Vec<AnyConnection>,
    session: &mut Session<'_>,
    (stage, work): (&mut S, &W),
    lo: Option<Key>,
    throttles: &Throttles<'_>,
) -> std::result::Result<Ended, Failure>
where
    W: Work,
    S: InOrder<Out = W::Out>,
{
    let now = Instant::now();
    let window = WINDOW_PER_JOB * workers.len().max(1) as u64;
    let mut st = State {
        idle: workers.into_iter().map(|c| (c, now)).collect(),
        waiting: BTreeMap::new(),
        found: 0,
        applied: 0,
        lo,
        exhausted: false,
        stopped: None,
        failure: None,
        hold: None,
        paused: Duration::ZERO,
        last_alive: now,
    };
    let mut set = FuturesUnordered::new();
    let mut arrived: Vec<Done<W::Out>> = Vec::new();
    let mut said = false;
    loop {
        for d in arrived.drain(..) {
            st.idle.push((d.conn, Instant::now() + throttles.rest));
            match d.out {
                Ok(out) => {
                    st.waiting.insert(d.seq, (d.batch, out, d.took));
                }
                // No batch starts after a failure; the earlier ones in flight still finish.
                Err(error) => st.fail(
                    d.seq,
                    Failure {
                        error,
                        hi: Some(d.batch.hi),
                    },
                ),
            }
        }
        record(main, session, stage, &mut st, &mut set, &mut arrived).await;
        if !arrived.is_empty() {
            continue;
        }
        if st.open() {
            if throttles.stop.is_some_and(|s| s.load(Ordering::SeqCst)) {
                st.stopped = Some("signal");
            } else if st.found > 0 && throttles.deadline.is_some_and(|d| Instant::now() >= d) {
                st.stopped = Some("run_time");
            }
        }
        // Why no batch starts now, and until when to wait for that.
        let now = Instant::now();
        let ready = st.idle.iter().position(|(_, at)| *at <= now);
        let held: Option<(Instant, String)> = if !st.open() {
            None
        } else if let Some(path) = throttles.pause_file.filter(|p| p.exists()) {
            Some((
                now + Duration::from_millis(500),
                format!("paused: {} exists", path.display()),
            ))
        } else if let Some(hold) = st.hold.filter(|h| *h > now) {
            Some((hold, "throttled: --max-rows-per-second".to_string()))
        } else if st.found >= st.applied + window {
            Some((now + KEEPALIVE_EVERY, String::new()))
        } else if ready.is_none() {
            let next = st.idle.iter().map(|(_, at)| *at).min();
            let rest = humantime::format_duration(throttles.rest);
            Some((
                next.unwrap_or(now + KEEPALIVE_EVERY),
                format!("pause between batches ({rest})"),
            ))
        } else {
            None
        };
        if st.open() && held.is_none() {
            if said {
                stage.progress().message("");
                said = false;
            }
            let found = alongside(&mut set, &mut arrived, stage.find(main, st.lo.clone())).await;
            match found {
                Ok(Some(batch)) => {
                    let (conn, _) = st.idle.swap_remove(ready.expect("a ready connection"));
                    st.lo = Some(batch.hi.clone());
                    set.push(job(work, conn, st.found, batch));
                    st.found += 1;
                }
                Ok(None) => st.exhausted = true,
                Err(error) => st.fail(st.found, Failure { error, hi: None }),
            }
            continue;
        }
        if set.is_empty() && held.is_none() {
            break;
        }
        let until = match &held {
            Some((until, why)) => {
                if !why.is_empty() && set.is_empty() {
                    stage.progress().message(why);
                    said = true;
                }
                *until
            }
            None => now + KEEPALIVE_EVERY,
        };
        let waited = Instant::now();
        let left = until.saturating_duration_since(waited).min(KEEPALIVE_EVERY);
        if set.is_empty() {
            tokio::time::sleep(left).await;
        } else if let Ok(Some(done)) = tokio::time::timeout(left, set.next()).await {
            arrived.push(done);
        }
        if held.is_some() && set.is_empty() {
            st.paused += waited.elapsed();
        }
        if st.last_alive.elapsed() >= KEEPALIVE_EVERY {
            keep_alive(main, session, &mut st, &mut set, &mut arrived).await;
        }
    }
    if said {
        stage.progress().message("");
    }
    for (conn, _) in std::mem::take(&mut st.idle) {
        // Every batch is back (the set is empty): each connection ends its session cleanly.
        let _ = conn.close().await;
    }
    match st.failure {
        Some((_, failure)) => Err(failure),
        None => Ok(match st.stopped {
            Some(by) if !st.exhausted => Ended::Stopped(by),
            _ => Ended::Covered,
        }),
    }
}

/// Records the finished batches that follow the last recorded one, in key order, up to the
/// first failure; `session` beats the runner lock when due.
async fn record<S, F, O>(
    main: &mut AnyConnection,
    session: &mut Session<'_>,
    stage: &mut S,
    st: &mut State<O>,
    set: &mut FuturesUnordered<F>,
    arrived: &mut Vec<Done<O>>,
) where
    S: InOrder<Out = O>,
    F: Future<Output = Done<O>>,
{
    loop {
        if st.failure.as_ref().is_some_and(|(at, _)| st.applied >= *at) {
            return;
        }
        let Some((batch, out, took)) = st.waiting.remove(&st.applied) else {
            return;
        };
        let seq = st.applied;
        let hi = batch.hi.clone();
        let times = Times {
            took,
            paused: st.paused,
        };
        match alongside(set, arrived, stage.apply(main, batch, out, times)).await {
            Ok(hold) => {
                st.applied += 1;
                st.hold = hold.max(st.hold);
                alongside(set, arrived, session.heartbeat(main)).await;
            }
            Err(error) => st.fail(
                seq,
                Failure {
                    error,
                    hi: Some(hi),
                },
            ),
        }
    }
}

/// `SELECT 1` on the run's own connection (and the runner lock's heartbeat when due) and on
/// every idle worker connection; a session that ended is the run's failure.
async fn keep_alive<F, O>(
    main: &mut AnyConnection,
    session: &mut Session<'_>,
    st: &mut State<O>,
    set: &mut FuturesUnordered<F>,
    arrived: &mut Vec<Done<O>>,
) where
    F: Future<Output = Done<O>>,
{
    st.last_alive = Instant::now();
    // The run's own session gone: nothing more can be recorded. A worker's: the batches in
    // flight are still recorded.
    if let Err(error) = alongside(set, arrived, session.keep_alive(main)).await {
        st.fail(st.applied, Failure { error, hi: None });
    }
    let mut lost = None;
    for (conn, _) in st.idle.iter_mut() {
        let mut worker = Session::new(None);
        if let Err(error) = alongside(set, arrived, worker.keep_alive(conn)).await {
            lost = Some(error);
        }
    }
    if let Some(error) = lost {
        st.fail(st.found, Failure { error, hi: None });
    }
}
