//! Every mapped column's type is checked before any statement runs (issue 13, rows 3 and 4):
//! a text position, a text counter, a time column of a text type, a predicate that is a bare
//! non-boolean column, each ends `expand` with exit 2 naming the mapping key with its
//! file:line:col, and nothing is created. On every backend (SQLite: by the declared type's affinity; its ISO-8601 text dates
//! are accepted), also through a view.

use crate::common::{Backend, TestDb};
use crate::scenario;
use tidemark::db::Dsn;

/// The scenario mapping (per_member) with `from` replaced by `to`.
fn mapping_with(from: &str, to: &str) -> String {
    let base = scenario::mapping_toml("per_member", false);
    assert!(base.contains(from), "{from:?} not in the mapping");
    base.replacen(from, to, 1)
}

/// Runs `tidemark expand` with `mapping`; returns (exit code, stderr).
fn expand(db: &TestDb, mapping: &str) -> (Option<i32>, String) {
    tidemark(db, &["expand"], mapping)
}

/// Runs `tidemark ARGS --database … --mapping tidemark.toml` with `mapping` in a temporary
/// folder (its own working directory); returns (exit code, stderr).
fn tidemark(db: &TestDb, args: &[&str], mapping: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tidemark.toml");
    std::fs::write(&path, mapping).unwrap();
    let out = crate::common::bin::command()
        .env_remove("DATABASE_URL")
        .current_dir(dir.path())
        .args(args)
        .args(["--database", &db.url, "--mapping"])
        .arg(&path)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn bad_types_are_refused(backend: Backend) {
    let Some(db) = TestDb::create(backend, "coltypes").await else {
        return;
    };
    let dialect = Dsn::parse(&db.url).unwrap().dialect;
    let mut conn = db.connect().await;
    let mut sql = scenario::schema_sql();
    sql.extend(
        [
            "ALTER TABLE unread_counters ADD COLUMN unread_text VARCHAR(10) NULL",
            "ALTER TABLE members ADD COLUMN left_at TIMESTAMP NULL",
            "ALTER TABLE messages ADD COLUMN created_text VARCHAR(30) NULL",
            "CREATE VIEW messages_v AS SELECT conv_id, sender_id AS id, sender_id, is_deleted, is_system FROM messages",
            "INSERT INTO messages (conv_id, id, sender_id, created_text) VALUES (1, 1, 'u0', 'n/a')",
            "INSERT INTO members (conv_id, user_id) VALUES (1, 'u1')",
            "INSERT INTO unread_counters (conv_id, user_id, unread_text) VALUES (1, 'u1', '7abc')",
        ]
        .map(String::from),
    );
    crate::common::exec_all(&mut conn, &sql).await;

    // (mapping, the line holding the key at fault, the message after `file:line:col: `).
    let mut cases = vec![
        (
            mapping_with("id = \"id\"", "id = \"sender_id\""),
            "id = \"sender_id\"",
            "messages.id = \"sender_id\": column messages.sender_id is text; a position must be an integer",
        ),
        (
            mapping_with("column = \"unread_count\"", "column = \"unread_text\""),
            "column = \"unread_text\"",
            "counter.column = \"unread_text\": column unread_counters.unread_text is text; a counter must be an integer",
        ),
        (
            mapping_with("active = \"active = 1\"", "active = \"left_at\""),
            "active = \"left_at\"",
            "members.active = \"left_at\": column members.left_at is a date/time type",
        ),
        (
            mapping_with(
                "join_position = \"join_position\"",
                "join_position = \"user_id\"",
            ),
            "join_position = \"user_id\"",
            "members.join_position = \"user_id\": column members.user_id is text; a position must be an integer",
        ),
        (
            mapping_with(
                "column = \"message_id\"",
                "column = \"user_id\"",
            ),
            "column = \"user_id\"",
            "evidence[1].column = \"user_id\": column read_receipts.user_id is text",
        ),
    ];
    // A view's column has the type of the column it selects (SQLite: as far as it tells).
    cases.push((
        mapping_with("table = \"messages\"", "table = \"messages_v\""),
        "id = \"id\"",
        "messages.id = \"id\": column messages_v.id is text; a position must be an integer",
    ));
    let created_text = mapping_with(
        "countable = ",
        "created_at = \"created_text\"\ncountable = ",
    );
    if backend == Backend::Sqlite {
        // SQLite has no date type: ISO-8601 text is its documented date form.
        let (code, stderr) = expand(&db, &created_text);
        assert_eq!(code, Some(0), "sqlite text created_at: {stderr}");
    } else {
        cases.push((
            created_text,
            "created_at = \"created_text\"",
            "messages.created_at = \"created_text\": column messages.created_text is text; a time must be a date/time type",
        ));
    }
    for (mapping, line, expected) in &cases {
        let expected = format!(
            "{}: {expected}",
            crate::common::value_at("tidemark.toml", mapping, line)
        );
        let (code, stderr) = expand(&db, mapping);
        assert_eq!(code, Some(2), "{}: {expected}: {stderr}", backend.name());
        assert!(
            stderr.contains(&expected),
            "{}: expected {expected:?} in:\n{stderr}",
            backend.name()
        );
    }
    if backend != Backend::Sqlite {
        // Nothing was created by the refused runs.
        assert!(
            !tidemark::db::catalog::table_exists(&mut conn, dialect, "tidemark_ledger")
                .await
                .unwrap(),
            "{}: a refused expand created the ledger",
            backend.name()
        );
    }
    // The unchanged mapping is accepted.
    let (code, stderr) = expand(&db, &scenario::mapping_toml("per_member", false));
    assert_eq!(code, Some(0), "{stderr}");
    drop(conn);
    db.cleanup().await;
}

/// `[counter] value`, an SQL expression, must be an integer like a counter column: a text
/// expression ends `expand` and `audit` with exit 2 naming `counter.value` with its
/// file:line:col and the type found (PostgreSQL and MySQL/MariaDB: the expression's type over
/// zero rows; SQLite: the type of a value), before any statement of the stage; an integer
/// expression over the same rows is accepted and audited.
async fn text_counter_value_is_refused(backend: Backend) {
    let Some(db) = TestDb::create(backend, "coltypes_value").await else {
        return;
    };
    let mut conn = db.connect().await;
    let mut sql = scenario::schema_sql();
    sql.extend(
        [
            "ALTER TABLE unread_counters ADD COLUMN unread_text VARCHAR(10) NULL",
            "INSERT INTO messages (conv_id, id, sender_id) VALUES (1, 1, 'u0')",
            "INSERT INTO members (conv_id, user_id) VALUES (1, 'u1')",
            "INSERT INTO unread_counters (conv_id, user_id, unread_count, unread_text) VALUES (1, 'u1', 1, '7abc')",
        ]
        .map(String::from),
    );
    crate::common::exec_all(&mut conn, &sql).await;
    let with_value = |value: &str| {
        format!(
            "{}\n[contract]\ndrop = \"nothing\"\n",
            mapping_with("column = \"unread_count\"", &format!("value = {value:?}"))
        )
    };
    let good = with_value("this.unread_count + 0");
    let (code, stderr) = expand(&db, &good);
    assert_eq!(code, Some(0), "{}: {stderr}", backend.name());

    let bad = with_value("this.unread_text");
    let at = crate::common::value_at("tidemark.toml", &bad, "value = \"this.unread_text\"");
    let want = format!("{at}: counter.value = \"this.unread_text\": the expression is text (");
    for args in [
        &["expand"][..],
        &["audit", "--no-ledger", "--report", "r.csv"][..],
    ] {
        let (code, stderr) = tidemark(&db, args, &bad);
        assert_eq!(code, Some(2), "{} {args:?}: {stderr}", backend.name());
        assert!(
            stderr.contains(&want) && stderr.contains("a counter must be an integer"),
            "{} {args:?}: expected {want:?} in:\n{stderr}",
            backend.name()
        );
    }
    // The integer expression: audited, the one counter agreeing (1 unread message).
    let (code, stderr) = tidemark(&db, &["backfill", "--quiet"], &good);
    assert_eq!(code, Some(0), "{}: {stderr}", backend.name());
    let (code, stderr) = tidemark(&db, &["audit", "--quiet", "--report", "r.csv"], &good);
    assert_eq!(code, Some(0), "{}: {stderr}", backend.name());
    drop(conn);
    db.cleanup().await;
}

#[tokio::test]
async fn text_counter_value_is_refused_sqlite() {
    text_counter_value_is_refused(Backend::Sqlite).await;
}

#[tokio::test]
async fn text_counter_value_is_refused_postgres() {
    text_counter_value_is_refused(Backend::Postgres).await;
}

#[tokio::test]
async fn text_counter_value_is_refused_mysql() {
    text_counter_value_is_refused(Backend::Mysql).await;
}

#[tokio::test]
async fn bad_types_are_refused_sqlite() {
    bad_types_are_refused(Backend::Sqlite).await;
}

#[tokio::test]
async fn bad_types_are_refused_postgres() {
    bad_types_are_refused(Backend::Postgres).await;
}

#[tokio::test]
async fn bad_types_are_refused_mysql() {
    bad_types_are_refused(Backend::Mysql).await;
}
