//! Several databases as shards (issue 31): `--database` given several times (or
//! `--databases FILE`) runs each stage on every shard at once.
//!
//! - The per_member scenarios of `shared/spec/scenarios.json` (default options), each shifted
//!   to conversations of its own, loaded into one database and, split by scenario (so by
//!   conversation), over three PostgreSQL databases, two MariaDB databases and two SQLite files:
//!   the shards' watermarks together equal the one database's, and both hold every watermark
//!   the scenarios expect; the combined report (with its leading `shard` column naming the
//!   shard that holds each conversation) has the one database's rows, and those are exactly the
//!   scenarios' expected rows; the summary adds the shards up.
//! - A shard whose connection is killed mid-backfill (pg_terminate_backend, KILL; its whole
//!   server: [`server_death`]): exit 3
//!   naming it, the other shards' watermarks complete, the failed shard's a part of them; the
//!   same command again finishes it, and the watermarks equal the one database's.
//! - The contract gate across shards: closed while one shard's audit fails (nothing dropped on
//!   any shard), open once every shard's audit passes; a drop that fails on one shard (its
//!   table held by another session) leaves the other's drop done and the failed one
//!   resumable.
//!
//! The databases are made on the test servers of `common`; when `TIDEMARK_TEST_SHARD_POSTGRES_URLS`
//! or `TIDEMARK_TEST_SHARD_MYSQL_URLS` (comma-separated admin URLs, e.g. the extra servers of
//! `.ci/shards.sh`) are set, the shards are spread over those servers instead.

use std::collections::BTreeMap;
use std::path::Path;

use sqlx::{AnyConnection, Connection, Row};

use crate::common::bin::{run, Run};
use crate::common::{csv, exec_all, on_every_backend, Backend, TestDb};
use crate::scenario::{self, Scenario};

/// A shard's whole server killed mid-run.
mod server_death;

/// Conversation id shift between scenarios (as the scenarios suite loads them together).
const OFFSET: i64 = 1000;

/// (conversation, user) -> (last_read_id, source).
type Watermarks = BTreeMap<(i64, String), (i64, Option<String>)>;

/// The per_member scenarios without options, each with its conversation offset.
fn per_member_scenarios() -> Vec<(Scenario, i64)> {
    scenario::load_all()
        .unwrap()
        .into_iter()
        .filter(|s| {
            !s.is_per_message() && s.options.cap.is_none() && !s.options.own_message_lower_bound
        })
        .enumerate()
        .map(|(i, s)| (s, (i as i64 + 1) * OFFSET))
        .collect()
}

/// `n` fresh databases for `label`: on the extra servers of the `TIDEMARK_TEST_SHARD_*_URLS`
/// variable when it is set (round robin), else on the backend's test server.
async fn databases(backend: Backend, label: &str, n: usize) -> Option<Vec<TestDb>> {
    let var = match backend {
        Backend::Postgres => "TIDEMARK_TEST_SHARD_POSTGRES_URLS",
        Backend::Mysql => "TIDEMARK_TEST_SHARD_MYSQL_URLS",
        Backend::Sqlite => "",
    };
    let servers: Vec<String> = std::env::var(var)
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let mut dbs = Vec::new();
    for i in 0..n {
        let db = match servers.get(i % servers.len().max(1)) {
            Some(admin) => TestDb::create_at(backend, &format!("{label}{i}"), admin).await,
            None => TestDb::create(backend, &format!("{label}{i}")).await,
        };
        dbs.push(db?);
    }
    Some(dbs)
}

/// Loads the scenarios `which` (indexes into `all`) into `db`: schema, rows, expand, then the
/// application's existing watermarks.
async fn load(db: &TestDb, dir: &Path, all: &[(Scenario, i64)], which: &[usize]) {
    let mut conn = db.connect().await;
    exec_all(&mut conn, &scenario::schema_sql()).await;
    for &i in which {
        exec_all(&mut conn, &scenario::data_sql(&all[i].0, all[i].1)).await;
    }
    run(
        dir,
        &["expand", "--database", &db.url, "--mapping", "m.toml"],
    )
    .expect_code(0);
    for &i in which {
        let (s, offset) = &all[i];
        let sql = scenario::existing_watermarks_sql(s, *offset, scenario::WATERMARK_TABLE);
        exec_all(&mut conn, &sql).await;
    }
    let _ = conn.close().await;
}

/// Every watermark row of `db`.
async fn watermarks(db: &TestDb) -> Watermarks {
    let mut conn = db.connect().await;
    let sql = format!(
        "SELECT conversation_id, user_id, last_read_id, source FROM {}",
        scenario::WATERMARK_TABLE
    );
    let rows = sqlx::query(&sql).fetch_all(&mut conn).await.unwrap();
    let _ = conn.close().await;
    rows.iter()
        .map(|r| {
            let conv: i64 = r.try_get(0).unwrap();
            let user = tidemark::values::text(r, 1).unwrap().unwrap();
            let id: i64 = r.try_get(2).unwrap();
            ((conv, user), (id, tidemark::values::text(r, 3).unwrap()))
        })
        .collect()
}

/// The watermarks of several databases together (their conversations are disjoint).
async fn union(dbs: &[TestDb]) -> Watermarks {
    let mut all = Watermarks::new();
    for db in dbs {
        let mine = watermarks(db).await;
        let before = all.len();
        let n = mine.len();
        all.extend(mine);
        assert_eq!(all.len(), before + n, "two shards hold the same member");
    }
    all
}

/// `args` followed by `--database URL` for each database.
fn with_databases<'a>(args: &[&'a str], dbs: &'a [TestDb]) -> Vec<&'a str> {
    let mut v = args.to_vec();
    for db in dbs {
        v.extend(["--database", db.url.as_str()]);
    }
    v
}

/// The name the command line gives each of `dbs` (their database names: distinct here).
fn shard_names(dbs: &[TestDb]) -> Vec<String> {
    dbs.iter().map(|db| db.name.clone()).collect()
}

/// Every watermark the scenarios expect is in `wms`, with its source.
#[track_caller]
fn expected_watermarks_in(all: &[(Scenario, i64)], wms: &Watermarks) {
    for (s, offset) in all {
        for w in &s.expected.watermarks {
            let key = (w.conv + offset, w.user.clone());
            assert_eq!(
                wms.get(&key),
                Some(&(w.last_read_id, Some(w.source.clone()))),
                "{}: watermark {key:?}",
                s.id
            );
        }
    }
}

/// The scenarios' expected report rows, as the report writes them (conversation, user,
/// stored, recomputed, drift, class), sorted.
fn expected_rows(all: &[(Scenario, i64)]) -> Vec<Vec<String>> {
    let cell = |v: Option<i64>| v.map(|v| v.to_string()).unwrap_or_default();
    let mut rows: Vec<Vec<String>> = all
        .iter()
        .flat_map(|(s, offset)| {
            s.expected.audit.iter().map(move |r| {
                vec![
                    (r.conv + offset).to_string(),
                    r.user.clone().unwrap_or_default(),
                    cell(r.stored),
                    r.recomputed.to_string(),
                    cell(r.drift),
                    r.class.clone(),
                ]
            })
        })
        .collect();
    rows.sort();
    rows
}

/// The shards' run against one database holding the same data (see the file's comment).
async fn same_as_one_database(backend: Backend) {
    let n = match backend {
        Backend::Postgres => 3,
        _ => 2,
    };
    let Some(one) = databases(backend, "shards_one", 1).await else {
        return;
    };
    let Some(shards) = databases(backend, "shards_split", n).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let all = per_member_scenarios();
    std::fs::write(d.join("m.toml"), all[0].0.mapping_toml()).unwrap();
    let everything: Vec<usize> = (0..all.len()).collect();
    load(&one[0], d, &all, &everything).await;
    // Scenario i (its conversations) on shard i mod n.
    let shard_of = |conv: i64| ((conv / OFFSET - 1) as usize) % n;
    for (k, db) in shards.iter().enumerate() {
        let mine: Vec<usize> = everything.iter().copied().filter(|i| i % n == k).collect();
        load(db, d, &all, &mine).await;
    }
    let common = ["--mapping", "m.toml", "--quiet", "--batch-size", "2"];
    let single = |stage: &str, extra: &[&str]| {
        let mut args = vec![stage, "--database", &one[0].url];
        args.extend(common);
        args.extend(extra);
        run(d, &args)
    };
    single("backfill", &[]).expect_code(0);
    let mut args = vec!["backfill"];
    args.extend(common);
    let out = run(d, &with_databases(&args, &shards));
    out.expect_code(0);
    for name in shard_names(&shards) {
        assert!(
            out.stdout.contains(&format!("== shard {name} (")),
            "{}",
            out.stdout
        );
    }

    let one_wms = watermarks(&one[0]).await;
    assert_eq!(union(&shards).await, one_wms, "the shards' watermarks");
    expected_watermarks_in(&all, &one_wms);

    single("audit", &["--report", "one.csv"]).expect_code(1);
    let mut args = vec!["audit", "--report", "shards.csv"];
    args.extend(common);
    let out = run(d, &with_databases(&args, &shards));
    out.expect_code(1);
    let one_report = csv::try_read(&d.join("one.csv")).unwrap();
    let combined = csv::try_read(&d.join("shards.csv")).unwrap();
    let mut want_columns = vec!["shard".to_string()];
    want_columns.extend(one_report.columns.clone());
    assert_eq!(combined.columns, want_columns);
    let names = shard_names(&shards);
    let mut rows: Vec<Vec<String>> = Vec::new();
    for row in &combined.rows {
        let conv: i64 = row[1].parse().unwrap();
        assert_eq!(row[0], names[shard_of(conv)], "the shard of {row:?}");
        rows.push(row[1..].to_vec());
    }
    let mut one_rows = one_report.rows.clone();
    rows.sort();
    one_rows.sort();
    assert_eq!(rows, one_rows, "the combined report's rows");
    let six: Vec<Vec<String>> = one_rows.iter().map(|r| r[..6].to_vec()).collect();
    assert_eq!(six, expected_rows(&all), "the scenarios' expected rows");
    // Each shard's own report beside the combined one, and the totals.
    for name in &names {
        assert!(
            d.join(format!("shards.{name}.csv")).exists(),
            "{name}'s report"
        );
    }
    let total = format!("drifting rows {}", one_rows.len());
    assert!(out.stdout.contains(&total), "{total} in\n{}", out.stdout);
    for db in one.into_iter().chain(shards) {
        db.cleanup().await;
    }
}

on_every_backend!(same_as_one_database);

/// Kills every session of the database `name` on `admin`'s server but the caller's: the
/// number killed.
async fn kill_sessions(backend: Backend, admin: &mut AnyConnection, name: &str) -> usize {
    match backend {
        Backend::Postgres => sqlx::query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = $1 AND pid <> pg_backend_pid()",
        )
        .bind(name)
        .fetch_all(&mut *admin)
        .await
        .unwrap()
        .len(),
        _ => {
            let ids: Vec<i64> = sqlx::query(
                "SELECT CAST(id AS SIGNED) FROM information_schema.processlist \
                 WHERE db = ? AND id <> CONNECTION_ID()",
            )
            .bind(name)
            .fetch_all(&mut *admin)
            .await
            .unwrap()
            .iter()
            .map(|r| r.try_get(0).unwrap())
            .collect();
            for id in &ids {
                let _ = sqlx::raw_sql(&format!("KILL {id}"))
                    .execute(&mut *admin)
                    .await;
            }
            ids.len()
        }
    }
}

/// The admin URL of the server holding `db` (its URL with the server's admin database).
fn admin_of(db: &TestDb) -> String {
    let dsn = tidemark::db::Dsn::parse(&db.url).unwrap();
    let admin = match db.backend {
        Backend::Postgres => "postgres",
        _ => "mysql",
    };
    dsn.with_database(admin).unwrap().expose().to_string()
}

/// A slow backfill over several shards: batches of one conversation, a pause after each (the
/// run lasts seconds); its first four arguments are the plain backfill.
const SLOW_BACKFILL: [&str; 10] = [
    "backfill",
    "--mapping",
    "m.toml",
    "--quiet",
    "--batch-size",
    "1",
    "--chunk-time",
    "0s",
    "--pause-between-batches",
    "400ms",
];

/// The per_member scenarios loaded whole into `one` and split over two `shards` (scenario i on
/// shard i mod 2), the mapping written to `d`, and `one` backfilled: (scenarios, one's
/// watermarks).
async fn load_split(
    d: &Path,
    one: &TestDb,
    shards: &[TestDb],
) -> (Vec<(Scenario, i64)>, Watermarks) {
    let all = per_member_scenarios();
    std::fs::write(d.join("m.toml"), all[0].0.mapping_toml()).unwrap();
    let everything: Vec<usize> = (0..all.len()).collect();
    load(one, d, &all, &everything).await;
    for (k, db) in shards.iter().enumerate() {
        let mine: Vec<usize> = everything.iter().copied().filter(|i| i % 2 == k).collect();
        load(db, d, &all, &mine).await;
    }
    let single = [
        "backfill",
        "--database",
        &one.url,
        "--mapping",
        "m.toml",
        "--quiet",
    ];
    run(d, &single).expect_code(0);
    let want = watermarks(one).await;
    (all, want)
}

/// [`SLOW_BACKFILL`] over `shards`, started in `d`.
fn spawn_slow_backfill(d: &Path, shards: &[TestDb]) -> std::process::Child {
    crate::common::bin::command()
        .args(with_databases(&SLOW_BACKFILL, shards))
        .current_dir(d)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// How many watermarks of `wms` the backfill wrote (not the application's).
fn backfilled(wms: &Watermarks) -> usize {
    wms.values()
        .filter(|(_, source)| source.as_deref() != Some("application"))
        .count()
}

/// After a run that stopped on `shards[1]` with exit 3: the first shard holds its complete
/// watermarks of `want`, the second a part; the plain backfill again finishes it and the shards
/// equal `want`, the scenarios' expectations included.
async fn the_rerun_finishes(
    d: &Path,
    shards: &[TestDb],
    out: &Run,
    all: &[(Scenario, i64)],
    want: &Watermarks,
) {
    out.expect_code(3);
    let name = &shards[1].name;
    assert!(
        out.stderr.contains(&format!("shard {name}: error")),
        "{}",
        out.stderr
    );
    let done = watermarks(&shards[0]).await;
    assert!(!done.is_empty() && done.iter().all(|(k, v)| want.get(k) == Some(v)));
    let part = watermarks(&shards[1]).await;
    let part_done = part
        .iter()
        .filter(|(k, v)| want.get(*k) == Some(*v))
        .count();
    let victims_want = want.len() - done.len();
    assert!(
        part_done < victims_want,
        "the stopped shard finished before it stopped ({part_done} of {victims_want})"
    );
    run(d, &with_databases(&SLOW_BACKFILL[..4], shards)).expect_code(0);
    assert_eq!(&union(shards).await, want, "after the rerun");
    expected_watermarks_in(all, want);
}

/// A shard killed mid-backfill (see the file's comment).
async fn a_killed_shard_resumes(backend: Backend) {
    let Some(one) = databases(backend, "shards_kill_one", 1).await else {
        return;
    };
    let Some(shards) = databases(backend, "shards_kill", 2).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (all, want) = load_split(d, &one[0], &shards).await;
    let child = spawn_slow_backfill(d, &shards);
    // Once the second shard has written a watermark of the backfill, kill its sessions.
    let victim = &shards[1];
    let mut admin = crate::common::connect(&admin_of(victim)).await;
    let mut killed = 0;
    for _ in 0..200 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        if backfilled(&watermarks(victim).await) > 0 {
            killed = kill_sessions(backend, &mut admin, &victim.name).await;
            break;
        }
    }
    let _ = admin.close().await;
    assert!(killed > 0, "no session of {} to kill", victim.name);
    let out: Run = child.wait_with_output().unwrap().into();
    the_rerun_finishes(d, &shards, &out, &all, &want).await;
    for db in one.into_iter().chain(shards) {
        db.cleanup().await;
    }
}

on_every_backend!(servers: a_killed_shard_resumes);

/// Whether the counter column is still there.
async fn counter_exists(db: &TestDb) -> bool {
    let mut conn = db.connect().await;
    let there = sqlx::query("SELECT unread_count FROM unread_counters")
        .fetch_all(&mut conn)
        .await
        .is_ok();
    let _ = conn.close().await;
    there
}

/// The contract gate across shards (see the file's comment).
async fn the_gate_opens_on_every_shard_or_none(backend: Backend) {
    let Some(shards) = databases(backend, "shards_gate", 2).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let clean = scenario::load_all()
        .unwrap()
        .into_iter()
        .find(|s| s.id == "S3a-multi-device-receipts")
        .unwrap();
    std::fs::write(d.join("m.toml"), clean.mapping_toml()).unwrap();
    let all = vec![(clean.clone(), 0), (clean, OFFSET)];
    for (k, db) in shards.iter().enumerate() {
        load(db, d, &all, &[k]).await;
    }
    // The shards named in a file this time, a password-like secret in a comment aside.
    let mut file = String::from("# name url\n");
    for (k, db) in shards.iter().enumerate() {
        file.push_str(&format!("s{k} {}\n", db.url));
    }
    std::fs::write(d.join("shards.txt"), file).unwrap();
    let stage = |args: &[&str]| {
        let mut v = args.to_vec();
        v.extend([
            "--mapping",
            "m.toml",
            "--quiet",
            "--databases",
            "shards.txt",
        ]);
        run(d, &v)
    };
    stage(&["backfill"]).expect_code(0);
    // The second shard's counters drift: its audit fails, the first's passes.
    let mut conn = shards[1].connect().await;
    let bump = "UPDATE unread_counters SET unread_count = unread_count + 1".to_string();
    exec_all(&mut conn, &[bump]).await;
    let out = stage(&["audit", "--report", "r.csv"]);
    out.expect_code(1);
    let out = stage(&["contract", "--execute"]);
    out.expect_code(1);
    assert!(
        out.stdout.contains("the gate across the shards is closed"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("not open on s1;"), "{}", out.stdout);
    assert!(counter_exists(&shards[0]).await && counter_exists(&shards[1]).await);
    // Repaired, audited: every gate open.
    let repair = "UPDATE unread_counters SET unread_count = unread_count - 1".to_string();
    exec_all(&mut conn, &[repair]).await;
    let out = stage(&["audit", "--report", "r.csv", "--format", "json"]);
    out.expect_code(0);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(json["exit_code"], 0);
    assert_eq!(json["totals"]["drifting_rows"], 0);
    let names: Vec<&str> = json["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["s0", "s1"]);
    for shard in json["shards"].as_array().unwrap() {
        assert_eq!(shard["output"]["passed"], true, "{shard}");
        assert!(
            shard["output"]["rows_checked"].as_u64().unwrap() > 0,
            "{shard}"
        );
    }
    stage(&["contract"]).expect_code(0);
    if backend == Backend::Sqlite {
        // No second session can hold a SQLite table without blocking every reader too.
        drop(conn);
        stage(&["contract", "--execute"]).expect_code(0);
    } else {
        drop_fails_on_one_shard(backend, conn, &shards, &stage).await;
    }
    for db in &shards {
        assert!(!counter_exists(db).await, "{}'s drop", db.name);
    }
    for db in shards {
        db.cleanup().await;
    }
}

on_every_backend!(the_gate_opens_on_every_shard_or_none);

/// The second shard's table held by a session of `conn`: its drop waits, gives up and fails
/// (exit 3), the first's is done; the same contract again (the lock released) resumes it.
async fn drop_fails_on_one_shard(
    backend: Backend,
    mut conn: AnyConnection,
    shards: &[TestDb],
    stage: &dyn Fn(&[&str]) -> Run,
) {
    let hold: &[&str] = match backend {
        Backend::Postgres => &["BEGIN", "LOCK TABLE unread_counters IN ACCESS SHARE MODE"],
        _ => &["START TRANSACTION", "SELECT COUNT(*) FROM unread_counters"],
    };
    for sql in hold {
        sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
    }
    let out = stage(&[
        "contract",
        "--execute",
        "--lock-timeout",
        "1s",
        "--lock-retries",
        "0",
    ]);
    out.expect_code(3);
    assert!(
        out.stdout.contains("the contract failed on"),
        "{}",
        out.stdout
    );
    sqlx::raw_sql("ROLLBACK").execute(&mut conn).await.unwrap();
    let _ = conn.close().await;
    assert!(!counter_exists(&shards[0]).await, "the first shard's drop");
    assert!(
        counter_exists(&shards[1]).await,
        "the failed shard's column"
    );
    // Resumed: the first has nothing left to drop, the second drops.
    stage(&["contract", "--execute"]).expect_code(0);
}

/// A bad line of `--databases FILE` exits 2 naming the file and line, never the URL; so do
/// `--databases` beside `--database`, and several databases for a command that takes one.
#[test]
fn a_bad_databases_file_is_named_without_its_urls() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("m.toml"),
        scenario::mapping_toml("per_member", false),
    )
    .unwrap();
    let secret = "postgres://app:Sup3rSecret@127.0.0.1:1/chat";
    std::fs::write(
        d.join("bad.txt"),
        format!("# shards\neu {secret}\n{secret}\n"),
    )
    .unwrap();
    let out = run(
        d,
        &["audit", "--databases", "bad.txt", "--mapping", "m.toml"],
    );
    out.expect_code(2);
    assert!(out.stderr.contains("bad.txt:3"), "{}", out.stderr);
    assert!(!out.stderr.contains("Sup3rSecret") && !out.stdout.contains("Sup3rSecret"));
    std::fs::write(d.join("twice.txt"), format!("a {secret}\na sqlite:x.db\n")).unwrap();
    let out = run(
        d,
        &[
            "backfill",
            "--databases",
            "twice.txt",
            "--mapping",
            "m.toml",
        ],
    );
    out.expect_code(2);
    assert!(
        out.stderr.contains("twice.txt:2") && out.stderr.contains("twice"),
        "{}",
        out.stderr
    );
    let both = [
        "status",
        "--databases",
        "twice.txt",
        "--database",
        "sqlite:y.db",
    ];
    let out = run(d, &both);
    out.expect_code(2);
    assert!(
        out.stderr
            .contains("cannot be used together with --database"),
        "{}",
        out.stderr
    );
    let plan = [
        "plan",
        "--database",
        "sqlite:a.db",
        "--database",
        "sqlite:b.db",
        "--mapping",
        "m.toml",
    ];
    let out = run(d, &plan);
    out.expect_code(2);
    assert!(out.stderr.contains("2 databases given"), "{}", out.stderr);
}
