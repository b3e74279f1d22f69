//! A database that cannot be reached exits 3, the URL's password redacted from everything printed.

use super::*;

// ---------------------------------------------------------------------------------------------
// 5. unreachable server -> 3, password redacted

#[track_caller]
fn assert_redacted_failure(run: &Run, shown: &str, secret: &str) {
    run.expect_code(3);
    assert!(
        run.stderr.contains(shown),
        "stderr should show {shown:?}:\n{}",
        run.stderr
    );
    assert!(
        !run.stderr.contains(secret) && !run.stdout.contains(secret),
        "the password leaked:\n--- stdout\n{}\n--- stderr\n{}",
        run.stdout,
        run.stderr
    );
}

#[test]
fn unreachable_postgres_exits_3_with_password_redacted() {
    let dir = tempdir();
    write_mapping(
        dir.path(),
        "valid.toml",
        &scenario::mapping_toml("per_member", false),
    );
    let url = "postgres://alice:SuperSecret99@127.0.0.1:1/db";
    for cmd in ["audit", "expand", "backfill", "status"] {
        let run = tidemark(
            dir.path(),
            &[cmd, "--database", url, "--mapping", "valid.toml"],
        );
        assert_redacted_failure(&run, "alice:***@127.0.0.1:1", "SuperSecret99");
    }
}

#[test]
fn unreachable_mysql_exits_3_with_password_redacted() {
    let dir = tempdir();
    write_mapping(
        dir.path(),
        "valid.toml",
        &scenario::mapping_toml("per_member", false),
    );
    for url in [
        "mysql://alice:SuperSecret99@127.0.0.1:1/db",
        "mariadb://alice:SuperSecret99@127.0.0.1:1/db",
    ] {
        let run = tidemark(
            dir.path(),
            &["audit", "--database", url, "--mapping", "valid.toml"],
        );
        assert_redacted_failure(&run, "alice:***@127.0.0.1:1", "SuperSecret99");
    }
}

#[test]
fn unreachable_server_from_database_url_env_exits_3_redacted() {
    let dir = tempdir();
    write_mapping(
        dir.path(),
        "tidemark.toml",
        &scenario::mapping_toml("per_member", false),
    );
    for url in [
        "postgres://alice:SuperSecret99@127.0.0.1:1/db",
        "mysql://alice:SuperSecret99@127.0.0.1:1/db",
    ] {
        let run = tidemark_env(dir.path(), &["audit"], &[("DATABASE_URL", url)]);
        assert_redacted_failure(&run, "alice:***@127.0.0.1:1", "SuperSecret99");
    }
}

#[test]
fn password_in_query_string_is_redacted() {
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
            "postgres://alice@127.0.0.1:1/db?password=SuperSecret99",
        ],
    );
    assert_redacted_failure(&run, "alice@127.0.0.1:1", "SuperSecret99");
}

#[test]
fn missing_sqlite_file_exits_3() {
    let dir = tempdir();
    write_mapping(
        dir.path(),
        "tidemark.toml",
        &scenario::mapping_toml("per_member", false),
    );
    let run = tidemark(
        dir.path(),
        &["status", "--database", "sqlite:does-not-exist.db"],
    );
    run.expect_code(3);
    assert!(
        !dir.path().join("does-not-exist.db").exists(),
        "a read-only command must not create the database file"
    );
}
