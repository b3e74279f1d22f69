//! The contract stage (issue "contract"), on every backend: the gate closed for each reason (no
//! audit, failed audit, old audit, other mapping, fewer clean audits than asked, a tolerance not
//! accepted, statement statistics required), the gate open, the archive equal to the dropped
//! values (table and CSV), the column (or table) gone, a second run a no-op, `--force
//! --reason`, and a lock held by another connection after the archive and before the DDL that
//! leaves the column and the archive intact. SQLite also: the rebuild where a column cannot be
//! dropped in place.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::common::{csv, exec_all, on_every_backend, Backend, TestDb};
use crate::scenario;
use sqlx::{AnyConnection, Row};
use tidemark::cli::contract::{run_cli, ContractArgs};
use tidemark::dialect::Dialect;
use tidemark::gate::{Reason, StatementUse};
use tidemark::mapping::Mapping;
use tidemark::stages::contract::{self, ContractOptions, ContractOutcome};
use tidemark::stages::{audit, backfill, expand};
use tidemark::values::text;

/// Conversations 1..=3, messages 1..=8 by u0, members u0..u2, counters that a counter-evidence
/// backfill makes consistent (a clean audit).
fn per_member_data() -> Vec<String> {
    let mut out = Vec::new();
    let counters = [(1, [0, 3, 0]), (2, [0, 8, 5]), (3, [0, 1, 2])];
    for (conv, ks) in counters {
        let msgs: Vec<String> = (1..=8)
            .map(|id| format!("({conv}, {id}, 'u0', 0, 0, NULL, NULL)"))
            .collect();
        out.push(format!(
            "INSERT INTO messages (conv_id, id, sender_id, is_deleted, is_system, created_at, unread_count) VALUES {}",
            msgs.join(", ")
        ));
        for (i, k) in ks.iter().enumerate() {
            out.push(format!(
                "INSERT INTO members (conv_id, user_id, active, join_position) VALUES ({conv}, 'u{i}', 1, NULL)"
            ));
            out.push(format!(
                "INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES ({conv}, 'u{i}', {k})"
            ));
        }
    }
    out
}

/// Two conversations with per-message counters that read receipts make consistent.
fn per_message_data() -> Vec<String> {
    let mut out = Vec::new();
    // conv 1: messages 1..5 by u0; u1 read 3, u2 read 5 -> unread 0,0,0,1,1.
    // conv 2: messages 1..3 by u1; u0 read 3, u2 read 1 -> unread 0,1,1.
    for (conv, sender, unread) in [(1, "u0", vec![0, 0, 0, 1, 1]), (2, "u1", vec![0, 1, 1])] {
        let msgs: Vec<String> = unread
            .iter()
            .enumerate()
            .map(|(i, u)| format!("({conv}, {}, '{sender}', 0, 0, NULL, {u})", i + 1))
            .collect();
        out.push(format!(
            "INSERT INTO messages (conv_id, id, sender_id, is_deleted, is_system, created_at, unread_count) VALUES {}",
            msgs.join(", ")
        ));
        for u in ["u0", "u1", "u2"] {
            out.push(format!(
                "INSERT INTO members (conv_id, user_id, active, join_position) VALUES ({conv}, '{u}', 1, NULL)"
            ));
        }
    }
    out.push(
        "INSERT INTO read_receipts (conv_id, user_id, message_id) VALUES (1, 'u1', 3), (1, 'u2', 5), (2, 'u0', 3), (2, 'u2', 1)"
            .into(),
    );
    out
}

/// A test database with the legacy schema, data of `shape`, expanded and backfilled.
struct Setup {
    db: TestDb,
    conn: AnyConnection,
    mapping: Mapping,
    dialect: Dialect,
    dir: tempfile::TempDir,
}

async fn setup(backend: Backend, label: &str, shape: &str) -> Option<Setup> {
    setup_with(backend, label, shape, &scenario::schema_sql()).await
}

async fn setup_with(
    backend: Backend,
    label: &str,
    shape: &str,
    schema: &[String],
) -> Option<Setup> {
    let db = TestDb::create(backend, label).await?;
    let dialect = tidemark::db::Dsn::parse(&db.url).unwrap().dialect;
    let mut conn = db.connect().await;
    exec_all(&mut conn, schema).await;
    let data = if shape == "per_member" {
        per_member_data()
    } else {
        per_message_data()
    };
    exec_all(&mut conn, &data).await;
    let mapping = Mapping::parse(&scenario::mapping_toml(shape, false), "<test>").unwrap();
    expand::run(&mut conn, &mapping, dialect, false)
        .await
        .expect("expand");
    // MySQL/MariaDB runner locks (GET_LOCK) are server-wide, and every test here has the same
    // mapping: a backfill of a test running beside this one can hold it for a moment.
    let mut tries = 0;
    loop {
        match backfill::run(
            &mut conn,
            &mapping,
            dialect,
            &backfill::BackfillOptions::default(),
        )
        .await
        {
            Ok(_) => break,
            Err(e) if tries < 200 && e.to_string().contains("already running") => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("backfill: {e:#}"),
        }
    }
    Some(Setup {
        db,
        conn,
        mapping,
        dialect,
        dir: tempfile::tempdir().unwrap(),
    })
}

impl Setup {
    /// Runs an audit with `mapping`; `tolerant` allows a little drift (5 rows, ratio 0.5,
    /// |drift| 10). Returns (id, passed).
    async fn audit_with(&mut self, mapping: &Mapping, tolerant: bool) -> (i64, bool) {
        let mut opts = audit::AuditOptions {
            report: self.dir.path().join("drift.csv"),
            ..Default::default()
        };
        if tolerant {
            opts.max_drift_rows = 5;
            opts.max_drift_ratio = 0.5;
            opts.max_abs_drift = 10;
        }
        let out = audit::run(&mut self.conn, mapping, self.dialect, &opts)
            .await
            .expect("audit");
        (out.summary.ledger_id.unwrap(), out.summary.passed)
    }

    async fn audit(&mut self) -> (i64, bool) {
        let mapping = self.mapping.clone();
        self.audit_with(&mapping, false).await
    }

    fn opts(&self) -> ContractOptions {
        ContractOptions {
            lock_timeout: Duration::from_secs(1),
            lock_retries: 0,
            audit_report: Some(self.dir.path().join("final-audit.csv")),
            ..Default::default()
        }
    }

    async fn contract(&mut self, opts: &ContractOptions) -> anyhow::Result<ContractOutcome> {
        contract::run(&mut self.conn, &self.mapping, self.dialect, opts).await
    }

    async fn exec(&mut self, sql: &str) {
        exec_all(&mut self.conn, &[sql.to_string()]).await;
    }

    async fn count(&mut self, sql: &str) -> i64 {
        sqlx::query_scalar(sql)
            .fetch_one(&mut self.conn)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    async fn column_exists(&mut self, table: &str, column: &str) -> bool {
        let sql = format!("SELECT {column} FROM {table} WHERE 1 = 0");
        sqlx::raw_sql(&sql).execute(&mut self.conn).await.is_ok()
    }

    /// The counter values as they stand: (conversation, user or message id) -> value.
    async fn values(&mut self, shape: &str) -> BTreeMap<(i64, String), Option<i64>> {
        let int = self.dialect.int_cast();
        let sql = if shape == "per_member" {
            format!("SELECT conv_id, user_id, CAST(unread_count AS {int}) FROM unread_counters")
        } else {
            format!(
                "SELECT conv_id, CAST(id AS CHAR(20)), CAST(unread_count AS {int}) FROM messages"
            )
        };
        let sql = if self.dialect == Dialect::Mysql {
            sql
        } else {
            sql.replace("CHAR(20)", "TEXT")
        };
        let rows = sqlx::query(&sql).fetch_all(&mut self.conn).await.unwrap();
        rows.iter()
            .map(|r| {
                (
                    (r.try_get(0).unwrap(), text(r, 1).unwrap().unwrap()),
                    r.try_get(2).unwrap(),
                )
            })
            .collect()
    }

    /// One contract run's archive rows, keyed like [`Setup::values`], with their audit ids.
    async fn archived(
        &mut self,
        contract_id: i64,
        shape: &str,
    ) -> (BTreeMap<(i64, String), Option<i64>>, Vec<Option<i64>>) {
        let subject = if shape == "per_member" {
            "user_id".to_string()
        } else {
            let t = if self.dialect == Dialect::Mysql {
                "CHAR(20)"
            } else {
                "TEXT"
            };
            format!("CAST(message_id AS {t})")
        };
        let sql = format!(
            "SELECT conversation_id, {subject}, counter_value, audit_id FROM tidemark_counter_archive WHERE contract_id = {contract_id}"
        );
        let rows = sqlx::query(&sql).fetch_all(&mut self.conn).await.unwrap();
        let map = rows
            .iter()
            .map(|r| {
                (
                    (r.try_get(0).unwrap(), text(r, 1).unwrap().unwrap()),
                    r.try_get(2).unwrap(),
                )
            })
            .collect();
        let audits = rows.iter().map(|r| r.try_get(3).unwrap()).collect();
        (map, audits)
    }

    /// Contract ledger rows: (id, status, passed, summary).
    async fn contracts(&mut self) -> Vec<(i64, String, Option<i64>, serde_json::Value)> {
        let int = self.dialect.int_cast();
        let sql = format!(
            "SELECT id, status, CAST(passed AS {int}), summary FROM tidemark_ledger WHERE stage = 'contract' ORDER BY id"
        );
        let rows = sqlx::query(&sql).fetch_all(&mut self.conn).await.unwrap();
        rows.iter()
            .map(|r| {
                (
                    r.try_get(0).unwrap(),
                    text(r, 1).unwrap().unwrap(),
                    r.try_get(2).unwrap(),
                    text(r, 3)
                        .unwrap()
                        .map(|s| serde_json::from_str(&s).unwrap())
                        .unwrap_or_default(),
                )
            })
            .collect()
    }

    async fn finish(self) {
        let Setup { db, conn, dir, .. } = self;
        drop(conn);
        drop(dir);
        db.cleanup().await;
    }
}

fn reasons(o: &ContractOutcome) -> Vec<Reason> {
    o.verdict.as_ref().expect("a verdict").reasons.clone()
}

fn assert_closed(o: &ContractOutcome, what: &str, pred: impl Fn(&Reason) -> bool) {
    let v = o.verdict.as_ref().expect("a verdict");
    assert!(!v.open, "{what}: the gate is open");
    assert!(o.gate_closed(), "{what}");
    assert!(!o.executed, "{what}");
    assert!(
        v.reasons.iter().any(pred),
        "{what}: reasons {:?}",
        v.reasons
    );
    // Every reason is printable.
    for r in &v.reasons {
        assert!(!r.to_string().is_empty());
    }
}

on_every_backend!(
    multi_thread:
    gate_closed_for_each_reason,
    gate_open_dry_run_changes_nothing,
    execute_drops_the_column_per_member,
    execute_drops_the_column_per_message,
    execute_drops_a_table_of_its_own,
    final_audit_inside_the_gate_must_pass,
    lock_after_archive_keeps_column_and_archive,
    a_permutation_after_the_archive_stops_the_drop,
    force_with_reason_bypasses_a_closed_gate,
    cli_exit_codes,
);

async fn gate_closed_for_each_reason(backend: Backend) {
    let Some(mut s) = setup(backend, "gate_reasons", "per_member").await else {
        return;
    };
    let opts = s.opts();

    // No audit.
    let o = s.contract(&opts).await.unwrap();
    assert_closed(&o, "no audit", |r| *r == Reason::NoAudit);
    assert_eq!(reasons(&o), vec![Reason::NoAudit]);

    // Only audits of another mapping.
    let other = Mapping::parse(&scenario::mapping_toml("per_member", true), "<other>").unwrap();
    assert_ne!(other.fingerprint, s.mapping.fingerprint);
    let (other_id, _) = s.audit_with(&other, false).await;
    assert!(other_id > 0);
    let o = s.contract(&opts).await.unwrap();
    assert_closed(&o, "other mapping", |r| {
        matches!(r, Reason::OtherMapping { audits: 1, .. })
    });
    assert_eq!(reasons(&o).len(), 1);

    // One clean audit of this mapping: open; fewer than asked: closed.
    let (first, passed) = s.audit().await;
    assert!(passed);
    let o = s.contract(&opts).await.unwrap();
    assert!(o.verdict.as_ref().unwrap().open, "{:?}", reasons(&o));
    assert_eq!(o.verdict.as_ref().unwrap().relied_on, vec![first]);
    let two = ContractOptions {
        gate: tidemark::gate::GateOptions {
            min_clean_audits: 2,
            ..Default::default()
        },
        ..opts.clone()
    };
    let o = s.contract(&two).await.unwrap();
    assert_closed(&o, "fewer clean audits", |r| {
        *r == Reason::TooFewCleanAudits { have: 1, want: 2 }
    });
    let (second, _) = s.audit().await;
    let o = s.contract(&two).await.unwrap();
    assert!(o.verdict.as_ref().unwrap().open, "{:?}", reasons(&o));
    assert_eq!(o.verdict.as_ref().unwrap().relied_on, vec![second, first]);

    // Old audits.
    s.exec("UPDATE tidemark_ledger SET started_ms = started_ms - 172800000 WHERE stage = 'audit'")
        .await;
    let o = s.contract(&opts).await.unwrap();
    assert_closed(
        &o,
        "old audit",
        |r| matches!(r, Reason::AuditTooOld { id, .. } if *id == second),
    );
    let young = ContractOptions {
        gate: tidemark::gate::GateOptions {
            max_audit_age: Duration::from_secs(3 * 86400),
            ..Default::default()
        },
        ..opts.clone()
    };
    assert!(s.contract(&young).await.unwrap().verdict.unwrap().open);

    // A failed audit after the clean ones.
    s.exec("UPDATE unread_counters SET unread_count = unread_count + 5 WHERE conv_id = 2 AND user_id = 'u2'")
        .await;
    let (failed, passed) = s.audit().await;
    assert!(!passed);
    let o = s.contract(&young).await.unwrap();
    assert_closed(
        &o,
        "failed audit",
        |r| matches!(r, Reason::AuditFailed { id, crossed } if *id == failed && !crossed.is_empty()),
    );

    // A passing audit within a tolerance: counts only with --accept-tolerance.
    let mapping = s.mapping.clone();
    let (tolerant, passed) = s.audit_with(&mapping, true).await;
    assert!(passed);
    let o = s.contract(&opts).await.unwrap();
    assert_closed(
        &o,
        "tolerance",
        |r| matches!(r, Reason::ToleranceNotAccepted { id, .. } if *id == tolerant),
    );
    let accept = ContractOptions {
        gate: tidemark::gate::GateOptions {
            accept_tolerance: true,
            ..Default::default()
        },
        ..opts.clone()
    };
    let o = s.contract(&accept).await.unwrap();
    assert!(o.verdict.as_ref().unwrap().open, "{:?}", reasons(&o));
    assert_eq!(o.verdict.as_ref().unwrap().relied_on, vec![tolerant]);

    // Every reason at once is listed.
    let all = ContractOptions {
        gate: tidemark::gate::GateOptions {
            min_clean_audits: 3,
            max_audit_age: Duration::from_millis(1),
            accept_tolerance: true,
            require_unused: true,
        },
        ..opts.clone()
    };
    tokio::time::sleep(Duration::from_millis(5)).await;
    let o = s.contract(&all).await.unwrap();
    let v = o.verdict.as_ref().unwrap();
    assert!(!v.open);
    assert!(v
        .reasons
        .iter()
        .any(|r| matches!(r, Reason::AuditFailed { .. })));
    assert!(v
        .reasons
        .iter()
        .any(|r| matches!(r, Reason::TooFewCleanAudits { have: 1, want: 3 })));
    assert!(v
        .reasons
        .iter()
        .any(|r| matches!(r, Reason::AuditTooOld { .. })));

    // --require-unused: these servers keep no statement statistics (or show the column
    // unused): the gate says which.
    let require = ContractOptions {
        gate: tidemark::gate::GateOptions {
            require_unused: true,
            accept_tolerance: true,
            ..Default::default()
        },
        ..opts.clone()
    };
    let o = s.contract(&require).await.unwrap();
    let v = o.verdict.as_ref().unwrap();
    match &v.statements {
        StatementUse::Unused { .. } => assert!(v.open, "{:?}", v.reasons),
        StatementUse::Unavailable { .. } => assert_closed(&o, "usage unknown", |r| {
            matches!(r, Reason::UsageUnknown { .. })
        }),
        StatementUse::Used { .. } => assert_closed(&o, "column used", |r| {
            matches!(r, Reason::ColumnStillUsed { .. })
        }),
    }
    if backend == Backend::Sqlite {
        assert!(matches!(v.statements, StatementUse::Unavailable { .. }));
    }

    // --execute with a closed gate changes nothing.
    let closed = ContractOptions {
        execute: true,
        ..two.clone()
    };
    let o = s.contract(&closed).await.unwrap();
    assert!(o.gate_closed());
    assert!(!o.executed);
    assert!(s.column_exists("unread_counters", "unread_count").await);
    assert_eq!(
        s.count("SELECT COUNT(*) FROM tidemark_counter_archive")
            .await,
        0
    );
    assert!(s.contracts().await.is_empty());
    s.finish().await;
}

async fn gate_open_dry_run_changes_nothing(backend: Backend) {
    let Some(mut s) = setup(backend, "dry_run", "per_member").await else {
        return;
    };
    s.audit().await;
    let audits_before = s
        .count("SELECT COUNT(*) FROM tidemark_ledger WHERE stage = 'audit'")
        .await;
    let o = s.contract(&s.opts()).await.unwrap();
    assert!(!o.gate_closed());
    assert!(o.verdict.as_ref().unwrap().open);
    assert!(!o.executed);
    let ddl = o.ddl.join("\n");
    match backend {
        Backend::Postgres => {
            assert!(ddl.contains("SET LOCAL lock_timeout = '1000ms';"), "{ddl}");
            assert!(
                ddl.contains("ALTER TABLE \"unread_counters\" DROP COLUMN \"unread_count\";"),
                "{ddl}"
            );
        }
        Backend::Mysql => {
            assert!(ddl.contains("SET SESSION lock_wait_timeout = 1;"), "{ddl}");
            assert!(
                ddl.contains("ALTER TABLE `unread_counters` DROP COLUMN `unread_count`"),
                "{ddl}"
            );
        }
        Backend::Sqlite => {
            assert!(ddl.contains("PRAGMA busy_timeout = 1000;"), "{ddl}");
            assert!(
                ddl.contains("ALTER TABLE \"unread_counters\" DROP COLUMN \"unread_count\";"),
                "{ddl}"
            );
        }
    }
    // A table of its own: the note says --drop-table would drop it.
    assert!(
        o.notes.iter().any(|n| n.contains("--drop-table")),
        "{:?}",
        o.notes
    );
    // Nothing changed: no final audit, no archive, no ledger row, the column is there.
    assert!(s.column_exists("unread_counters", "unread_count").await);
    assert_eq!(
        s.count("SELECT COUNT(*) FROM tidemark_counter_archive")
            .await,
        0
    );
    assert!(s.contracts().await.is_empty());
    assert_eq!(
        s.count("SELECT COUNT(*) FROM tidemark_ledger WHERE stage = 'audit'")
            .await,
        audits_before
    );
    s.finish().await;
}

/// Checks a finished contract: column gone, archive equal to `before`, ledger evidence, second
/// run a no-op.
async fn check_done(
    s: &mut Setup,
    o: &ContractOutcome,
    shape: &str,
    before: &BTreeMap<(i64, String), Option<i64>>,
    relied_on: i64,
) {
    assert!(!o.gate_closed(), "{:?}", o.verdict);
    assert!(o.executed);
    let final_audit = o.final_audit.as_ref().expect("a final audit");
    assert!(final_audit.passed);
    assert!(final_audit.id.unwrap() > relied_on);
    let contract_id = o.ledger_id.unwrap();
    let (archived, audit_ids) = s.archived(contract_id, shape).await;
    assert_eq!(&archived, before, "the archive equals the dropped values");
    assert!(audit_ids.iter().all(|a| *a == final_audit.id));
    let a = o.archive.as_ref().unwrap();
    assert_eq!(a.checksum.rows, before.len() as i64);
    let sum: i64 = before.values().flatten().sum();
    assert_eq!(a.checksum.sum, sum.to_string());

    // The ledger: done, with the evidence.
    let contracts = s.contracts().await;
    let (id, status, passed, summary) = contracts.last().unwrap();
    assert_eq!(*id, contract_id);
    assert_eq!(status, "done");
    assert_eq!(*passed, Some(1));
    // The newest clean audit: `relied_on` or a later one (a failed run's final audit).
    assert!(
        summary["gate"]["relied_on"][0].as_i64().unwrap() >= relied_on,
        "{summary}"
    );
    assert_eq!(summary["final_audit"]["id"].as_i64(), final_audit.id);
    assert_eq!(
        summary["archive"]["checksum"]["rows"].as_i64(),
        Some(before.len() as i64)
    );
    assert!(summary["statements"]["finding"].is_string(), "{summary}");
    assert!(!summary["ddl"].as_array().unwrap().is_empty());
    assert!(summary["forced"].is_null());
    let recent = tidemark::ledger::recent(&mut s.conn, "contract", 1, s.dialect)
        .await
        .unwrap();
    assert_eq!(recent[0].status, "done");
    assert_eq!(
        contract::dropped_by(&mut s.conn, &s.mapping, s.dialect)
            .await
            .unwrap(),
        Some(contract_id)
    );

    // A second run: nothing left to drop.
    let again = s
        .contract(&ContractOptions {
            execute: true,
            ..s.opts()
        })
        .await
        .unwrap();
    assert!(!again.gate_closed());
    assert!(!again.executed);
    let msg = again.nothing_to_drop.expect("nothing to drop");
    assert!(msg.contains(&format!("#{contract_id}")), "{msg}");
    assert_eq!(
        s.contracts().await.len(),
        contracts.len(),
        "a no-op writes nothing"
    );
}

async fn execute_drops_the_column_per_member(backend: Backend) {
    let Some(mut s) = setup(backend, "exec_member", "per_member").await else {
        return;
    };
    let (audit_id, _) = s.audit().await;
    let before = s.values("per_member").await;
    assert_eq!(before.len(), 9);
    let csv = s.dir.path().join("archive.csv");
    let opts = ContractOptions {
        execute: true,
        archive_csv: Some(csv.clone()),
        audit_report: None,
        ..s.opts()
    };
    let o = s.contract(&opts).await.unwrap();
    check_done(&mut s, &o, "per_member", &before, audit_id).await;
    assert!(!s.column_exists("unread_counters", "unread_count").await);
    assert!(s.column_exists("unread_counters", "user_id").await);
    assert_eq!(s.count("SELECT COUNT(*) FROM unread_counters").await, 9);
    // The final audit's report went next to the archive.
    assert!(s.dir.path().join("tidemark-contract-audit.csv").exists());
    // The CSV holds the same values.
    let from_csv = read_csv(&csv);
    assert_eq!(from_csv, before);
    let a = o.archive.as_ref().unwrap();
    assert_eq!(a.csv.as_deref(), Some(csv.display().to_string().as_str()));
    assert_eq!(a.csv_sha256.as_ref().unwrap().len(), 64);
    s.finish().await;
}

fn read_csv(path: &Path) -> BTreeMap<(i64, String), Option<i64>> {
    let file = csv::read(path);
    assert_eq!(file.columns[0], "conversation_id");
    assert_eq!(file.columns[2], "stored_unread");
    file.rows
        .iter()
        .map(|rec| {
            (
                (rec[0].parse().unwrap(), rec[1].to_string()),
                (!rec[2].is_empty()).then(|| rec[2].parse().unwrap()),
            )
        })
        .collect()
}

async fn execute_drops_the_column_per_message(backend: Backend) {
    let Some(mut s) = setup(backend, "exec_message", "per_message").await else {
        return;
    };
    let (audit_id, passed) = s.audit().await;
    assert!(passed, "the per-message data audits clean");
    let before = s.values("per_message").await;
    assert_eq!(before.len(), 8);
    // --drop-table: the messages table is never dropped.
    let err = s
        .contract(&ContractOptions {
            drop_table: true,
            ..s.opts()
        })
        .await
        .unwrap_err();
    assert_eq!(tidemark::cli::Outcome::code_of(&err), 2, "{err:#}");
    let o = s
        .contract(&ContractOptions {
            execute: true,
            ..s.opts()
        })
        .await
        .unwrap();
    check_done(&mut s, &o, "per_message", &before, audit_id).await;
    assert!(!s.column_exists("messages", "unread_count").await);
    assert_eq!(s.count("SELECT COUNT(*) FROM messages").await, 8);
    s.finish().await;
}

async fn execute_drops_a_table_of_its_own(backend: Backend) {
    let Some(mut s) = setup(backend, "exec_table", "per_member").await else {
        return;
    };
    let (audit_id, _) = s.audit().await;
    let before = s.values("per_member").await;
    let opts = ContractOptions {
        execute: true,
        drop_table: true,
        ..s.opts()
    };
    let dry = s
        .contract(&ContractOptions {
            execute: false,
            ..opts.clone()
        })
        .await
        .unwrap();
    assert!(
        dry.ddl.iter().any(|l| l.starts_with("DROP TABLE")),
        "{:?}",
        dry.ddl
    );
    let o = s.contract(&opts).await.unwrap();
    check_done(&mut s, &o, "per_member", &before, audit_id).await;
    assert!(
        !tidemark::db::catalog::table_exists(&mut s.conn, s.dialect, "unread_counters")
            .await
            .unwrap()
    );
    s.finish().await;
}

/// The gate opens on a clean audit, but the counters drifted since: the final audit inside the
/// gate fails, and nothing is archived or dropped.
async fn final_audit_inside_the_gate_must_pass(backend: Backend) {
    let Some(mut s) = setup(backend, "final_audit", "per_member").await else {
        return;
    };
    s.audit().await;
    s.exec("UPDATE unread_counters SET unread_count = 7 WHERE conv_id = 3 AND user_id = 'u1'")
        .await;
    let o = s
        .contract(&ContractOptions {
            execute: true,
            ..s.opts()
        })
        .await
        .unwrap();
    assert!(o.gate_closed());
    assert!(!o.executed);
    let final_audit = o.final_audit.as_ref().expect("the final audit ran");
    assert!(!final_audit.passed);
    assert_closed(
        &o,
        "final audit",
        |r| matches!(r, Reason::FinalAuditFailed { id, .. } if *id == final_audit.id),
    );
    assert!(s.column_exists("unread_counters", "unread_count").await);
    assert_eq!(
        s.count("SELECT COUNT(*) FROM tidemark_counter_archive")
            .await,
        0
    );
    let contracts = s.contracts().await;
    assert_eq!(contracts.len(), 1);
    assert_eq!(contracts[0].1, "refused");
    assert_eq!(contracts[0].2, Some(0));
    // The failed final audit is in the ledger: the next dry run is closed too.
    let o = s.contract(&s.opts()).await.unwrap();
    assert_closed(&o, "after the final audit", |r| {
        matches!(r, Reason::AuditFailed { .. })
    });
    // status can ask for the verdict alone.
    let v = contract::verdict(&mut s.conn, &s.mapping, s.dialect, &Default::default())
        .await
        .unwrap();
    assert!(!v.open);
    assert_eq!(
        contract::dropped_by(&mut s.conn, &s.mapping, s.dialect)
            .await
            .unwrap(),
        None
    );
    s.finish().await;
}

/// The statement another connection runs to hold a lock that the archive does not need but the
/// DDL does.
fn blocking_lock(backend: Backend) -> Vec<&'static str> {
    match backend {
        // ACCESS SHARE: the archive reads on; the DROP needs ACCESS EXCLUSIVE.
        Backend::Postgres => vec!["BEGIN", "LOCK TABLE unread_counters IN ACCESS SHARE MODE"],
        // A shared metadata lock until COMMIT: LOCK TABLES … WRITE waits for it.
        Backend::Mysql => vec!["START TRANSACTION", "SELECT COUNT(*) FROM unread_counters"],
        // The write lock: BEGIN IMMEDIATE waits busy_timeout for it.
        Backend::Sqlite => vec!["BEGIN IMMEDIATE"],
    }
}

/// One statement, boxed with an explicit lifetime: a `Send` future that runs sqlx on a
/// connection it borrows must be (the "Executor is not general enough" limitation).
fn exec_boxed<'c>(
    conn: &'c mut AnyConnection,
    sql: &'static str,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), sqlx::Error>> + Send + 'c>> {
    use sqlx::Executor;
    Box::pin(async move { conn.execute(sql).await.map(|_| ()) })
}

async fn lock_after_archive_keeps_column_and_archive(backend: Backend) {
    let Some(mut s) = setup(backend, "lock_fail", "per_member").await else {
        return;
    };
    let (audit_id, _) = s.audit().await;
    let before = s.values("per_member").await;
    let held: Arc<tokio::sync::Mutex<Option<AnyConnection>>> = Arc::default();
    let hook: contract::Hook = {
        let held = held.clone();
        let url = s.db.url.clone();
        Arc::new(move || {
            let held = held.clone();
            let url = url.clone();
            Box::pin(async move {
                let mut other = crate::common::connect(&url).await;
                for sql in blocking_lock(backend) {
                    exec_boxed(&mut other, sql).await?;
                }
                *held.lock().await = Some(other);
                Ok(())
            })
        })
    };
    let opts = ContractOptions {
        execute: true,
        lock_retries: 1,
        before_ddl: Some(hook),
        archive_csv: Some(s.dir.path().join("a.csv")),
        ..s.opts()
    };
    let started = std::time::Instant::now();
    let err = s.contract(&opts).await.unwrap_err();
    assert_eq!(tidemark::cli::Outcome::code_of(&err), 3, "{err:#}");
    assert!(tidemark::lock::is_lock_wait(&err), "a lock wait: {err:#}");
    assert!(format!("{err:#}").contains("intact"), "{err:#}");
    assert!(started.elapsed() >= Duration::from_secs(2), "retried once");
    // The lock is still held: look from a third connection... then release it.
    if let Some(mut other) = held.lock().await.take() {
        let _ = sqlx::raw_sql("ROLLBACK").execute(&mut other).await;
    }
    assert!(s.column_exists("unread_counters", "unread_count").await);
    assert_eq!(s.values("per_member").await, before);
    let contracts = s.contracts().await;
    let (failed_id, status, _, summary) = contracts.last().unwrap().clone();
    if backend == Backend::Sqlite {
        // The other connection's write lock also kept the ledger from recording the failure.
        assert!(status == "failed" || status == "running", "{status}");
    } else {
        assert_eq!(status, "failed");
        assert!(
            summary["error"].as_str().unwrap().contains("intact"),
            "{summary}"
        );
    }
    let (archived, _) = s.archived(failed_id, "per_member").await;
    assert_eq!(archived, before, "the archive of the failed run is intact");
    assert_eq!(read_csv(&s.dir.path().join("a.csv")), before);

    // Without the lock, the same command completes.
    let o = s
        .contract(&ContractOptions {
            before_ddl: None,
            ..opts
        })
        .await
        .unwrap();
    check_done(&mut s, &o, "per_member", &before, audit_id).await;
    assert!(!s.column_exists("unread_counters", "unread_count").await);
    s.finish().await;
}

/// Issue 25 row 7: two counters swapped after the archive was verified and before the DDL
/// (rows, non-NULL values, sum and sum of squares all unchanged): the check inside the lock
/// compares the archive with the column row by row, so the drop stops (exit 3), the column
/// keeps the values as they are now, and the archive those of before.
async fn a_permutation_after_the_archive_stops_the_drop(backend: Backend) {
    let Some(mut s) = setup(backend, "permutation", "per_member").await else {
        return;
    };
    let (_, passed) = s.audit().await;
    assert!(passed);
    let before = s.values("per_member").await;
    assert_eq!(before[&(2, "u1".to_string())], Some(8));
    assert_eq!(before[&(2, "u2".to_string())], Some(5));
    let hook: contract::Hook = {
        let url = s.db.url.clone();
        Arc::new(move || {
            let url = url.clone();
            Box::pin(async move {
                let mut other = crate::common::connect(&url).await;
                exec_boxed(
                    &mut other,
                    "UPDATE unread_counters SET unread_count = CASE user_id WHEN 'u1' THEN 5 ELSE 8 END WHERE conv_id = 2 AND user_id IN ('u1', 'u2')",
                )
                .await?;
                Ok(())
            })
        })
    };
    let opts = ContractOptions {
        execute: true,
        before_ddl: Some(hook),
        ..s.opts()
    };
    let err = s.contract(&opts).await.unwrap_err();
    let msg = format!("{err:#}");
    assert_eq!(tidemark::cli::Outcome::code_of(&err), 3, "{msg}");
    assert!(
        msg.contains("unread_counters.unread_count changed after it was archived")
            && msg.contains("nothing was dropped"),
        "{msg}"
    );
    assert!(s.column_exists("unread_counters", "unread_count").await);
    let mut swapped = before.clone();
    swapped.insert((2, "u1".into()), Some(5));
    swapped.insert((2, "u2".into()), Some(8));
    assert_eq!(s.values("per_member").await, swapped);
    let (id, status, _, _) = s.contracts().await.last().unwrap().clone();
    assert_eq!(status, "failed");
    assert_eq!(s.archived(id, "per_member").await.0, before);
    s.finish().await;
}

async fn force_with_reason_bypasses_a_closed_gate(backend: Backend) {
    let Some(mut s) = setup(backend, "force", "per_member").await else {
        return;
    };
    // --force without --reason is bad input.
    let err = s
        .contract(&ContractOptions {
            execute: true,
            force: true,
            ..s.opts()
        })
        .await
        .unwrap_err();
    assert_eq!(tidemark::cli::Outcome::code_of(&err), 2);
    // Drift, and no clean audit: the gate is closed, the final audit fails too.
    s.exec("UPDATE unread_counters SET unread_count = 40 WHERE conv_id = 1 AND user_id = 'u1'")
        .await;
    let (_, passed) = s.audit().await;
    assert!(!passed);
    let before = s.values("per_member").await;
    let reason = "counters unread by the app since release 7.2 (CHG-1234)";
    let o = s
        .contract(&ContractOptions {
            execute: true,
            force: true,
            reason: Some(reason.into()),
            ..s.opts()
        })
        .await
        .unwrap();
    assert!(o.executed);
    assert!(!o.gate_closed());
    assert_eq!(o.forced.as_deref(), Some(reason));
    let v = o.verdict.as_ref().unwrap();
    assert!(!v.open);
    assert!(v
        .reasons
        .iter()
        .any(|r| matches!(r, Reason::AuditFailed { .. })));
    assert!(v
        .reasons
        .iter()
        .any(|r| matches!(r, Reason::FinalAuditFailed { .. })));
    assert!(!s.column_exists("unread_counters", "unread_count").await);
    let contracts = s.contracts().await;
    let (id, status, passed, summary) = contracts.last().unwrap();
    assert_eq!(status, "done");
    assert_eq!(*passed, Some(0), "a forced drop is not a passed gate");
    assert_eq!(summary["forced"]["reason"].as_str(), Some(reason));
    assert!(!summary["forced"]["overridden"]
        .as_array()
        .unwrap()
        .is_empty());
    let (archived, _) = s.archived(*id, "per_member").await;
    assert_eq!(archived, before);
    s.finish().await;
}

async fn cli_exit_codes(backend: Backend) {
    let Some(s) = setup(backend, "cli", "per_member").await else {
        return;
    };
    let files = tempfile::tempdir().unwrap();
    let mapping_file = files.path().join("tidemark.toml");
    let report = files.path().join("final.csv").display().to_string();
    std::fs::write(&mapping_file, scenario::mapping_toml("per_member", false)).unwrap();
    let args = |extra: &[&str]| -> ContractArgs {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Wrap {
            #[command(flatten)]
            args: ContractArgs,
        }
        let mut argv = vec![
            "contract".to_string(),
            "--database".into(),
            s.db.url.clone(),
            "--mapping".into(),
            mapping_file.display().to_string(),
            "--lock-timeout".into(),
            "1s".into(),
            "--audit-report".into(),
            report.clone(),
        ];
        argv.extend(extra.iter().map(|a| a.to_string()));
        Wrap::try_parse_from(argv).unwrap().args
    };
    // Closed: exit 1.
    assert_eq!(run_cli(args(&[])).await.unwrap().code(), 1);
    // Bad input: exit 2.
    let err = run_cli(args(&["--force"])).await.unwrap_err();
    assert_eq!(tidemark::cli::Outcome::code_of(&err), 2);
    let err = run_cli(args(&[
        "--drop-table",
        "--execute",
        "--force",
        "--reason",
        "x",
        "--max-audit-age",
        "1h",
    ]))
    .await;
    assert!(err.is_ok(), "a table of its own may be dropped: {err:?}");
    s.finish().await;
    let Some(mut s) = setup(backend, "cli2", "per_member").await else {
        return;
    };
    std::fs::write(&mapping_file, scenario::mapping_toml("per_member", false)).unwrap();
    s.audit().await;
    let url = s.db.url.clone();
    let args = |extra: &[&str]| -> ContractArgs {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Wrap {
            #[command(flatten)]
            args: ContractArgs,
        }
        let mut argv = vec![
            "contract".to_string(),
            "--database".into(),
            url.clone(),
            "--mapping".into(),
            mapping_file.display().to_string(),
        ];
        argv.extend(extra.iter().map(|a| a.to_string()));
        Wrap::try_parse_from(argv).unwrap().args
    };
    // Open: exit 0; with --execute: done, exit 0; again: nothing to drop, exit 0.
    assert_eq!(run_cli(args(&[])).await.unwrap().code(), 0);
    assert_eq!(
        run_cli(args(&["--min-clean-audits", "2"]))
            .await
            .unwrap()
            .code(),
        1
    );
    assert_eq!(
        run_cli(args(&["--execute", "--audit-report", &report]))
            .await
            .unwrap()
            .code(),
        0
    );
    assert!(!s.column_exists("unread_counters", "unread_count").await);
    assert_eq!(run_cli(args(&["--execute"])).await.unwrap().code(), 0);
    s.finish().await;
}

/// SQLite cannot drop a column named in a table CHECK constraint in place: the documented
/// rebuild runs, keeps the data, the other indexes and the triggers, and drops the index on the
/// counter.
#[tokio::test]
async fn sqlite_rebuild_where_the_column_cannot_be_dropped_in_place() {
    let schema: Vec<String> = scenario::schema_sql()
        .into_iter()
        .map(|s| {
            if s.starts_with("CREATE TABLE unread_counters") {
                "CREATE TABLE unread_counters (\
                 conv_id BIGINT NOT NULL, \
                 user_id VARCHAR(64) NOT NULL COLLATE NOCASE, \
                 unread_count INT NULL, \
                 note TEXT DEFAULT 'a, b', \
                 PRIMARY KEY (conv_id, user_id), \
                 CHECK (unread_count IS NULL OR unread_count > -1000000))"
                    .to_string()
            } else {
                s
            }
        })
        .chain([
            "CREATE INDEX unread_by_count ON unread_counters (unread_count)".to_string(),
            "CREATE INDEX unread_by_note ON unread_counters (note)".to_string(),
            "CREATE TABLE counter_log (conv_id BIGINT, user_id TEXT)".to_string(),
            "CREATE TRIGGER unread_log AFTER INSERT ON unread_counters BEGIN INSERT INTO counter_log VALUES (NEW.conv_id, NEW.user_id); END".to_string(),
        ])
        .collect();
    let Some(mut s) = setup_with(Backend::Sqlite, "rebuild", "per_member", &schema).await else {
        return;
    };
    let (audit_id, _) = s.audit().await;
    let before = s.values("per_member").await;
    let dry = s.contract(&s.opts()).await.unwrap();
    let ddl = dry.ddl.join("\n");
    assert!(
        ddl.contains("CREATE TABLE \"main\".\"tidemark_rebuild_unread_counters\""),
        "{ddl}"
    );
    assert!(ddl.contains("PRAGMA legacy_alter_table = ON;"), "{ddl}");
    assert!(ddl.contains("PRAGMA foreign_keys = OFF;"), "{ddl}");
    assert!(!ddl.contains("unread_by_count"), "{ddl}");
    assert!(ddl.contains("CREATE INDEX unread_by_note"), "{ddl}");
    assert!(
        dry.notes.iter().any(|n| n.contains("rebuilt")),
        "{:?}",
        dry.notes
    );
    let o = s
        .contract(&ContractOptions {
            execute: true,
            ..s.opts()
        })
        .await
        .unwrap();
    check_done(&mut s, &o, "per_member", &before, audit_id).await;
    assert!(!s.column_exists("unread_counters", "unread_count").await);
    assert_eq!(s.count("SELECT COUNT(*) FROM unread_counters").await, 9);
    assert_eq!(
        s.count(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = 'unread_by_note'"
        )
        .await,
        1
    );
    assert_eq!(
        s.count("SELECT COUNT(*) FROM sqlite_master WHERE name = 'unread_by_count'")
            .await,
        0
    );
    assert_eq!(
        s.count(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'trigger' AND name = 'unread_log'"
        )
        .await,
        1
    );
    assert_eq!(
        s.count(
            "SELECT COUNT(*) FROM sqlite_master WHERE name = 'tidemark_rebuild_unread_counters'"
        )
        .await,
        0
    );
    // The primary key, the collation and the default survived.
    s.exec("INSERT INTO unread_counters (conv_id, user_id) VALUES (9, 'X')")
        .await;
    assert!(
        sqlx::raw_sql("INSERT INTO unread_counters (conv_id, user_id) VALUES (9, 'x')")
            .execute(&mut s.conn)
            .await
            .is_err()
    );
    assert_eq!(
        s.count("SELECT COUNT(*) FROM unread_counters WHERE note = 'a, b'")
            .await,
        10
    );
    // 9 rows loaded, 1 inserted since the rebuild: the trigger still fires.
    assert_eq!(s.count("SELECT COUNT(*) FROM counter_log").await, 10);
    assert_eq!(
        s.count("SELECT COUNT(*) FROM pragma_foreign_keys WHERE foreign_keys = 1")
            .await,
        1,
        "foreign keys are on again"
    );
    s.finish().await;
}

/// An index on the counter alone does not need the rebuild: it is dropped, then the column in
/// place.
#[tokio::test]
async fn sqlite_index_on_the_counter_is_dropped_first() {
    let mut schema = scenario::schema_sql();
    schema.push("CREATE INDEX unread_by_count ON unread_counters (conv_id, unread_count)".into());
    let Some(mut s) = setup_with(Backend::Sqlite, "sqlite_index", "per_member", &schema).await
    else {
        return;
    };
    s.audit().await;
    let dry = s.contract(&s.opts()).await.unwrap();
    let ddl = dry.ddl.join("\n");
    assert!(
        ddl.contains("DROP INDEX \"main\".\"unread_by_count\";"),
        "{ddl}"
    );
    assert!(
        ddl.contains("ALTER TABLE \"unread_counters\" DROP COLUMN \"unread_count\";"),
        "{ddl}"
    );
    let o = s
        .contract(&ContractOptions {
            execute: true,
            ..s.opts()
        })
        .await
        .unwrap();
    assert!(o.executed);
    assert!(!s.column_exists("unread_counters", "unread_count").await);
    s.finish().await;
}

/// A trigger that still uses the counter makes the plan refuse (bad input): SQLite would leave
/// it broken.
#[tokio::test]
async fn sqlite_trigger_using_the_counter_is_refused() {
    let mut schema = scenario::schema_sql();
    schema.push(
        "CREATE TRIGGER bump AFTER INSERT ON messages BEGIN UPDATE unread_counters SET unread_count = unread_count + 1 WHERE conv_id = NEW.conv_id; END"
            .into(),
    );
    let Some(mut s) = setup_with(Backend::Sqlite, "sqlite_trigger", "per_member", &schema).await
    else {
        return;
    };
    s.audit().await;
    let err = s.contract(&s.opts()).await.unwrap_err();
    assert_eq!(tidemark::cli::Outcome::code_of(&err), 2);
    assert!(err.to_string().contains("bump"), "{err}");
    s.finish().await;
}
