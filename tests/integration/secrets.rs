//! Secrets (issue 13): with `--database-file PATH` the URL, and so the password, never shows in
//! `ps` (the process's argv and environment), and nothing tidemark writes holds the password:
//! not its standard output or error, the CSV report, the metrics file, the ledger rows, the
//! drift rows table, `plan`'s statements, the backfill's and the contract's dry runs, nor a
//! failing connection's message. On PostgreSQL and MariaDB, with a user the test creates with a
//! distinctive password and connects as over 127.0.0.1 (whatever the server's authentication
//! method is, the password is in the URL).

use std::path::Path;

use sqlx::Connection;
use tidemark::values::text;

use crate::common::bin::{command, run, Run};
use crate::common::{exec_all, on_every_backend, Backend, TestDb};
use crate::scenario;

/// The password: distinctive enough that finding it anywhere is a leak.
const PASSWORD: &str = "Zq7-quokka-PLINTH-4417";
/// A scenario with drifting rows (the report and the drift rows table are not empty).
const SCENARIO: &str = "S1b-duplicate-delivery-overcount";

on_every_backend!(servers: the_password_is_never_written);

/// The statements creating user `name` with every privilege on database `db`, and dropping it.
fn user_sql(backend: Backend, db: &str, name: &str) -> (Vec<String>, String) {
    match backend {
        Backend::Postgres => (
            vec![
                format!("DROP ROLE IF EXISTS \"{name}\""),
                format!("CREATE ROLE \"{name}\" LOGIN PASSWORD '{PASSWORD}'"),
                format!("GRANT ALL ON DATABASE \"{db}\" TO \"{name}\""),
                format!("GRANT ALL ON SCHEMA public TO \"{name}\""),
                format!("GRANT ALL ON ALL TABLES IN SCHEMA public TO \"{name}\""),
                format!("GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO \"{name}\""),
            ],
            format!("DROP OWNED BY \"{name}\"; DROP ROLE IF EXISTS \"{name}\""),
        ),
        _ => (
            vec![
                format!("DROP USER IF EXISTS '{name}'@'%'"),
                format!("CREATE USER '{name}'@'%' IDENTIFIED BY '{PASSWORD}'"),
                format!("GRANT ALL ON `{db}`.* TO '{name}'@'%'"),
            ],
            format!("DROP USER IF EXISTS '{name}'@'%'"),
        ),
    }
}

/// `url` with user `name`, the password, and host 127.0.0.1.
fn url_as(url: &str, name: &str) -> String {
    let mut u = url::Url::parse(url).unwrap();
    u.set_username(name).unwrap();
    u.set_password(Some(PASSWORD)).unwrap();
    u.set_host(Some("127.0.0.1")).unwrap();
    u.to_string()
}

/// Every row of every `tidemark_` table and of the watermark table, each column as text.
async fn tidemark_rows(conn: &mut sqlx::AnyConnection, backend: Backend, db: &str) -> String {
    let (schema, cast) = match backend {
        Backend::Postgres => ("'public'".to_string(), "TEXT"),
        _ => (format!("'{db}'"), "CHAR"),
    };
    let tables: Vec<String> = sqlx::query(&format!(
        "SELECT CAST(table_name AS {cast}) FROM information_schema.tables \
         WHERE table_schema = {schema} AND (table_name LIKE 'tidemark%' OR table_name = '{}')",
        scenario::WATERMARK_TABLE
    ))
    .fetch_all(&mut *conn)
    .await
    .unwrap()
    .iter()
    .map(|r| text(r, 0).unwrap().unwrap_or_default())
    .collect();
    assert!(tables.iter().any(|t| t == "tidemark_ledger"), "{tables:?}");
    let mut all = String::new();
    for t in tables {
        let cols: Vec<String> = sqlx::query(&format!(
            "SELECT CAST(column_name AS {cast}) FROM information_schema.columns \
             WHERE table_schema = {schema} AND table_name = '{t}'"
        ))
        .fetch_all(&mut *conn)
        .await
        .unwrap()
        .iter()
        .map(|r| text(r, 0).unwrap().unwrap_or_default())
        .collect();
        let q = |c: &str| match backend {
            Backend::Postgres => format!("\"{c}\""),
            _ => format!("`{c}`"),
        };
        let list: Vec<String> = cols
            .iter()
            .map(|c| format!("COALESCE(CAST({} AS {cast}), '')", q(c)))
            .collect();
        for row in sqlx::query(&format!("SELECT {} FROM {}", list.join(", "), q(&t)))
            .fetch_all(&mut *conn)
            .await
            .unwrap()
        {
            for i in 0..cols.len() {
                all.push_str(&text(&row, i).unwrap().unwrap_or_default());
                all.push('|');
            }
            all.push('\n');
        }
    }
    all
}

/// Runs `tidemark args… --database-file url.txt --mapping m.toml` in `dir`.
fn with_file(dir: &Path, args: &[&str]) -> Run {
    let mut all = args.to_vec();
    all.extend(["--database-file", "url.txt", "--mapping", "m.toml"]);
    run(dir, &all)
}

/// Adds what a command printed to `seen`, under a heading.
fn keep(seen: &mut String, what: &str, r: &Run) {
    seen.push_str(&format!("== {what}\n{}\n{}\n", r.stdout, r.stderr));
}

/// Part of `the_password_is_never_written`, in `d` with the user's `url`: commands whose
/// connection fails (exit 3) or whose database file is bad or missing (exit 2), what they
/// print kept in `seen`.
fn failing_urls(d: &Path, url: &str, seen: &mut String) {
    // Failing connections: no server on the port; a database that does not exist; a wrong
    // password for the user (the password shown is the wrong one: neither may appear).
    let mut bad = url::Url::parse(url).unwrap();
    bad.set_port(Some(1)).unwrap();
    let mut no_db = url::Url::parse(url).unwrap();
    no_db.set_path("/tm_no_such_database");
    for (what, bad_url) in [
        ("port 1", bad.to_string()),
        ("no database", no_db.to_string()),
    ] {
        std::fs::write(d.join("bad.txt"), &bad_url).unwrap();
        let r = run(
            d,
            &[
                "status",
                "--database-file",
                "bad.txt",
                "--mapping",
                "m.toml",
            ],
        );
        assert_eq!(r.code, Some(3), "{what}: {r:?}");
        keep(seen, what, &r);
        let r = run(d, &["audit", "--database", &bad_url, "--mapping", "m.toml"]);
        assert_eq!(r.code, Some(3), "{what} (--database): {r:?}");
        keep(seen, what, &r);
    }
    // A file whose URL has an unknown scheme, and a missing file: exit 2, content not shown.
    std::fs::write(d.join("odd.txt"), url.replacen("://", "x://", 1)).unwrap();
    std::fs::write(d.join("garbage.txt"), format!("not a url {PASSWORD}\n")).unwrap();
    for file in ["odd.txt", "garbage.txt", "missing.txt"] {
        let r = run(
            d,
            &["status", "--database-file", file, "--mapping", "m.toml"],
        );
        r.expect_code(2);
        assert!(r.stderr.contains(file) || file != "missing.txt", "{r:?}");
        keep(seen, file, &r);
    }
}

async fn the_password_is_never_written(backend: Backend) {
    let Some(db) = TestDb::create(backend, "secrets").await else {
        return;
    };
    let mut admin = db.connect().await;
    let s = scenario::load_one(&mut admin, SCENARIO).await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("m.toml"), s.mapping_toml()).unwrap();
    // expand as the admin: the user then gets every privilege on what it created.
    run(d, &["expand", "--database", &db.url, "--mapping", "m.toml"]).expect_code(0);
    let user = format!("tm_secret_{}", std::process::id());
    let (create, drop) = user_sql(backend, &db.name, &user);
    exec_all(&mut admin, &create).await;
    let url = url_as(&db.url, &user);
    std::fs::write(d.join("url.txt"), format!("{url}\n")).unwrap();

    let mut seen = String::new();

    // `ps`: a backfill held by its pause file shows neither the URL nor the password in its
    // argv or environment.
    std::fs::write(d.join("pause"), "").unwrap();
    let child = command()
        .args([
            "backfill",
            "--database-file",
            "url.txt",
            "--mapping",
            "m.toml",
            "--pause-file",
            "pause",
        ])
        .current_dir(d)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    for part in ["cmdline", "environ"] {
        let bytes = std::fs::read(format!("/proc/{}/{part}", child.id())).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains(PASSWORD),
            "/proc/…/{part} holds the password"
        );
    }
    std::fs::remove_file(d.join("pause")).unwrap();
    let bf: Run = child.wait_with_output().unwrap().into();
    bf.expect_code(0);
    keep(&mut seen, "backfill", &bf);

    let r = with_file(d, &["backfill", "--dry-run", "--restart"]);
    r.expect_code(0);
    keep(&mut seen, "backfill --dry-run", &r);
    let r = with_file(
        d,
        &[
            "audit",
            "--report",
            "report.csv",
            "--metrics-file",
            "metrics.prom",
            "--store-rows",
            "--quiet",
        ],
    );
    r.expect_code(1); // the scenario drifts
    keep(&mut seen, "audit", &r);
    let r = with_file(
        d,
        &["audit", "--format", "json", "--report", "r2.csv", "--quiet"],
    );
    keep(&mut seen, "audit --format json", &r);
    for cmd in ["status", "plan", "contract"] {
        let r = with_file(d, &[cmd]);
        assert!(matches!(r.code, Some(0 | 1)), "{cmd}: {r:?}");
        keep(&mut seen, cmd, &r);
    }
    assert!(
        seen.contains("DROP") || seen.contains("drop"),
        "no dry-run DDL seen:\n{seen}"
    );

    failing_urls(d, &url, &mut seen);

    for file in ["report.csv", "r2.csv", "metrics.prom"] {
        let text = std::fs::read_to_string(d.join(file)).unwrap();
        assert!(!text.is_empty(), "{file} is empty");
        seen.push_str(&format!("== {file}\n{text}\n"));
    }
    let rows = tidemark_rows(&mut admin, backend, &db.name).await;
    assert!(
        rows.contains("overcount") || rows.contains("report"),
        "{rows}"
    );
    seen.push_str(&rows);
    assert!(
        !seen.contains(PASSWORD),
        "the password leaked:\n{}",
        seen.lines()
            .filter(|l| l.contains(PASSWORD) || l.starts_with("=="))
            .collect::<Vec<_>>()
            .join("\n")
    );

    for sql in drop.split("; ") {
        let _ = sqlx::query(sql).execute(&mut admin).await;
    }
    let _ = admin.close().await;
    db.cleanup().await;
}

on_every_backend!(servers: no_password_shows_whatever_its_characters);

/// The characters that mean something in a URL (RFC 3986's gen-delims and sub-delims, `%`,
/// and those a URL must encode: space, `"`, `<`, `>`, `\`, `^`, `` ` ``, `{`, `|`, `}`).
const URL_SPECIAL: &str = ":/?#[]@!$&'()*+,;=% \"<>\\^`{|}";

/// Passwords from the issue, then generated ones: URL-special characters around a core of
/// eight letters and digits that nothing else prints (what the test looks for in the output).
fn passwords(cases: u32) -> Vec<(String, String)> {
    use proptest::prelude::*;
    use proptest::strategy::ValueTree;
    let special: Vec<char> = URL_SPECIAL.chars().collect();
    let specials = proptest::collection::vec(proptest::sample::select(special), 0..5);
    let strategy = (
        specials.clone(),
        "[A-Za-z0-9]{7}",
        proptest::collection::vec(
            proptest::sample::select(URL_SPECIAL.chars().collect::<Vec<_>>()),
            1..5,
        ),
        "[A-Za-z0-9%@#?/]{0,4}",
    )
        .prop_map(|(a, core, b, tail)| {
            let core = format!("K{core}");
            let pw = format!(
                "{}{core}{}{tail}",
                a.into_iter().collect::<String>(),
                b.into_iter().collect::<String>()
            );
            (pw, core)
        });
    let mut out: Vec<(String, String)> = [
        ("2024#Spring", "Spring"),
        ("#S3cretPW", "S3cretPW"),
        ("12?Spring", "Spring"),
        ("p@ss/w%rd Qx7Zpw", "Qx7Zpw"),
    ]
    .iter()
    .map(|(p, c)| (p.to_string(), c.to_string()))
    .collect();
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    for _ in 0..cases {
        out.push(strategy.new_tree(&mut runner).unwrap().current());
    }
    out
}

/// `text` with every character but letters and digits percent-encoded.
fn encoded(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The statement giving user `name` the password `pw`.
fn set_password(backend: Backend, name: &str, pw: &str) -> String {
    match backend {
        Backend::Postgres => format!(
            "ALTER ROLE \"{name}\" PASSWORD '{}'",
            pw.replace('\'', "''")
        ),
        _ => format!(
            "ALTER USER '{name}'@'%' IDENTIFIED BY '{}'",
            pw.replace('\\', "\\\\").replace('\'', "''")
        ),
    }
}

/// Panics when the standard output or error of `r` holds the password's `core` (or the whole
/// password).
#[track_caller]
fn never_shows(what: &str, r: &Run, pw: &str, core: &str, form: &str, port: u16) {
    for text in [&r.stdout, &r.stderr] {
        assert!(
            !text.contains(core) && !text.contains(pw),
            "{what} printed the password {pw:?} (written {form}, port {port}):\n{text}"
        );
    }
}

/// Issue 25, row 9: a password with any URL-special character (`#`, `?`, `@`, `/`, `%`,
/// spaces…), written as is or percent-encoded, in `--database` or in `--database-file`, never
/// shows in what any command that prints a URL prints: connected (every command), refused (no
/// server on the port), or with the password percent-encoded. Written as is, the URL still
/// connects (its user info runs to the last `@`), unless a `%` followed by two hex digits makes
/// it another password (an escape, as in any URL).
async fn no_password_shows_whatever_its_characters(backend: Backend) {
    let Some(db) = TestDb::create(backend, "secrets_chars").await else {
        return;
    };
    let mut admin = db.connect().await;
    let s = scenario::load_one(&mut admin, SCENARIO).await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("m.toml"), s.mapping_toml()).unwrap();
    run(d, &["expand", "--database", &db.url, "--mapping", "m.toml"]).expect_code(0);
    let user = format!("tm_chars_{}", std::process::id());
    let (create, drop) = user_sql(backend, &db.name, &user);
    exec_all(&mut admin, &create).await;
    let base = url::Url::parse(&url_as(&db.url, &user)).unwrap();
    let scheme = base.scheme().to_string();
    let port = base.port().unwrap();
    let path = base.path().to_string();

    let cases = std::env::var("TIDEMARK_SECRETS_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    // (command, whether it connects)
    let commands: [(&[&str], bool); 9] = [
        (&["status"], true),
        (&["plan"], true),
        (&["contract"], true),
        (&["expand", "--dry-run"], true),
        (&["backfill", "--dry-run", "--restart"], true),
        (&["audit", "--report", "r.csv", "--no-ledger", "-q"], true),
        (&["status", "--format", "json"], true),
        (&["plan", "--format", "json"], true),
        (&["sql", "app"], false),
    ];
    for (pw, core) in passwords(cases) {
        exec_all(&mut admin, &[set_password(backend, &user, &pw)]).await;
        let ambiguous = pw
            .as_bytes()
            .windows(3)
            .any(|w| w[0] == b'%' && w[1].is_ascii_hexdigit() && w[2].is_ascii_hexdigit());
        for (form, written) in [("as is", pw.clone()), ("encoded", encoded(&pw))] {
            for port in [port, 1] {
                let url = format!("{scheme}://{user}:{written}@127.0.0.1:{port}{path}");
                std::fs::write(d.join("url.txt"), format!("{url}\n")).unwrap();
                for (i, (args, connects)) in commands.iter().enumerate() {
                    let mut all = args.to_vec();
                    // Half through the file, half on the command line.
                    if i % 2 == 0 {
                        all.extend(["--database-file", "url.txt"]);
                    } else {
                        all.extend(["--database", &url]);
                    }
                    all.extend(["--mapping", "m.toml"]);
                    let r = run(d, &all);
                    never_shows(&format!("{args:?}"), &r, &pw, &core, form, port);
                    let reached = port != 1 && !(form == "as is" && ambiguous);
                    if *connects && reached {
                        assert!(
                            matches!(r.code, Some(0 | 1)),
                            "{args:?} with password {pw:?} written {form}: {r:?}"
                        );
                    } else if *connects && port == 1 {
                        assert_eq!(r.code, Some(3), "{args:?} refused, {pw:?} {form}: {r:?}");
                    }
                }
                if port == 1 {
                    let r = run(d, &["inspect", "--database", &url]);
                    never_shows("inspect", &r, &pw, &core, form, port);
                    assert_eq!(r.code, Some(3), "inspect refused, {pw:?} {form}: {r:?}");
                    let r = run(d, &["demo", "--database", &url, "-q"]);
                    never_shows("demo", &r, &pw, &core, form, port);
                    assert_eq!(r.code, Some(3), "demo refused, {pw:?} {form}: {r:?}");
                } else {
                    let r = run(d, &["inspect", "--database-file", "url.txt"]);
                    never_shows("inspect", &r, &pw, &core, form, port);
                }
            }
        }
    }
    for sql in drop.split("; ") {
        let _ = sqlx::query(sql).execute(&mut admin).await;
    }
    let _ = admin.close().await;
    db.cleanup().await;
}
