//! Key types (issue 29, rows 13, 14, 21 and 22; `interface.md`, "Keys"): keys are compared as
//! values whatever their integer types, text beside integer keys is refused before anything
//! runs, and a key is read by what its value is, never by SQLite's declared type affinity.
//!
//! The fixture: one conversation with six messages (senders 10, 20, 30, 10, 20, 30), three
//! members; member 10 read up to message 4 (a receipt) and its counter says 5 (recomputed: 2,
//! messages 5 and 6 are by others), member 20's counter says 1 (its watermark from the
//! counter: 4, message 6 is the one unread), member 30's says 0 (watermark 6). Worked out by
//! hand: watermarks 10 → 4 (position), 20 → 4 (counter), 30 → 6 (counter), and one drifting
//! row, `1,10,5,2,3,exceeds_history,4,position`.

use std::collections::BTreeMap;
use std::path::Path;

use sqlx::{AnyConnection, Row};

use crate::common::{bin, exec_all, on_every_backend, Backend, TestDb};
use tidemark::values::text;

on_every_backend!(text_beside_integer_keys_is_refused_before_anything_runs);
on_every_backend!(servers: uuid_keys_work_on_every_stage_and_in_sql_app);

const MAPPING: &str = r#"
[messages]
table = "messages"
id = "id"
conversation = "conv_id"
sender = "sender_id"

[members]
table = "members"
user = "user_id"
conversation = "conv_id"

[counter]
shape = "per_member"
table = "unread_counters"
user = "user_id"
conversation = "conv_id"
column = "unread_count"

[[evidence]]
kind = "position"
table = "read_receipts"
user = "user_id"
conversation = "conv_id"
column = "message_id"

[[evidence]]
kind = "counter"

[watermarks]
table = "read_watermarks"
"#;

/// The drifting row of the fixture, as the CSV report has it.
const DRIFT_ROW: &str = "1,10,5,2,3,exceeds_history,4,position";

/// The key column types of the fixture's tables: (messages' conversation, messages' sender,
/// members' and counters' keys, receipts' keys).
struct KeyDecl {
    msg_conv: &'static str,
    msg_sender: &'static str,
    members: &'static str,
    receipts_conv: &'static str,
    receipts_user: &'static str,
}

/// The schema and the data, with keys `conv` (conversation 1) and `users` (10, 20, 30) as
/// SQL literals.
fn schema_and_data(d: &KeyDecl, conv: &str, users: [&str; 3]) -> Vec<String> {
    let [u1, u2, u3] = users;
    vec![
        format!("CREATE TABLE messages (conv_id {} NOT NULL, id BIGINT NOT NULL, sender_id {} NOT NULL, PRIMARY KEY (conv_id, id))", d.msg_conv, d.msg_sender),
        format!("CREATE TABLE members (conv_id {m} NOT NULL, user_id {m} NOT NULL, PRIMARY KEY (conv_id, user_id))", m = d.members),
        format!("CREATE TABLE unread_counters (conv_id {m} NOT NULL, user_id {m} NOT NULL, unread_count INT NOT NULL, PRIMARY KEY (conv_id, user_id))", m = d.members),
        format!("CREATE TABLE read_receipts (conv_id {} NOT NULL, user_id {} NOT NULL, message_id BIGINT NOT NULL)", d.receipts_conv, d.receipts_user),
        format!("INSERT INTO messages (conv_id, id, sender_id) VALUES ({conv}, 1, {u1}), ({conv}, 2, {u2}), ({conv}, 3, {u3}), ({conv}, 4, {u1}), ({conv}, 5, {u2}), ({conv}, 6, {u3})"),
        format!("INSERT INTO members (conv_id, user_id) VALUES ({conv}, {u1}), ({conv}, {u2}), ({conv}, {u3})"),
        format!("INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES ({conv}, {u1}, 5), ({conv}, {u2}, 1), ({conv}, {u3}, 0)"),
        format!("INSERT INTO read_receipts (conv_id, user_id, message_id) VALUES ({conv}, {u1}, 4)"),
    ]
}

/// Runs `tidemark ARGS --database URL --mapping tidemark.toml` in `dir`.
fn run(dir: &Path, db: &TestDb, args: &[&str]) -> bin::Run {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--database", &db.url, "--mapping", "tidemark.toml"]);
    bin::run(dir, &all)
}

/// The watermark table as (conversation, user) → (last_read_id, source), keys as text.
async fn watermarks(
    conn: &mut AnyConnection,
    cast: &str,
) -> BTreeMap<(String, String), (i64, String)> {
    let sql = format!(
        "SELECT CAST(conversation_id AS {cast}), CAST(user_id AS {cast}), last_read_id, source FROM read_watermarks"
    );
    sqlx::query(&sql)
        .fetch_all(&mut *conn)
        .await
        .unwrap()
        .iter()
        .map(|r| {
            (
                (
                    text(r, 0).unwrap().unwrap_or_default(),
                    text(r, 1).unwrap().unwrap_or_default(),
                ),
                (
                    r.try_get(2).unwrap(),
                    text(r, 3).unwrap().unwrap_or_default(),
                ),
            )
        })
        .collect()
}

/// The watermarks worked out by hand for conversation `conv` and users `users`.
fn expected_watermarks(conv: &str, users: [&str; 3]) -> BTreeMap<(String, String), (i64, String)> {
    [
        (users[0], 4, "position"),
        (users[1], 4, "counter"),
        (users[2], 6, "counter"),
    ]
    .into_iter()
    .map(|(u, id, src)| ((conv.to_string(), u.to_string()), (id, src.to_string())))
    .collect()
}

/// Row 21: `messages.conv_id` text beside `read_receipts.conv_id` bigint. Before the fix
/// `expand` exited 0 and `plan` / `backfill` exited 3 (PostgreSQL: `operator does not exist:
/// character varying = bigint`); now every stage exits 2 naming both columns and their
/// types, and nothing is created.
async fn text_beside_integer_keys_is_refused_before_anything_runs(backend: Backend) {
    let Some(db) = TestDb::create(backend, "keytypes_mixed").await else {
        return;
    };
    let (text_t, text_shown, int_shown) = match backend {
        Backend::Postgres => ("VARCHAR(64)", "character varying(64)", "bigint"),
        Backend::Mysql => ("VARCHAR(64)", "varchar(64)", "bigint(20)"),
        Backend::Sqlite => ("VARCHAR(64)", "VARCHAR(64)", "BIGINT"),
    };
    let decl = KeyDecl {
        msg_conv: text_t,
        msg_sender: "BIGINT",
        members: "BIGINT",
        receipts_conv: "BIGINT",
        receipts_user: "BIGINT",
    };
    // members' conversation is an integer too: the first column that differs from
    // messages.conv_id (the mapping's order) is the members'.
    let mut conn = db.connect().await;
    exec_all(&mut conn, &schema_and_data(&decl, "1", ["10", "20", "30"])).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tidemark.toml"), MAPPING).unwrap();
    let want = format!(
        "conversation keys of different types: messages.conv_id is {text_shown} (text) and members.conv_id is {int_shown} (integer)"
    );
    for args in [&["expand"][..], &["plan"], &["backfill"], &["audit"]] {
        let out = run(dir.path(), &db, args);
        out.expect_code(2);
        assert!(out.stderr.contains(&want), "{args:?}: {}", out.stderr);
    }
    let wm = sqlx::query("SELECT COUNT(*) FROM read_watermarks")
        .fetch_one(&mut conn)
        .await;
    assert!(wm.is_err(), "expand created the watermark table");
    drop(conn);
    db.cleanup().await;
}

/// Expand, backfill and audit of [`schema_and_data`]'s conversation 1 (users 10, 20, 30) on
/// MariaDB, in `dir` (mapping `tidemark.toml`): the watermarks are the expected ones and the
/// report holds exactly [`DRIFT_ROW`]; `what` names the key types in a failure.
async fn expand_backfill_audit(dir: &Path, db: &TestDb, conn: &mut AnyConnection, what: &str) {
    run(dir, db, &["expand"]).expect_code(0);
    run(dir, db, &["backfill"]).expect_code(0);
    assert_eq!(
        watermarks(conn, "CHAR").await,
        expected_watermarks("1", ["10", "20", "30"]),
        "{what}"
    );
    run(dir, db, &["audit", "--report", "drift.csv"]).expect_code(1);
    let report = std::fs::read_to_string(dir.join("drift.csv")).unwrap();
    assert_eq!(report.lines().nth(1), Some(DRIFT_ROW), "{what}: {report}");
    assert_eq!(report.lines().count(), 2, "{what}: {report}");
}

/// Row 13 (MariaDB): `INT UNSIGNED` member and counter keys beside `INT` message senders and
/// receipts. Before the fix the audit exited 3 (`Any driver does not support MySql type …
/// NewDecimal`: the audit's UNION of the two typed DECIMAL); now the keys compare as values.
/// Then a `BIGINT UNSIGNED` key above 2^63 − 1 is refused (exit 2) naming the column.
#[tokio::test]
async fn mixed_signedness_integer_keys_compare_as_values() {
    let Some(db) = TestDb::create(Backend::Mysql, "keytypes_unsigned").await else {
        return;
    };
    let decl = KeyDecl {
        msg_conv: "INT",
        msg_sender: "INT",
        members: "INT UNSIGNED",
        receipts_conv: "INT",
        receipts_user: "INT",
    };
    let mut conn = db.connect().await;
    exec_all(&mut conn, &schema_and_data(&decl, "1", ["10", "20", "30"])).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tidemark.toml"), MAPPING).unwrap();
    expand_backfill_audit(dir.path(), &db, &mut conn, "INT / INT UNSIGNED").await;

    exec_all(
        &mut conn,
        &[
            "ALTER TABLE members MODIFY user_id BIGINT UNSIGNED NOT NULL".to_string(),
            "INSERT INTO members (conv_id, user_id) VALUES (1, 18446744073709551615)".to_string(),
        ],
    )
    .await;
    let out = run(dir.path(), &db, &["audit"]);
    out.expect_code(2);
    assert!(
        out.stderr.contains(
            "members.user_id (bigint(20) unsigned) holds 18446744073709551615, above 9223372036854775807"
        ),
        "{}",
        out.stderr
    );
    drop(conn);
    db.cleanup().await;
}

/// MariaDB: all-unsigned keys (`INT UNSIGNED` conversations, `SMALLINT UNSIGNED` users) run
/// through every stage and the audit reports the drifting row, as with `INT` keys. A
/// `MEDIUMINT` key, which the database driver cannot read back (the differential test's
/// 200-case run found the backfill and the audit exiting 3 mid-run, `Any driver does not
/// support MySql type … Int24`), is refused by `expand` before anything is written (exit 2,
/// naming the column and the remedy).
#[tokio::test]
async fn integer_keys_of_every_width_are_read_or_refused() {
    let Some(db) = TestDb::create(Backend::Mysql, "keytypes_medium").await else {
        return;
    };
    let decl = KeyDecl {
        msg_conv: "INT",
        msg_sender: "MEDIUMINT",
        members: "MEDIUMINT",
        receipts_conv: "INT",
        receipts_user: "MEDIUMINT",
    };
    let mut conn = db.connect().await;
    exec_all(&mut conn, &schema_and_data(&decl, "1", ["10", "20", "30"])).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tidemark.toml"), MAPPING).unwrap();
    let refused = run(dir.path(), &db, &["expand"]);
    refused.expect_code(2);
    assert!(
        refused.stderr.contains("is mediumint") && refused.stderr.contains("AS SIGNED"),
        "{}",
        refused.stderr
    );
    drop(conn);
    db.cleanup().await;
    for (conv, user) in [("INT UNSIGNED", "SMALLINT UNSIGNED")] {
        let Some(db) = TestDb::create(Backend::Mysql, "keytypes_width").await else {
            return;
        };
        let decl = KeyDecl {
            msg_conv: conv,
            msg_sender: user,
            members: user,
            receipts_conv: conv,
            receipts_user: user,
        };
        let mut conn = db.connect().await;
        exec_all(&mut conn, &schema_and_data(&decl, "1", ["10", "20", "30"])).await;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tidemark.toml"), MAPPING).unwrap();
        let what = format!("{conv} / {user}");
        expand_backfill_audit(dir.path(), &db, &mut conn, &what).await;
        drop(conn);
        db.cleanup().await;
    }
}

/// Row 22 (SQLite): the counter is a view whose user key is an expression
/// (`SELECT conv, 0 AS reader, unread FROM convs`), declared with no type. Before the fix the
/// audit exited 3 as soon as a row drifted (`decoding column "usr": … Option<Vec<u8>> … not
/// compatible with SQL type BIGINT`); now the drifting row is reported. Conversation 1 has
/// three messages by user 5 and a stored counter of 7 for reader 0: the counter is beyond
/// history, so the backfill writes watermark 0 (nothing read), recomputed 3, drift 4.
#[tokio::test]
async fn a_view_key_without_declared_type_is_read_by_its_value() {
    let Some(db) = TestDb::create(Backend::Sqlite, "keytypes_view").await else {
        return;
    };
    let mut conn = db.connect().await;
    let sql = [
        "CREATE TABLE messages (conv_id INTEGER NOT NULL, id INTEGER NOT NULL, sender_id INTEGER NOT NULL, PRIMARY KEY (conv_id, id))",
        "CREATE TABLE convs (conv INTEGER PRIMARY KEY, unread INTEGER NOT NULL)",
        "CREATE VIEW conv_counters AS SELECT conv, 0 AS reader, unread FROM convs",
        "INSERT INTO messages VALUES (1, 1, 5), (1, 2, 5), (1, 3, 5), (2, 1, 5)",
        "INSERT INTO convs VALUES (1, 7), (2, 1)",
    ]
    .map(String::from);
    exec_all(&mut conn, &sql).await;
    let mapping = r#"
[messages]
table = "messages"
id = "id"
conversation = "conv_id"
sender = "sender_id"

[counter]
shape = "per_member"
table = "conv_counters"
user = "reader"
conversation = "conv"
column = "unread"

[[evidence]]
kind = "counter"

[watermarks]
table = "read_watermarks"
"#;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tidemark.toml"), mapping).unwrap();
    run(dir.path(), &db, &["expand"]).expect_code(0);
    run(dir.path(), &db, &["backfill"]).expect_code(0);
    let out = run(dir.path(), &db, &["audit", "--report", "drift.csv"]);
    out.expect_code(1);
    let report = std::fs::read_to_string(dir.path().join("drift.csv")).unwrap();
    let rows: Vec<&str> = report.lines().skip(1).collect();
    assert_eq!(
        rows,
        vec!["1,0,7,3,4,exceeds_history,0,counter"],
        "{report}"
    );
    drop(conn);
    db.cleanup().await;
}

/// The uuid keys of the uuid fixture: conversation 1, users 10, 20, 30.
const UUID_CONV: &str = "c0000000-0000-4000-8000-000000000001";
const UUID_USERS: [&str; 3] = [
    "a0000000-0000-4000-8000-00000000000a",
    "b0000000-0000-4000-8000-00000000000b",
    "d0000000-0000-4000-8000-00000000000d",
];

/// Runs the `sql app` statement `name` of `app` (its `--format json` output) with the binds
/// `values` (by bind name), through a prepared statement whose parameters are typed by the
/// server (PostgreSQL: `uuid` keys, `bigint` positions), as an application's driver binds
/// them; returns the first column of the first row, if any.
async fn run_app(
    conn: &mut AnyConnection,
    backend: Backend,
    app: &serde_json::Value,
    name: &str,
    values: &[(&str, &str)],
) -> Option<i64> {
    let stmt = app["statements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no statement {name}"));
    let sql = stmt["sql"].as_str().unwrap();
    let binds: Vec<&str> = stmt["binds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_str().unwrap())
        .collect();
    let value = |b: &str| {
        let v = values.iter().find(|(k, _)| *k == b).unwrap().1;
        if b == "message" {
            v.to_string()
        } else {
            format!("'{v}'")
        }
    };
    let args: Vec<String> = binds.iter().map(|b| value(b)).collect();
    let (prepare, execute) = match backend {
        Backend::Postgres => {
            let types: Vec<&str> = binds
                .iter()
                .map(|b| if *b == "message" { "bigint" } else { "uuid" })
                .collect();
            (
                format!("PREPARE tm_app ({}) AS {sql}", types.join(", ")),
                format!("EXECUTE tm_app ({})", args.join(", ")),
            )
        }
        _ => (
            format!("PREPARE tm_app FROM '{}'", sql.replace('\'', "''")),
            format!("EXECUTE tm_app USING {}", args.join(", ")),
        ),
    };
    sqlx::raw_sql(&prepare).execute(&mut *conn).await.unwrap();
    let row = sqlx::raw_sql(&execute)
        .fetch_all(&mut *conn)
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}\n{sql}"));
    let dealloc = match backend {
        Backend::Postgres => "DEALLOCATE tm_app",
        _ => "DEALLOCATE PREPARE tm_app",
    };
    sqlx::raw_sql(dealloc).execute(&mut *conn).await.unwrap();
    row.first().map(|r| r.try_get::<i64, _>(0).unwrap())
}

/// Part of `uuid_keys_work_on_every_stage_and_in_sql_app`, in `dir` on `db`: `--min-age`
/// leaves out a second conversation with a message written now (its keys listed and bound as
/// uuids) and audits the first, two hours old, whose drifting row `want` stays; the second
/// conversation is removed again at the end.
async fn min_age_leaves_out_a_recent_conversation(
    conn: &mut AnyConnection,
    backend: Backend,
    dir: &Path,
    db: &TestDb,
    want: &str,
) {
    let [a, b, _] = UUID_USERS;
    // `--min-age`: a second conversation with a message written now is left out (its keys
    // listed and bound as uuids), the first, two hours old, is audited.
    let recent = "e0000000-0000-4000-8000-00000000000e";
    let two_hours_ago = match backend {
        Backend::Postgres => "now() - interval '2 hours'",
        _ => "NOW() - INTERVAL 2 HOUR",
    };
    exec_all(
        conn,
        &[
            "ALTER TABLE messages ADD COLUMN created_at TIMESTAMP NULL".to_string(),
            format!("UPDATE messages SET created_at = {two_hours_ago}"),
            format!("INSERT INTO messages (conv_id, id, sender_id, created_at) VALUES ('{recent}', 1, '{a}', CURRENT_TIMESTAMP)"),
            format!("INSERT INTO members (conv_id, user_id) VALUES ('{recent}', '{b}')"),
            format!("INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES ('{recent}', '{b}', 3)"),
        ],
    )
    .await;
    let with_time = MAPPING.replace(
        "sender = \"sender_id\"\n",
        "sender = \"sender_id\"\ncreated_at = \"created_at\"\n",
    );
    std::fs::write(dir.join("tidemark.toml"), &with_time).unwrap();
    run(
        dir,
        db,
        &["audit", "--min-age", "1h", "--report", "aged.csv"],
    )
    .expect_code(1);
    let aged = std::fs::read_to_string(dir.join("aged.csv")).unwrap();
    // The first conversation's rows only: member a as before, and member b, whose watermark
    // the application moved to 6 above while its counter still says 1.
    let b_row = format!("{UUID_CONV},{b},1,0,1,overcount,6,application");
    assert_eq!(
        aged.lines().skip(1).collect::<Vec<_>>(),
        vec![want, b_row.as_str()],
        "{aged}"
    );
    exec_all(
        conn,
        &[
            format!("DELETE FROM unread_counters WHERE conv_id = '{recent}'"),
            format!("DELETE FROM members WHERE conv_id = '{recent}'"),
            format!("DELETE FROM messages WHERE conv_id = '{recent}'"),
        ],
    )
    .await;
}

/// Row 14: every key a uuid (PostgreSQL `uuid`, MariaDB `UUID`). Before the fix every stage
/// refused the mapping (`tidemark keys watermarks by integer or text columns`); now the
/// watermark table is keyed by uuid, the backfill writes the watermarks worked out by hand,
/// the audit reports the drifting row with its keys as text, the application's statements
/// (`sql app`, bound as uuids) move and read watermarks, `audit --min-age` leaves out a
/// conversation written now (its keys listed and bound as uuids), and the contract archives the
/// counters under their uuid keys and drops the column.
async fn uuid_keys_work_on_every_stage_and_in_sql_app(backend: Backend) {
    let Some(db) = TestDb::create(backend, "keytypes_uuid").await else {
        return;
    };
    let decl = KeyDecl {
        msg_conv: "UUID",
        msg_sender: "UUID",
        members: "UUID",
        receipts_conv: "UUID",
        receipts_user: "UUID",
    };
    let quoted = |u: &str| format!("'{u}'");
    let users = UUID_USERS.map(quoted);
    let users = [users[0].as_str(), users[1].as_str(), users[2].as_str()];
    let mut conn = db.connect().await;
    exec_all(
        &mut conn,
        &schema_and_data(&decl, &quoted(UUID_CONV), users),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tidemark.toml"), MAPPING).unwrap();
    run(dir.path(), &db, &["expand"]).expect_code(0);
    let (cast, here) = match backend {
        Backend::Postgres => ("TEXT", "table_schema = current_schema()"),
        _ => ("CHAR", "table_schema = DATABASE()"),
    };
    let wm_types: Vec<String> = sqlx::query(&format!(
        "SELECT CAST(data_type AS {cast}) FROM information_schema.columns WHERE {here} AND table_name = 'read_watermarks' AND column_name IN ('user_id', 'conversation_id')"
    ))
    .fetch_all(&mut conn)
    .await
    .unwrap()
    .iter()
    .map(|r| text(r, 0).unwrap().unwrap_or_default().to_lowercase())
    .collect();
    assert_eq!(wm_types, vec!["uuid", "uuid"]);
    run(dir.path(), &db, &["backfill"]).expect_code(0);
    let cast = if backend == Backend::Postgres {
        "TEXT"
    } else {
        "CHAR"
    };
    assert_eq!(
        watermarks(&mut conn, cast).await,
        expected_watermarks(UUID_CONV, UUID_USERS)
    );
    run(dir.path(), &db, &["audit", "--report", "drift.csv"]).expect_code(1);
    let report = std::fs::read_to_string(dir.path().join("drift.csv")).unwrap();
    let want = format!(
        "{UUID_CONV},{},5,2,3,exceeds_history,4,position",
        UUID_USERS[0]
    );
    assert_eq!(
        report.lines().skip(1).collect::<Vec<_>>(),
        vec![want.as_str()]
    );
    // `--conversations` bounds in another spelling of the uuid (upper case, braces) cover
    // the same conversation (they were compared as text and left it out: exit 2, no row);
    // a bound that is no uuid is refused, naming it.
    let upper = UUID_CONV.to_uppercase();
    let range = format!("{upper}..{{{UUID_CONV}}}");
    let args = ["audit", "--report", "range.csv", "--conversations", &range];
    run(dir.path(), &db, &args).expect_code(1);
    let ranged = std::fs::read_to_string(dir.path().join("range.csv")).unwrap();
    assert_eq!(ranged, report, "the range covers the conversation");
    let refused = run(dir.path(), &db, &["audit", "--conversations", "1..5"]);
    refused.expect_code(2);
    assert!(refused.stderr.contains("is not a uuid"), "{refused:?}");

    // The application's statements, bound as uuids.
    let out = run(dir.path(), &db, &["sql", "app", "--format", "json"]);
    out.expect_code(0);
    let app: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let [a, b, _] = UUID_USERS;
    let unread = |user: &'static str| [("conversation", UUID_CONV), ("user", user)];
    assert_eq!(
        run_app(&mut conn, backend, &app, "unread_count", &unread(a)).await,
        Some(2)
    );
    assert_eq!(
        run_app(&mut conn, backend, &app, "unread_count", &unread(b)).await,
        Some(1)
    );
    run_app(
        &mut conn,
        backend,
        &app,
        "mark_read",
        &[("user", b), ("conversation", UUID_CONV), ("message", "6")],
    )
    .await;
    assert_eq!(
        run_app(&mut conn, backend, &app, "unread_count", &unread(b)).await,
        Some(0)
    );

    min_age_leaves_out_a_recent_conversation(&mut conn, backend, dir.path(), &db, &want).await;

    // Back to the mapping the backfill ran with (a mapping with created_at is another one).
    std::fs::write(dir.path().join("tidemark.toml"), MAPPING).unwrap();

    // The counters made right: a clean audit, then the contract archives them and drops.
    exec_all(
        &mut conn,
        &[
            format!("UPDATE unread_counters SET unread_count = 2 WHERE user_id = '{a}'"),
            format!("UPDATE unread_counters SET unread_count = 0 WHERE user_id = '{b}'"),
        ],
    )
    .await;
    run(dir.path(), &db, &["audit"]).expect_code(0);
    run(dir.path(), &db, &["contract", "--execute"]).expect_code(0);
    let archived: Vec<(String, i64)> = sqlx::query(&format!(
        "SELECT CAST(user_id AS {cast}), counter_value FROM tidemark_counter_archive ORDER BY counter_value, CAST(user_id AS {cast})"
    ))
    .fetch_all(&mut conn)
    .await
    .unwrap()
    .iter()
    .map(|r| (text(r, 0).unwrap().unwrap_or_default(), r.try_get(1).unwrap()))
    .collect();
    assert_eq!(
        archived,
        vec![
            (b.to_string(), 0),
            (UUID_USERS[2].to_string(), 0),
            (a.to_string(), 2)
        ]
    );
    drop(conn);
    db.cleanup().await;
}
