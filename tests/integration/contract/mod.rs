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

mod execute;
mod gate;
mod locks;
mod sqlite_rebuild;

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
