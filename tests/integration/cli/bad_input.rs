//! Bad input exits 2 with a message naming what is wrong: mapping files (unknown keys, identifiers, syntax, missing files and columns), missing or conflicting database URLs, bad usage, negative numbers.

use super::*;

on_every_backend!(servers: mapping_column_missing_in_database_exits_2_servers);

// ---------------------------------------------------------------------------------------------
// 4. bad input -> 2

/// Checks a run exited 2 with a `file:line:col:` location for `file` and every `needles` in
/// stderr.
#[track_caller]
fn assert_mapping_error(run: &Run, file: &str, needles: &[&str]) {
    run.expect_code(2);
    let prefix = format!("{file}:");
    let at = run
        .stderr
        .find(&prefix)
        .unwrap_or_else(|| panic!("stderr does not name {file}:\n{}", run.stderr));
    let rest = &run.stderr[at + prefix.len()..];
    let mut parts = rest.splitn(3, ':');
    let line = parts.next().unwrap_or_default();
    let col = parts.next().unwrap_or_default();
    assert!(
        line.parse::<u32>().is_ok() && col.parse::<u32>().is_ok(),
        "stderr has no {file}:line:col: location:\n{}",
        run.stderr
    );
    for n in needles {
        assert!(
            run.stderr.contains(n),
            "stderr lacks {n:?}:\n{}",
            run.stderr
        );
    }
}

#[tokio::test]
async fn mapping_with_unknown_key_exits_2_naming_key() {
    let dir = tempdir();
    let url = sqlite_scenario_db(dir.path(), "m.db", Some(CLEAN_SCENARIO)).await;
    write_mapping(
        dir.path(),
        "bad.toml",
        &mapping_with(
            "sender = \"sender_id\"\n",
            "sender = \"sender_id\"\nsendr = \"x\"\n",
        ),
    );
    let run = tidemark(
        dir.path(),
        &[
            "audit",
            "--database",
            &url,
            "--mapping",
            "bad.toml",
            "--report",
            "x.csv",
        ],
    );
    assert_mapping_error(&run, "bad.toml", &["sendr"]);
    assert!(!dir.path().join("x.csv").exists(), "no report on bad input");
    // Same for the stages that write.
    for cmd in ["expand", "backfill", "status"] {
        let run = tidemark(
            dir.path(),
            &[cmd, "--database", &url, "--mapping", "bad.toml"],
        );
        assert_mapping_error(&run, "bad.toml", &["sendr"]);
    }
}

#[tokio::test]
async fn mapping_with_invalid_identifier_exits_2_naming_key() {
    let dir = tempdir();
    let url = sqlite_scenario_db(dir.path(), "m.db", Some(CLEAN_SCENARIO)).await;
    write_mapping(
        dir.path(),
        "bad.toml",
        &mapping_with("conversation = \"conv_id\"", "conversation = \"conv id\""),
    );
    let run = tidemark(
        dir.path(),
        &[
            "audit",
            "--database",
            &url,
            "--mapping",
            "bad.toml",
            "--report",
            "x.csv",
        ],
    );
    // The first `conversation` key is in [messages], on line 4, value at column 16.
    assert_mapping_error(&run, "bad.toml", &["conversation", "bad.toml:4:16:"]);
}

#[tokio::test]
async fn mapping_toml_syntax_error_exits_2() {
    let dir = tempdir();
    let url = sqlite_scenario_db(dir.path(), "m.db", None).await;
    write_mapping(dir.path(), "bad.toml", "[messages]\ntable = \n");
    let run = tidemark(
        dir.path(),
        &["expand", "--database", &url, "--mapping", "bad.toml"],
    );
    assert_mapping_error(&run, "bad.toml", &["bad.toml:2:"]);
}

#[tokio::test]
async fn missing_mapping_file_exits_2() {
    let dir = tempdir();
    let url = sqlite_scenario_db(dir.path(), "m.db", None).await;
    let run = tidemark(
        dir.path(),
        &["audit", "--database", &url, "--mapping", "nowhere.toml"],
    );
    run.expect_code(2);
    assert!(run.stderr.contains("nowhere.toml"), "{}", run.stderr);
    // The default mapping file name, absent too.
    std::fs::remove_file(dir.path().join("tidemark.toml")).unwrap();
    let run = tidemark(dir.path(), &["status", "--database", &url]);
    run.expect_code(2);
    assert!(run.stderr.contains("tidemark.toml"), "{}", run.stderr);
}

/// Mapping values naming tables, columns or predicates the database does not have: (replace
/// this, with this line, the mapping key the error must name, its value).
const MISSING_COLUMNS: [(&str, &str, &str, &str); 6] = [
    (
        "sender = \"sender_id\"",
        "sender = \"nope\"",
        "messages.sender",
        "nope",
    ),
    (
        "column = \"unread_count\"",
        "column = \"nope_count\"",
        "counter.column",
        "nope_count",
    ),
    (
        "column = \"message_id\"",
        "column = \"nope_id\"",
        "evidence[1].column",
        "nope_id",
    ),
    (
        "table = \"read_receipts\"",
        "table = \"nope_receipts\"",
        "evidence[1].table",
        "nope_receipts",
    ),
    (
        "active = \"active = 1\"",
        "active = \"nope_flag = 1\"",
        "members.active",
        "nope_flag = 1",
    ),
    (
        "join_position = \"join_position\"",
        "join_position = \"nope_position\"",
        "members.join_position",
        "nope_position",
    ),
];

/// For each of [`MISSING_COLUMNS`]: after an expand with the good mapping, backfill and audit
/// with the broken one exit 2 naming the mapping key with its file:line:col and value
/// (`nocol.toml:12:10: members.active = "nope_flag = 1" does not match the database: …`), and
/// write no report. Mismatches are collected and reported together.
async fn missing_column_exits_2(dir: &Path, url: &str, label: &str) {
    write_mapping(
        dir,
        "good.toml",
        &scenario::mapping_toml("per_member", false),
    );
    tidemark(
        dir,
        &["expand", "--database", url, "--mapping", "good.toml"],
    )
    .expect_code(0);
    let mut failures = Vec::new();
    for (from, to, key, value) in MISSING_COLUMNS {
        let mapping = mapping_with(from, to);
        write_mapping(dir, "nocol.toml", &mapping);
        let want = format!(
            "{}: {key} = {value:?} does not match the database: ",
            crate::common::value_at("nocol.toml", &mapping, to)
        );
        for cmd in ["backfill", "audit"] {
            let run = tidemark(
                dir,
                &[
                    cmd,
                    "--database",
                    url,
                    "--mapping",
                    "nocol.toml",
                    "--report",
                    "x.csv",
                    "--quiet",
                ]
                .into_iter()
                .filter(|a| cmd == "audit" || !matches!(*a, "--report" | "x.csv"))
                .collect::<Vec<_>>(),
            );
            if run.code != Some(2) || !run.stderr.contains(&want) {
                failures.push(format!(
                    "{label}: `tidemark {cmd}` with {to}: exit {:?} (want 2 and {want:?})\n    stdout: {}\n    stderr: {}",
                    run.code,
                    run.stdout.lines().next().unwrap_or_default(),
                    run.stderr.trim()
                ));
            }
        }
        if dir.join("x.csv").exists() {
            failures.push(format!("{label}: audit with {to} wrote a report"));
            let _ = std::fs::remove_file(dir.join("x.csv"));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[tokio::test]
async fn mapping_column_missing_in_database_exits_2_sqlite() {
    let dir = tempdir();
    let url = sqlite_scenario_db(dir.path(), "m.db", Some(CLEAN_SCENARIO)).await;
    missing_column_exits_2(dir.path(), &url, "sqlite").await;
}

async fn mapping_column_missing_in_database_exits_2_servers(backend: Backend) {
    let Some(db) = TestDb::create(backend, "cli_nocol").await else {
        return;
    };
    let mut conn = db.connect().await;
    exec_all(&mut conn, &scenario::schema_sql()).await;
    exec_all(
        &mut conn,
        &scenario::data_sql(&find_scenario(CLEAN_SCENARIO), 0),
    )
    .await;
    conn.close().await.expect("closing");
    let dir = tempdir();
    missing_column_exits_2(dir.path(), &db.url, backend.name()).await;
    db.cleanup().await;
}

#[test]
fn no_database_exits_2() {
    let dir = tempdir();
    write_mapping(
        dir.path(),
        "tidemark.toml",
        &scenario::mapping_toml("per_member", false),
    );
    for cmd in ["expand", "backfill", "audit", "status"] {
        let run = tidemark(dir.path(), &[cmd]);
        run.expect_code(2);
        assert!(run.stderr.contains("DATABASE_URL"), "{cmd}: {}", run.stderr);
    }
    // An empty DATABASE_URL is no database either.
    let run = tidemark_env(dir.path(), &["status"], &[("DATABASE_URL", "")]);
    run.expect_code(2);
}

#[test]
fn unknown_url_scheme_exits_2_without_password() {
    let dir = tempdir();
    write_mapping(
        dir.path(),
        "tidemark.toml",
        &scenario::mapping_toml("per_member", false),
    );
    let run = tidemark(
        dir.path(),
        &[
            "audit",
            "--database",
            "oracle://scott:Tiger123@db.example:1521/chat",
        ],
    );
    run.expect_code(2);
    assert!(run.stderr.contains("oracle"), "{}", run.stderr);
    assert!(
        !run.stderr.contains("Tiger123"),
        "password leaked: {}",
        run.stderr
    );
    assert!(
        !run.stdout.contains("Tiger123"),
        "password leaked: {}",
        run.stdout
    );
}

#[test]
fn bad_usage_exits_2() {
    let dir = tempdir();
    let cases: [&[&str]; 5] = [
        &["audit", "--no-such-flag"],
        &["no-such-command"],
        &[],
        &["audit", "--format", "yaml"],
        &["audit", "--max-drift-ratio", "2"],
    ];
    for args in cases {
        let run = tidemark(dir.path(), args);
        assert_eq!(run.code, Some(2), "tidemark {args:?}: {}", run.stderr);
        assert!(
            !run.stderr.is_empty(),
            "tidemark {args:?}: nothing on stderr"
        );
    }
    // --help and --version are not errors.
    tidemark(dir.path(), &["--help"]).expect_code(0);
    tidemark(dir.path(), &["--version"]).expect_code(0);
}

// ---------------------------------------------------------------------------------------------
// Small items from a newcomer's trial (issue 10)

/// `DATABASE_URL` in the environment with `--database-file`: refused (exit 2) naming
/// DATABASE_URL, where clap's conflict check named `--database` (not on the command line at
/// all); with `--database` on the command line the message names `--database`. The file alone
/// (and `sql app`, which reads only the dialect) works.
#[tokio::test]
async fn database_file_conflict_names_where_the_other_url_came_from() {
    let dir = tempdir();
    let url = sqlite_scenario_db(dir.path(), "f.db", Some(CLEAN_SCENARIO)).await;
    std::fs::write(dir.path().join("url.txt"), format!("{url}\n")).unwrap();
    let file_args = ["--database-file", "url.txt"];
    for command in [&["status"][..], &["sql", "app"], &["inspect"]] {
        let mut args: Vec<&str> = command.to_vec();
        args.extend(file_args);
        let env = tidemark_env(dir.path(), &args, &[("DATABASE_URL", &url)]);
        env.expect_code(2);
        assert!(
            env.stderr.contains("DATABASE_URL"),
            "{args:?}: {}",
            env.stderr
        );
        assert!(!env.stderr.contains("'--database <URL>'"), "{}", env.stderr);
        let mut both = args.clone();
        both.extend(["--database", &url]);
        let flag = tidemark(dir.path(), &both);
        flag.expect_code(2);
        assert!(flag.stderr.contains("--database"), "{}", flag.stderr);
        assert!(!flag.stderr.contains("DATABASE_URL"), "{}", flag.stderr);
    }
    tidemark(dir.path(), &["status", "--database-file", "url.txt"]).expect_code(0);
    let sql = tidemark(dir.path(), &["sql", "app", "--database-file", "url.txt"]);
    sql.expect_code(0);
    assert!(sql.stdout.contains("sqlite dialect"), "{}", sql.stdout);
}

/// A negative (or zero where 1 is the least, as `--cap` and `--max-rows-per-second`) number for a numeric option: exit 2 with a message
/// naming the option and the allowed range, not clap's "unexpected argument '-1'".
#[test]
fn negative_numbers_name_the_option_and_range() {
    let dir = tempdir();
    let cases: &[(&[&str], &str, &str)] = &[
        (&["audit", "--cap", "-1"], "--cap", "1 or more"),
        // `--cap 0` would compare every count as "0+": refused, not read as a cap.
        (&["audit", "--cap", "0"], "--cap", "1 or more"),
        (
            &["audit", "--batch-size", "-5"],
            "--batch-size",
            "1 or more",
        ),
        (&["audit", "--batch-size", "0"], "--batch-size", "1 or more"),
        (
            &["audit", "--max-drift-rows", "-2"],
            "--max-drift-rows",
            "0 or more",
        ),
        (
            &["audit", "--max-abs-drift", "-2"],
            "--max-abs-drift",
            "0 or more",
        ),
        (
            &["backfill", "--batch-size", "-5"],
            "--batch-size",
            "1 or more",
        ),
        (&["backfill", "--retries", "-1"], "--retries", "0 or more"),
        (
            &["backfill", "--max-rows-per-second", "-3"],
            "--max-rows-per-second",
            "above 0",
        ),
        // 0 is refused, not silently read as "no throttle".
        (
            &["backfill", "--max-rows-per-second", "0"],
            "--max-rows-per-second",
            "above 0",
        ),
        (
            &["contract", "--batch-size", "-1"],
            "--batch-size",
            "1 or more",
        ),
        (
            &["contract", "--lock-retries", "-1"],
            "--lock-retries",
            "0 or more",
        ),
        (
            &["contract", "--min-clean-audits", "-1"],
            "--min-clean-audits",
            "1 or more",
        ),
        (&["demo", "--scale", "-3"], "--scale", "1 or more"),
        (&["sql", "app", "--page", "-1"], "--page", "from 1 to 1000"),
        (
            &["sql", "app", "--page", "1001"],
            "--page",
            "from 1 to 1000",
        ),
    ];
    for (args, option, range) in cases {
        let run = tidemark(dir.path(), args);
        assert_eq!(run.code, Some(2), "tidemark {args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains(&format!("'{option} <")) && run.stderr.contains(range),
            "tidemark {args:?}: {}",
            run.stderr
        );
        assert!(
            !run.stderr.contains("unexpected argument"),
            "{}",
            run.stderr
        );
    }
}
