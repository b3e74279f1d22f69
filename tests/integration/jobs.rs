//! `--jobs N` (issue 30, "parallel batches on one big server"): N batches at once on N
//! connections give what one batch at a time gives. On generated fleets (many conversations
//! of every size, drift of every class injected in known numbers), with small batches so that
//! there are many: the backfill with 1 and 4 jobs writes the same watermarks with the same
//! counts, the audit with 1 and 4 jobs writes byte-identical reports and the same summary,
//! and that summary is the generator's ground truth (independent of tidemark's SQL). A run
//! with 3 jobs stopped half-way (a signal's stop flag, `--run-time`) and resumed ends where
//! the run of one job ends, and the stopped backfill has written nothing past its
//! checkpoint. SQLite refuses more than one job (exit 2).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::{AnyConnection, Connection};

use crate::common::faults::{scalar, signal, wait, watermarks, Fixture};
use crate::common::{on_every_backend, Backend, TestDb};
use crate::scenario;
use tidemark::db::Dsn;
use tidemark::drift::DriftClass;
use tidemark::generate::{generate, GenerateOptions, GroundTruth};
use tidemark::mapping::Mapping;
use tidemark::progress::{Bar, Reporter, Sink};
use tidemark::stages::parallel::Jobs;
use tidemark::stages::{audit, backfill, expand};

/// Member rows per fleet.
const MEMBERS: u64 = 1200;
/// Rows per batch: some 30 batches per run.
const BATCH: u64 = 40;

/// A generated fleet with the scenario mapping and `expand` applied.
struct Fleet {
    db: TestDb,
    conn: AnyConnection,
    dsn: Dsn,
    mapping: Mapping,
    truth: GroundTruth,
}

impl Fleet {
    async fn new(backend: Backend, label: &str, seed: u64) -> Option<Fleet> {
        let db = TestDb::create(backend, label).await?;
        let dsn = Dsn::parse(&db.url).unwrap();
        let mut conn = dsn.connect().await.unwrap();
        let opts = GenerateOptions {
            members: MEMBERS,
            seed,
        };
        let truth = generate(&mut conn, dsn.dialect, &opts).await.unwrap();
        let mapping =
            Mapping::parse(&scenario::mapping_toml("per_member", false), "<jobs>").unwrap();
        expand::run(&mut conn, &mapping, dsn.dialect, false)
            .await
            .unwrap();
        Some(Fleet {
            db,
            conn,
            dsn,
            mapping,
            truth,
        })
    }

    fn jobs(&self, n: usize) -> Jobs {
        Jobs::new(n, &self.dsn)
    }

    async fn backfill(&mut self, opts: backfill::BackfillOptions) -> backfill::BackfillSummary {
        let dialect = self.dsn.dialect;
        backfill::run(&mut self.conn, &self.mapping, dialect, &opts)
            .await
            .unwrap_or_else(|e| panic!("backfill --jobs {}: {e:#}", opts.jobs.n))
    }

    async fn audit(&mut self, opts: audit::AuditOptions) -> audit::AuditSummary {
        let dialect = self.dsn.dialect;
        audit::run(&mut self.conn, &self.mapping, dialect, &opts)
            .await
            .unwrap_or_else(|e| panic!("audit --jobs {}: {e:#}", opts.jobs.n))
            .summary
    }

    async fn cleanup(self) {
        let _ = self.conn.close().await;
        self.db.cleanup().await;
    }
}

/// A backfill of fixed batches of [`BATCH`] members.
fn backfill_opts(jobs: Jobs) -> backfill::BackfillOptions {
    backfill::BackfillOptions {
        batch_size: BATCH,
        chunk_time: Duration::ZERO,
        jobs,
        ..Default::default()
    }
}

/// An audit in batches of [`BATCH`] counter rows into `report`.
fn audit_opts(report: std::path::PathBuf, jobs: Jobs) -> audit::AuditOptions {
    audit::AuditOptions {
        report,
        batch_size: BATCH,
        jobs,
        ..Default::default()
    }
}

/// A summary as JSON without what differs between two equal runs (their ledger rows, their
/// times, their report paths, how they were split into parts).
fn comparable(summary: &impl serde::Serialize) -> serde_json::Value {
    let mut v = serde_json::to_value(summary).unwrap();
    let fields = v.as_object_mut().unwrap();
    for key in [
        "ledger_id",
        "duration_ms",
        "report",
        "parts",
        "resumed_after",
        "resumed_after_batches",
        "interrupted",
        "checkpoint",
        "stopped_by",
    ] {
        fields.remove(key);
    }
    v
}

/// The audit found exactly what the generator injected (the ground truth, not tidemark's SQL).
fn assert_truth(backend: Backend, summary: &audit::AuditSummary, truth: &GroundTruth) {
    for c in DriftClass::ALL {
        let got = summary.by_class.get(c.as_str()).copied().unwrap_or(0);
        assert_eq!(
            got,
            truth.injected[c.as_str()],
            "{}: class {c}",
            backend.name()
        );
    }
    assert_eq!(summary.drifting_rows, truth.drifting_rows());
    assert_eq!(summary.rows_checked, truth.counter_rows);
}

on_every_backend!(
    servers: four_jobs_give_the_one_job_result,
    stopped_jobs_resume_exactly,
    a_failed_batch_keeps_the_checkpoint_before_it,
    killed_and_run_again_from_the_command_line
);

/// Backfill and audit with 1 and with 4 jobs on two copies of the same fleet (two seeds).
async fn four_jobs_give_the_one_job_result(backend: Backend) {
    for seed in [31, 32] {
        let Some(mut one) = Fleet::new(backend, "jobs_one", seed).await else {
            return;
        };
        let Some(mut four) = Fleet::new(backend, "jobs_four", seed).await else {
            return;
        };
        // The change count in the one-pass form on one job, in the index-probe form on the
        // four workers (issue 30: each worker counts its batches in the form asked).
        let filled = one
            .backfill(backfill::BackfillOptions {
                audit_form: audit::AuditForm::OnePass,
                ..backfill_opts(Jobs::one())
            })
            .await;
        let filled4 = four
            .backfill(backfill::BackfillOptions {
                audit_form: audit::AuditForm::Probe,
                ..backfill_opts(four.jobs(4))
            })
            .await;
        assert!(filled.batches >= 20, "many batches: {}", filled.batches);
        assert_eq!(comparable(&filled), comparable(&filled4), "seed {seed}");
        let marks = watermarks(&mut one.conn).await;
        assert!(
            marks.len() as u64 > MEMBERS / 2,
            "{} watermarks",
            marks.len()
        );
        assert!(marks == watermarks(&mut four.conn).await, "seed {seed}");

        let dir = tempfile::tempdir().unwrap();
        let (r1, r4) = (dir.path().join("one.csv"), dir.path().join("four.csv"));
        let audited = one.audit(audit_opts(r1.clone(), Jobs::one())).await;
        let audited4 = four.audit(audit_opts(r4.clone(), four.jobs(4))).await;
        let (bytes, bytes4) = (std::fs::read(&r1).unwrap(), std::fs::read(&r4).unwrap());
        assert!(
            bytes.iter().filter(|b| **b == b'\n').count() > 10,
            "the report has rows"
        );
        assert!(bytes == bytes4, "seed {seed}: the reports differ");
        assert_eq!(comparable(&audited), comparable(&audited4), "seed {seed}");
        assert!(audited.batches >= 20, "many batches: {}", audited.batches);
        assert!(audited.complete && audited4.complete);
        assert_truth(backend, &audited4, &four.truth);
        // The workers run the audit's statement in the form asked, chosen per batch by
        // default: the index-probe form on four jobs gives the same report, byte for byte.
        let rp = dir.path().join("probe.csv");
        let probed = four
            .audit(audit::AuditOptions {
                form: audit::AuditForm::Probe,
                ..audit_opts(rp.clone(), four.jobs(4))
            })
            .await;
        assert!(
            std::fs::read(&rp).unwrap() == bytes,
            "seed {seed}: probe form"
        );
        assert_eq!(comparable(&probed), comparable(&audited), "seed {seed}");
        one.cleanup().await;
        four.cleanup().await;
    }
}

/// A progress display that sets `stop` (as Ctrl-C does) once `after` units are done.
struct StopAfter {
    after: u64,
    stop: Arc<AtomicBool>,
}

struct StopBar {
    done: u64,
    after: u64,
    stop: Arc<AtomicBool>,
}

impl Sink for StopAfter {
    fn start(&self, _: &str, _: &str, _: u64) -> Box<dyn Bar> {
        Box::new(StopBar {
            done: 0,
            after: self.after,
            stop: self.stop.clone(),
        })
    }
}

impl Bar for StopBar {
    fn advance(&mut self, n: u64) {
        self.done += n;
        if self.done >= self.after {
            self.stop.store(true, Ordering::SeqCst);
        }
    }
    fn message(&mut self, _: &str) {}
    fn finish(&mut self) {}
}

/// A stop flag and the progress display that sets it after `after` units.
fn stop_after(after: u64) -> (Option<Arc<AtomicBool>>, Reporter) {
    let stop = Arc::new(AtomicBool::new(false));
    let sink = StopAfter {
        after,
        stop: stop.clone(),
    };
    (Some(stop), Reporter::new(Arc::new(sink)))
}

/// With 3 jobs: a backfill stopped after a third of the members, then run again; an audit
/// stopped by `--run-time`, resumed and stopped by the flag, resumed to its end. Both end as
/// the runs of one job on a copy of the fleet.
async fn stopped_jobs_resume_exactly(backend: Backend) {
    let Some(mut one) = Fleet::new(backend, "jobs_ref", 33).await else {
        return;
    };
    let Some(mut three) = Fleet::new(backend, "jobs_stopped", 33).await else {
        return;
    };
    let filled = one.backfill(backfill_opts(Jobs::one())).await;
    let (stop, progress) = stop_after(MEMBERS / 3);
    let first = three
        .backfill(backfill::BackfillOptions {
            stop,
            progress,
            quiet: false,
            ..backfill_opts(three.jobs(3))
        })
        .await;
    assert!(first.interrupted, "the stop flag stopped it: {first:?}");
    assert!(first.members > 0 && first.members < filled.members);
    let written_to = scalar(
        &mut three.conn,
        "SELECT MAX(conversation_id) FROM read_watermarks",
    )
    .await;
    let rest = three.backfill(backfill_opts(three.jobs(3))).await;
    assert_eq!(rest.resumed_after_batches, Some(first.batches));
    let checkpoint: i64 = rest.resumed_after.as_deref().unwrap().parse().unwrap();
    assert!(
        written_to <= checkpoint,
        "watermarks up to conversation {written_to}, past the checkpoint {checkpoint}"
    );
    assert!(!rest.interrupted);
    assert_eq!(comparable(&filled), comparable(&rest));
    assert!(watermarks(&mut one.conn).await == watermarks(&mut three.conn).await);

    let dir = tempfile::tempdir().unwrap();
    let (r1, r3) = (dir.path().join("one.csv"), dir.path().join("three.csv"));
    let audited = one.audit(audit_opts(r1.clone(), Jobs::one())).await;
    let part = three
        .audit(audit::AuditOptions {
            run_time: Some(Duration::from_millis(1)),
            ..audit_opts(r3.clone(), three.jobs(3))
        })
        .await;
    assert!(!part.complete, "--run-time stopped it: {part:?}");
    assert_eq!(part.stopped_by.as_deref(), Some("run_time"));
    assert!(
        !r3.exists(),
        "no report under the final name before the end"
    );
    let (stop, progress) = stop_after(audited.rows_checked * 2 / 3);
    let mut parts = 1;
    let mut last = three
        .audit(audit::AuditOptions {
            resume: true,
            stop,
            progress,
            quiet: false,
            ..audit_opts(r3.clone(), three.jobs(3))
        })
        .await;
    parts += 1;
    if !last.complete {
        assert_eq!(last.stopped_by.as_deref(), Some("signal"));
        let resume = audit::AuditOptions {
            resume: true,
            ..audit_opts(r3.clone(), three.jobs(3))
        };
        last = three.audit(resume).await;
        parts += 1;
    }
    assert!(last.complete);
    assert_eq!(last.parts, parts);
    assert!(std::fs::read(&r1).unwrap() == std::fs::read(&r3).unwrap());
    assert_eq!(comparable(&audited), comparable(&last));
    assert_truth(backend, &last, &three.truth);
    one.cleanup().await;
    three.cleanup().await;
}

/// The checkpoint (JSON) of the newest backfill in the ledger: its `lo` and its batches.
async fn checkpoint(conn: &mut AnyConnection) -> (i64, u64) {
    let row = sqlx::query(
        "SELECT checkpoint FROM tidemark_ledger WHERE stage = 'backfill' ORDER BY id DESC LIMIT 1",
    )
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    let text = tidemark::values::text(&row, 0)
        .unwrap()
        .expect("a checkpoint");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    (
        v["lo"].as_i64().unwrap(),
        v["summary"]["batches"].as_u64().unwrap(),
    )
}

/// One batch in the middle of the fleet meets a lock it cannot wait out (another session's
/// uncommitted watermark row of one of its members; `--retries 0`): the run with 3 jobs stops
/// with exit 3's error naming that batch, after the batches in flight finished; the checkpoint
/// is the last batch before it (every earlier one committed, none after it recorded). Once
/// the lock is gone the same command ends where one job ends.
async fn a_failed_batch_keeps_the_checkpoint_before_it(backend: Backend) {
    let Some(mut one) = Fleet::new(backend, "jobs_fail_ref", 34).await else {
        return;
    };
    let Some(mut three) = Fleet::new(backend, "jobs_fail", 34).await else {
        return;
    };
    let filled = one.backfill(backfill_opts(Jobs::one())).await;
    let blocked = scalar(
        &mut three.conn,
        "SELECT conv_id FROM members ORDER BY conv_id LIMIT 1 OFFSET 600",
    )
    .await;
    let user: String = sqlx::query_scalar(&format!(
        "SELECT user_id FROM members WHERE conv_id = {blocked} ORDER BY user_id LIMIT 1"
    ))
    .fetch_one(&mut three.conn)
    .await
    .unwrap();
    let mut holder = three.db.connect().await;
    for sql in [
        "BEGIN".to_string(),
        format!(
            "INSERT INTO read_watermarks (user_id, conversation_id, last_read_id) \
             VALUES ('{user}', {blocked}, 0)"
        ),
    ] {
        sqlx::raw_sql(&sql).execute(&mut holder).await.unwrap();
    }
    let opts = backfill::BackfillOptions {
        retries: 0,
        lock_timeout: Duration::from_secs(1),
        ..backfill_opts(three.jobs(3))
    };
    let dialect = three.dsn.dialect;
    let err = backfill::run(&mut three.conn, &three.mapping, dialect, &opts)
        .await
        .expect_err("the blocked batch fails the run");
    let text = format!("{err:#}");
    assert!(
        text.contains("still meeting lock waits after 0 retries"),
        "{text}"
    );
    let (lo, batches) = checkpoint(&mut three.conn).await;
    assert!(
        lo < blocked,
        "checkpoint {lo} at or past the blocked {blocked}"
    );
    assert!(batches > 0, "the batches before it are recorded");
    assert!(
        text.contains(&format!(
            "stopped in batch {} (conversations after {lo} up to ",
            batches + 1
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "the batches up to conversation {lo} are committed"
        )),
        "{text}"
    );
    // Every member of a conversation up to the checkpoint has the watermark one job writes.
    let upto = |marks: Vec<String>| -> Vec<String> {
        marks
            .into_iter()
            .filter(|m| m.split('|').next().unwrap().parse::<i64>().unwrap() <= lo)
            .collect()
    };
    let reference = watermarks(&mut one.conn).await;
    assert!(upto(reference.clone()) == upto(watermarks(&mut three.conn).await));
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut holder)
        .await
        .unwrap();
    let _ = holder.close().await;
    let rest = three.backfill(backfill_opts(three.jobs(3))).await;
    assert_eq!(rest.resumed_after_batches, Some(batches));
    assert_eq!(
        (rest.members, rest.batches),
        (filled.members, filled.batches)
    );
    assert!(reference == watermarks(&mut three.conn).await);
    one.cleanup().await;
    three.cleanup().await;
}

/// The command line: `backfill --jobs 3` killed (-9) once it has recorded a checkpoint, then
/// run again, leaves the watermarks of `--jobs 1` (a batch committed past the checkpoint is
/// written again, forward-only); `audit --jobs 3` then writes the report of `--jobs 1`, byte
/// for byte, with its exit code.
async fn killed_and_run_again_from_the_command_line(backend: Backend) {
    let Some(one) = Fixture::generated(backend, "jobs_cli_ref").await else {
        return;
    };
    let Some(three) = Fixture::generated(backend, "jobs_cli_kill").await else {
        return;
    };
    let batches = ["--quiet", "--batch-size", "40", "--chunk-time", "0s"];
    let with = |first: &[&'static str], more: &[&'static str]| -> Vec<&'static str> {
        first
            .iter()
            .chain(batches.iter())
            .chain(more)
            .copied()
            .collect()
    };
    one.run(&with(&["backfill"], &[])).expect_code(0);
    let slow = ["--jobs", "3", "--pause-between-batches", "300ms"];
    let child = three.spawn(&with(&["backfill"], &slow), &[]);
    let mut conn = three.connect().await;
    let started = std::time::Instant::now();
    let recorded =
        "SELECT COUNT(*) FROM tidemark_ledger WHERE stage = 'backfill' AND checkpoint IS NOT NULL";
    while scalar(&mut conn, recorded).await == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no checkpoint"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    signal(&child, "KILL");
    let killed = wait(child, Duration::from_secs(30));
    assert_eq!(killed.code, None, "killed: {killed:?}");
    let mut reference = one.connect().await;
    let count = "SELECT COUNT(*) FROM read_watermarks";
    let (done, all) = (
        scalar(&mut conn, count).await,
        scalar(&mut reference, count).await,
    );
    assert!(
        done > 0 && done < all,
        "killed mid-way: {done} of {all} watermarks"
    );
    three
        .run(&with(&["backfill"], &["--jobs", "3"]))
        .expect_code(0);
    assert!(watermarks(&mut reference).await == watermarks(&mut conn).await);
    let audit = [
        "audit",
        "--quiet",
        "--batch-size",
        "40",
        "--report",
        "r.csv",
    ];
    one.run(&audit).expect_code(1);
    three
        .run(&[&audit[..], &["--jobs", "3"]].concat())
        .expect_code(1);
    let read = |f: &Fixture| std::fs::read(f.path().join("r.csv")).unwrap();
    assert!(read(&one) == read(&three), "the reports differ");
    let _ = conn.close().await;
    let _ = reference.close().await;
    one.db.cleanup().await;
    three.db.cleanup().await;
}

/// SQLite runs one batch at a time: `--jobs 2` is refused before anything runs (exit 2,
/// naming the option and why), for the backfill and the audit; `--jobs 0` is no count.
#[tokio::test]
async fn sqlite_refuses_more_than_one_job() {
    let Some(f) = Fixture::generated(Backend::Sqlite, "jobs_sqlite").await else {
        return;
    };
    for stage in ["backfill", "audit"] {
        let run = f.run(&[stage, "--quiet", "--jobs", "2"]);
        run.expect_code(2);
        assert!(
            run.stderr.contains("--jobs 2") && run.stderr.contains("SQLite"),
            "{stage}: {}",
            run.stderr
        );
        f.run(&[stage, "--quiet", "--jobs", "0"]).expect_code(2);
    }
    let mut conn = f.connect().await;
    assert_eq!(
        scalar(&mut conn, "SELECT COUNT(*) FROM read_watermarks").await,
        0,
        "the refused backfill wrote nothing"
    );
    f.run(&["backfill", "--quiet", "--jobs", "1"])
        .expect_code(0);
    let _ = conn.close().await;
    f.db.cleanup().await;
}

/// PostgreSQL with `idle_session_timeout = '1s'` on the database: with 2 jobs and
/// `--pause-between-batches 1500ms` every connection rests longer than the timeout after each
/// batch (and the run's own waits for the workers), yet the backfill and the audit finish:
/// the resting and waiting connections run `SELECT 1` every 250 ms.
#[tokio::test]
async fn resting_connections_outlive_idle_session_timeout() {
    let Some(f) = Fixture::generated(Backend::Postgres, "jobs_idle").await else {
        return;
    };
    let mut admin = f.connect().await;
    let sql = format!(
        "ALTER DATABASE \"{}\" SET idle_session_timeout = '1s'",
        f.db.name
    );
    sqlx::raw_sql(&sql).execute(&mut admin).await.unwrap();
    let _ = admin.close().await;
    let rest = [
        "--jobs",
        "2",
        "--batch-size",
        "300",
        "--pause-between-batches",
        "1500ms",
    ];
    let started = std::time::Instant::now();
    let backfill = [&["backfill", "--quiet", "--chunk-time", "0s"][..], &rest].concat();
    f.run(&backfill).expect_code(0);
    let audit = [&["audit", "--quiet", "--report", "r.csv"][..], &rest].concat();
    f.run(&audit).expect_code(1);
    assert!(started.elapsed() >= Duration::from_secs(3), "rested");
    let mut conn = f.connect().await;
    let marks = scalar(&mut conn, "SELECT COUNT(*) FROM read_watermarks").await;
    assert!(marks > 1000, "{marks} watermarks");
    let _ = conn.close().await;
    f.db.cleanup().await;
}

/// Times backfill and audit with 1, 2 and 4 jobs on a fleet of `TIDEMARK_JOBS_MEMBERS`
/// members (default 50 000), batches of 5 000, on every selected server (ignored: run it with
/// `cargo test --release --test integration jobs::jobs_timing -- --ignored --nocapture`).
/// Each run gets a fresh copy of the fleet (the same seed); the watermarks and reports are
/// compared as above.
#[tokio::test]
#[ignore]
async fn jobs_timing() {
    let members: u64 = std::env::var("TIDEMARK_JOBS_MEMBERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000);
    for backend in [Backend::Postgres, Backend::Mysql] {
        let mut reference: Option<Vec<u8>> = None;
        for jobs in [1, 2, 4] {
            let Some(db) = TestDb::create(backend, "jobs_timing").await else {
                break;
            };
            let dsn = Dsn::parse(&db.url).unwrap();
            let mut conn = dsn.connect().await.unwrap();
            let opts = GenerateOptions { members, seed: 5 };
            generate(&mut conn, dsn.dialect, &opts).await.unwrap();
            let mapping =
                Mapping::parse(&scenario::mapping_toml("per_member", false), "<t>").unwrap();
            expand::run(&mut conn, &mapping, dsn.dialect, false)
                .await
                .unwrap();
            let (n, dialect) = (Jobs::new(jobs, &dsn), dsn.dialect);
            let started = std::time::Instant::now();
            let bf = backfill::BackfillOptions {
                batch_size: 5000,
                jobs: n.clone(),
                ..Default::default()
            };
            backfill::run(&mut conn, &mapping, dialect, &bf)
                .await
                .unwrap();
            let t_backfill = started.elapsed();
            let dir = tempfile::tempdir().unwrap();
            let report = dir.path().join("r.csv");
            let started = std::time::Instant::now();
            let au = audit::AuditOptions {
                batch_size: 5000,
                ..audit_opts(report.clone(), n)
            };
            audit::run(&mut conn, &mapping, dialect, &au).await.unwrap();
            let t_audit = started.elapsed();
            eprintln!(
                "{} {members} members --jobs {jobs}: backfill {t_backfill:.2?}, audit {t_audit:.2?}",
                backend.name()
            );
            let bytes = std::fs::read(&report).unwrap();
            assert!(reference.get_or_insert_with(|| bytes.clone()) == &bytes);
            let _ = conn.close().await;
            db.cleanup().await;
        }
    }
}
