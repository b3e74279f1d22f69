//! `--format json` of `status`, `backfill`, `contract`, `plan` and `inspect` (README "Output
//! for scripts"): each prints one JSON object on stdout whose values are the real ones (the
//! backfill's `written` equals the rows it added to the watermark table, the contract's gate
//! verdict agrees with its exit code, `plan` lists every statement of every stage), with the
//! same exit codes as the text output. Also `tidemark completions` and `tidemark man`.

use std::path::{Path, PathBuf};

use serde_json::Value;
use sqlx::AnyConnection;

use crate::common::{bin, exec_all, on_every_backend, Backend, TestDb};
use crate::scenario;
use tidemark::mapping::Mapping;

/// A scenario database: the legacy schema, every per_member scenario (conversation ids shifted
/// by 100 per scenario, their application watermarks not yet written), and the mapping file.
pub struct Fixture {
    /// The database.
    pub db: TestDb,
    /// Holds the mapping file and the reports.
    pub dir: tempfile::TempDir,
    /// The mapping file.
    pub mapping: PathBuf,
}

impl Fixture {
    /// Loads the fixture; None when the backend is skipped.
    pub async fn create(backend: Backend, label: &str, extra: &[String]) -> Option<Fixture> {
        let db = TestDb::create(backend, label).await?;
        let mut conn = db.connect().await;
        exec_all(&mut conn, &scenario::schema_sql()).await;
        for (i, s) in per_member_scenarios().iter().enumerate() {
            exec_all(&mut conn, &scenario::data_sql(s, 100 * i as i64)).await;
        }
        exec_all(&mut conn, extra).await;
        drop(conn);
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mapping = dir.path().join("tidemark.toml");
        std::fs::write(&mapping, scenario::mapping_toml("per_member", false)).unwrap();
        Some(Fixture { db, dir, mapping })
    }

    /// Runs `tidemark COMMAND --database URL --mapping FILE args…` in the fixture's folder.
    pub fn run(&self, command: &[&str], args: &[&str]) -> bin::Run {
        let mut all: Vec<&str> = command.to_vec();
        all.extend(["--database", &self.db.url, "--mapping"]);
        let mapping = self.mapping.to_str().unwrap().to_string();
        all.push(&mapping);
        all.extend(args);
        bin::run(self.dir.path(), &all)
    }

    /// Rows in the watermark table.
    pub async fn watermark_rows(&self) -> i64 {
        let mut conn = self.db.connect().await;
        let n: i64 = sqlx::query_scalar(&format!(
            "SELECT COUNT(*) FROM {}",
            scenario::WATERMARK_TABLE
        ))
        .fetch_one(&mut conn)
        .await
        .unwrap();
        n
    }

    /// A connection to the fixture's database.
    #[allow(dead_code, reason = "used by the app_sql suite")]
    pub async fn connect(&self) -> AnyConnection {
        self.db.connect().await
    }
}

/// The per_member scenarios, in file order.
pub fn per_member_scenarios() -> Vec<scenario::Scenario> {
    scenario::load_all()
        .unwrap()
        .into_iter()
        .filter(|s| !s.is_per_message())
        .collect()
}

/// The one JSON object a run printed on stdout.
#[track_caller]
fn json(run: &bin::Run) -> Value {
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON object ({e})\n--- stdout\n{}\n--- stderr\n{}",
            run.stdout, run.stderr
        )
    })
}

/// status, backfill and contract as JSON, through the stages: before and after the backfill,
/// with no audit, a failed audit and a passing one.
async fn status_backfill_contract(backend: Backend) {
    let Some(fx) = Fixture::create(backend, "json_stages", &[]).await else {
        return;
    };
    fx.run(&["expand"], &[]).expect_code(0);

    let status = json(fx.run(&["status"], &["--format", "json"]).expect_code(0));
    assert_eq!(status["watermark_table"], scenario::WATERMARK_TABLE);
    assert_eq!(status["watermark_rows"], 0);
    assert!(status["backfill"].is_null(), "{status:#}");
    assert_eq!(status["audits"], serde_json::json!([]));
    assert!(status["migrations"].as_array().unwrap().len() >= 2);
    assert_eq!(status["gate"]["open"], false);
    assert_eq!(status["gate"]["reasons"][0]["kind"], "no_audit");

    let run = fx.run(&["backfill"], &["--format", "json", "-q"]);
    let backfill = json(run.expect_code(0));
    let rows = fx.watermark_rows().await;
    assert!(rows > 0);
    assert_eq!(backfill["written"], rows, "{backfill:#}");
    assert_eq!(backfill["advanced"], 0);
    assert_eq!(backfill["dry_run"], false);
    assert_eq!(backfill["interrupted"], false);
    let by_source: i64 = backfill["by_source"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_i64().unwrap())
        .sum();
    assert_eq!(by_source, rows, "by_source adds up to the rows written");
    assert!(backfill["ledger_id"].as_i64().is_some());
    assert!(backfill["unread_changes"].as_u64().is_some());
    assert_eq!(backfill["statements"], serde_json::json!([]));

    let status = json(fx.run(&["status"], &["--format", "json"]).expect_code(0));
    assert_eq!(status["watermark_rows"], rows);
    assert_eq!(status["backfill"]["status"], "done");
    assert_eq!(status["backfill"]["id"], backfill["ledger_id"]);

    // No audit: the gate is closed, exit 1, and the object says so.
    let run = fx.run(&["contract"], &["--format", "json", "-q"]);
    let closed = json(run.expect_code(1));
    assert_eq!(closed["gate"]["open"], false);
    assert_eq!(closed["exit_code"], 1);
    assert_eq!(closed["executed"], false);
    assert_eq!(closed["gate"]["reasons"][0]["kind"], "no_audit");
    assert!(!closed["ddl"].as_array().unwrap().is_empty());

    // The scenarios drift: the audit fails and the gate names it.
    let report = fx.dir.path().join("drift.csv");
    let report = report.to_str().unwrap();
    fx.run(&["audit"], &["--report", report, "-q"])
        .expect_code(1);
    let closed = json(
        fx.run(&["contract"], &["--format", "json", "-q"])
            .expect_code(1),
    );
    assert_eq!(closed["gate"]["open"], false);
    assert_eq!(closed["exit_code"], 1);
    let kinds: Vec<&str> = closed["gate"]["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"audit_failed"), "{kinds:?}");

    // A passing audit with a tolerance, accepted: the gate opens, exit 0.
    let audit = fx.run(
        &["audit"],
        &[
            "--report",
            report,
            "--max-drift-rows",
            "100000",
            "--format",
            "json",
        ],
    );
    let audit = json(audit.expect_code(0));
    let open = json(
        fx.run(
            &["contract"],
            &["--format", "json", "-q", "--accept-tolerance"],
        )
        .expect_code(0),
    );
    assert_eq!(open["gate"]["open"], true, "{open:#}");
    assert_eq!(open["exit_code"], 0);
    assert_eq!(open["shape"], "per_member");
    assert_eq!(open["column"], "unread_count");
    let relied: Vec<i64> = open["gate"]["relied_on"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert!(!relied.is_empty());

    let status = json(fx.run(&["status"], &["--format", "json"]).expect_code(0));
    assert_eq!(status["audits"].as_array().unwrap().len(), 2);
    assert_eq!(status["audits"][0]["passed"], true);
    assert_eq!(status["audits"][0]["rows_checked"], audit["rows_checked"]);
    assert_eq!(status["audits"][1]["passed"], false);
    assert_eq!(status["audits"][0]["same_mapping"], true);
    fx.db.cleanup().await;
}

/// `plan --format json` lists every stage's statements (the same the library plans), and
/// `backfill --dry-run --format json` its own; `inspect --format json` says whether the
/// proposal is complete as its exit code does.
async fn plan_inspect_dry_run(backend: Backend) {
    let Some(fx) = Fixture::create(backend, "json_plan", &[]).await else {
        return;
    };
    let mapping = Mapping::load(&fx.mapping).unwrap();
    let dialect = tidemark::db::Dsn::parse(&fx.db.url).unwrap().dialect;
    let plan = json(fx.run(&["plan"], &["--format", "json"]).expect_code(0));
    let stages: Vec<&str> = plan["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stage"].as_str().unwrap())
        .collect();
    assert_eq!(stages, ["expand", "backfill", "audit", "contract"]);
    assert_eq!(plan["dialect"], dialect.name());
    assert!(!plan["stages"][0]["statements"]
        .as_array()
        .unwrap()
        .is_empty());
    let sql_of = |i: usize| -> Vec<String> {
        plan["stages"][i]["statements"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["sql"].as_str().unwrap().to_string())
            .collect()
    };
    let backfill: Vec<String> = tidemark::stages::backfill::statements(&mapping, dialect)
        .unwrap()
        .into_iter()
        .map(|(_, sql)| sql)
        .collect();
    assert_eq!(sql_of(1), backfill);
    let audit: Vec<String> = tidemark::stages::audit::statements(&mapping, dialect, None)
        .unwrap()
        .into_iter()
        .map(|(_, sql)| sql)
        .collect();
    assert_eq!(sql_of(2), audit);
    // Before expand the contract cannot be planned: a note, no statement.
    assert!(plan["stages"][3]["note"].as_str().is_some(), "{plan:#}");
    // The indexes the stages read by: the legacy schema has every one.
    let indexes = plan["indexes"].as_array().unwrap();
    let listed: Vec<(String, String)> = indexes
        .iter()
        .map(|i| {
            (
                format!("{} {}", i["table"].as_str().unwrap(), i["columns"]),
                i["status"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let present = |t: &str| (t.to_string(), "present".to_string());
    assert_eq!(
        listed,
        vec![
            present("messages [\"conv_id\",\"id\"]"),
            present("unread_counters [\"conv_id\",\"user_id\"]"),
            present("members [\"conv_id\",\"user_id\"]"),
            present("read_receipts [\"conv_id\",\"user_id\"]"),
        ],
        "{plan:#}"
    );
    assert_eq!(indexes[3]["index"], "read_receipts_by_member");
    // Without the receipts index: missing, with the statement that creates it, which runs.
    let mut conn = fx.db.connect().await;
    let drop_sql = match dialect {
        tidemark::dialect::Dialect::Mysql => "DROP INDEX read_receipts_by_member ON read_receipts",
        _ => "DROP INDEX read_receipts_by_member",
    };
    sqlx::raw_sql(drop_sql).execute(&mut conn).await.unwrap();
    let text = fx.run(&["plan"], &[]).expect_code(0).stdout.clone();
    assert!(
        text.contains("  MISSING  read_receipts (conv_id, user_id): the backfill reads this evidence by conversation range; each batch scans the whole table"),
        "{text}"
    );
    let plan = json(fx.run(&["plan"], &["--format", "json"]).expect_code(0));
    let missing = &plan["indexes"][3];
    assert_eq!(missing["status"], "missing");
    let create = missing["create"].as_str().unwrap();
    assert!(text.contains(create), "{text}");
    sqlx::raw_sql(create).execute(&mut conn).await.unwrap();
    drop(conn);
    let plan = json(fx.run(&["plan"], &["--format", "json"]).expect_code(0));
    assert_eq!(plan["indexes"][3]["status"], "present", "{plan:#}");

    fx.run(&["expand"], &[]).expect_code(0);
    let plan = json(fx.run(&["plan"], &["--format", "json"]).expect_code(0));
    assert!(plan["stages"][0]["statements"]
        .as_array()
        .unwrap()
        .is_empty());
    assert!(!plan["stages"][3]["statements"]
        .as_array()
        .unwrap()
        .is_empty());

    let dry = json(
        fx.run(&["backfill"], &["--dry-run", "--format", "json", "-q"])
            .expect_code(0),
    );
    assert_eq!(dry["dry_run"], true);
    assert!(dry["unread_changes"].is_null());
    let listed: Vec<&str> = dry["statements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["sql"].as_str().unwrap())
        .collect();
    assert_eq!(listed, backfill);
    assert_eq!(fx.watermark_rows().await, 0, "a dry run writes nothing");

    let run = bin::run(
        fx.dir.path(),
        &["inspect", "--database", &fx.db.url, "--format", "json"],
    );
    let inspect = json(&run);
    let complete = inspect["complete"].as_bool().unwrap();
    assert_eq!(run.code, Some(if complete { 0 } else { 1 }), "{inspect:#}");
    assert!(inspect["mapping"].as_str().unwrap().contains("[messages]"));
    assert!(inspect["tables"].as_u64().unwrap() >= 4);
    assert!(inspect["output"].is_null());
    let out = fx.dir.path().join("proposed.toml");
    let run = bin::run(
        fx.dir.path(),
        &[
            "inspect",
            "--database",
            &fx.db.url,
            "--format",
            "json",
            "--output",
            out.to_str().unwrap(),
        ],
    );
    let inspect = json(&run);
    assert!(inspect["mapping"].is_null());
    assert_eq!(inspect["output"], out.to_str().unwrap());
    assert!(std::fs::read_to_string(&out)
        .unwrap()
        .contains("[messages]"));
    fx.db.cleanup().await;
}

on_every_backend!(status_backfill_contract);

on_every_backend!(plan_inspect_dry_run);

/// The commands `tidemark --help` lists.
fn commands(dir: &Path) -> Vec<String> {
    let run = bin::run(dir, &["--help"]);
    run.stdout
        .split("Commands:")
        .nth(1)
        .unwrap()
        .lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect()
}

#[test]
fn completions_and_man_page_cover_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let commands = commands(dir.path());
    assert!(commands.len() >= 11, "{commands:?}");
    let bash = bin::run(dir.path(), &["completions", "bash"]);
    bash.expect_code(0);
    assert!(
        bash.stdout.contains("complete -F"),
        "a bash completion script"
    );
    for c in &commands {
        assert!(
            bash.stdout.contains(c.as_str()),
            "bash completion lacks {c}"
        );
    }
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let run = bin::run(dir.path(), &["completions", shell]);
        run.expect_code(0);
        assert!(run.stdout.contains("backfill"), "{shell}");
    }
    bin::run(dir.path(), &["completions", "tcsh"]).expect_code(2);

    let man = bin::run(dir.path(), &["man"]);
    man.expect_code(0);
    assert!(man.stdout.starts_with(".ie") || man.stdout.contains(".TH tidemark"));
    for c in &commands {
        assert!(man.stdout.contains(c.as_str()), "man page lacks {c}");
    }
    assert!(man.stdout.contains("EXIT STATUS"));
    for (outcome, meaning) in tidemark::cli::Outcome::MEANINGS {
        // roff escapes hyphens: compare the words before the first colon.
        let head = meaning.split(':').next().unwrap();
        assert!(
            man.stdout.contains(head),
            "man page lacks exit {}",
            outcome.code()
        );
    }

    let out = dir.path().join("man1");
    let run = bin::run(dir.path(), &["man", "--out", out.to_str().unwrap()]);
    run.expect_code(0);
    assert!(out.join("tidemark.1").exists());
    for c in &commands {
        let page = out.join(format!("tidemark-{c}.1"));
        let text = std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{page:?}: {e}"));
        assert!(text.contains(&format!("tidemark-{c}")), "{page:?}");
        assert!(text.contains("EXIT STATUS"));
    }
}
