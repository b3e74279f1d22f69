//! What the audit reads: scopes and stored rows, a SELECT-only user, `--min-age`.

use super::*;

on_every_backend!(scopes_and_stored_rows, min_age);

on_every_backend!(servers: select_only_user);

async fn scopes_and_stored_rows(backend: Backend) {
    let Some(db) = TestDb::create(backend, "au_scope").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut conn, _, _, mapping_path) = prepared(&db, dir.path(), 3000).await;
    let full = tidemark(
        dir.path(),
        &db.url,
        &mapping_path,
        &["--report", "full.csv", "--store-rows"],
    );
    assert_eq!(full.status.code(), Some(1));
    let (all, _) = csv_rows(&dir.path().join("full.csv"));

    // --conversations FROM..TO: exactly the rows of that range.
    let out = tidemark(
        dir.path(),
        &db.url,
        &mapping_path,
        &["--report", "range.csv", "--conversations", "100..400"],
    );
    assert!(matches!(out.status.code(), Some(0 | 1)));
    let (range, _) = csv_rows(&dir.path().join("range.csv"));
    let expected: Vec<_> = all
        .iter()
        .filter(|r| (100..=400).contains(&r[0].parse::<i64>().unwrap()))
        .cloned()
        .collect();
    assert!(!expected.is_empty());
    assert_eq!(range, expected);

    // --sample: deterministic, a subset, stated in the summary.
    let out = tidemark(
        dir.path(),
        &db.url,
        &mapping_path,
        &["--report", "s1.csv", "--sample", "30", "--format", "json"],
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(json["scope"][0].as_str().unwrap().contains("sample 30%"));
    let (s1, _) = csv_rows(&dir.path().join("s1.csv"));
    tidemark(
        dir.path(),
        &db.url,
        &mapping_path,
        &["--report", "s2.csv", "--sample", "30"],
    );
    let (s2, _) = csv_rows(&dir.path().join("s2.csv"));
    assert_eq!(s1, s2, "the same sample twice");
    assert!(
        !s1.is_empty() && s1.len() < all.len(),
        "{} of {}",
        s1.len(),
        all.len()
    );
    assert!(s1.iter().all(|r| all.contains(r)));
    assert!(s1
        .iter()
        .all(|r| (r[0].parse::<i64>().unwrap().abs() % 1000003) * 7919 % 10000 < 3000));

    // --store-rows: the rows are in the ledger; after a fix, status reports it.
    let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tidemark_drift_rows")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(stored, all.len() as i64);
    let fixed = &all[0];
    sqlx::raw_sql(&format!(
        "UPDATE unread_counters SET unread_count = {} WHERE conv_id = {} AND user_id = '{}'",
        fixed[3], fixed[0], fixed[1]
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    tidemark(
        dir.path(),
        &db.url,
        &mapping_path,
        &["--report", "again.csv", "--store-rows"],
    );
    let status = bin::command()
        .args(["status", "--database", &db.url, "--mapping"])
        .arg(&mapping_path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        text.contains("found 0 newly drifting rows and 1 fixed"),
        "{text}"
    );
    drop(conn);
    db.cleanup().await;
}

/// `--no-ledger` needs only SELECT: a user with nothing else audits, and writes nothing.
async fn select_only_user(backend: Backend) {
    let Some(db) = TestDb::create(backend, "au_ro").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut conn, _, _, mapping_path) = prepared(&db, dir.path(), 500).await;
    let user = format!("tm_ro_{}", std::process::id());
    let mut url = url::Url::parse(&db.url).unwrap();
    let setup: Vec<String> = match backend {
        Backend::Postgres => vec![
            format!("DROP ROLE IF EXISTS {user}"),
            format!("CREATE ROLE {user} LOGIN"),
            format!("GRANT CONNECT ON DATABASE \"{}\" TO {user}", db.name),
            format!("GRANT USAGE ON SCHEMA public TO {user}"),
            format!("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {user}"),
        ],
        Backend::Mysql => vec![
            format!("DROP USER IF EXISTS '{user}'@'%'"),
            format!("CREATE USER '{user}'@'%' IDENTIFIED BY 'ro-Secret-1'"),
            format!("GRANT SELECT ON `{}`.* TO '{user}'@'%'", db.name),
        ],
        Backend::Sqlite => unreachable!(),
    };
    for s in &setup {
        sqlx::raw_sql(s).execute(&mut conn).await.unwrap();
    }
    url.set_username(&user).unwrap();
    if backend == Backend::Mysql {
        url.set_password(Some("ro-Secret-1")).unwrap();
    }
    let ro_url = url.to_string();
    let ledger_before: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tidemark_ledger")
        .fetch_one(&mut conn)
        .await
        .unwrap();

    let out = tidemark(
        dir.path(),
        &ro_url,
        &mapping_path,
        &["--no-ledger", "--report", "ro.csv"],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "drift found read-only: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (rows, _) = csv_rows(&dir.path().join("ro.csv"));
    assert!(!rows.is_empty());
    let ledger_after: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tidemark_ledger")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(ledger_before, ledger_after, "--no-ledger writes nothing");
    // Without --no-ledger the same user cannot record the run: a database failure, exit 3.
    let out = tidemark(dir.path(), &ro_url, &mapping_path, &["--report", "ro2.csv"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!String::from_utf8_lossy(&out.stderr).contains("ro-Secret-1"));

    let teardown: Vec<String> = match backend {
        Backend::Postgres => vec![
            format!("REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {user}"),
            format!("REVOKE ALL ON SCHEMA public FROM {user}"),
        ],
        _ => vec![],
    };
    for s in &teardown {
        sqlx::raw_sql(s).execute(&mut conn).await.unwrap();
    }
    drop(conn);
    db.cleanup().await;
    // The role outlives the database: drop it on the server.
    let admin = match backend {
        Backend::Postgres => Backend::Postgres.admin_url(),
        _ => Backend::Mysql.admin_url(),
    }
    .unwrap();
    let mut admin = crate::common::connect(&admin).await;
    let drop = match backend {
        Backend::Postgres => format!("DROP ROLE IF EXISTS {user}"),
        _ => format!("DROP USER IF EXISTS '{user}'@'%'"),
    };
    sqlx::raw_sql(&drop).execute(&mut admin).await.unwrap();
}

/// `--min-age`: conversations with a message younger than the limit are left out and counted.
async fn min_age(backend: Backend) {
    let Some(db) = TestDb::create(backend, "au_minage").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut conn, _, _, _) = prepared(&db, dir.path(), 2000).await;
    // Every message an hour old; the newest message of conversations 1..=50 a moment ago.
    let now = tidemark::values::now_ms() / 1000;
    sqlx::raw_sql(&format!("UPDATE messages SET created_at = {}", now - 3600))
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::raw_sql(&format!(
        "UPDATE messages SET created_at = {now} WHERE conv_id <= 50 AND id = (SELECT MAX(m2.id) FROM (SELECT conv_id, id FROM messages) m2 WHERE m2.conv_id = messages.conv_id)"
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    let text = scenario::mapping_toml("per_member", false).replace(
        "sender = \"sender_id\"",
        "sender = \"sender_id\"\ncreated_at = \"created_at\"",
    );
    let mapping_path = dir.path().join("timed.toml");
    std::fs::write(&mapping_path, text).unwrap();
    let all = tidemark(
        dir.path(),
        &db.url,
        &mapping_path,
        &["--report", "all.csv", "--no-ledger"],
    );
    assert_eq!(all.status.code(), Some(1));
    let out = tidemark(
        dir.path(),
        &db.url,
        &mapping_path,
        &[
            "--report",
            "quiet.csv",
            "--no-ledger",
            "--min-age",
            "10m",
            "--format",
            "json",
        ],
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let recent: i64 = sqlx::query_scalar(&format!(
        "SELECT COUNT(DISTINCT conv_id) FROM messages WHERE created_at > {}",
        now - 600
    ))
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert!(recent > 0);
    assert_eq!(json["left_out_recent"].as_i64(), Some(recent));
    let (all_rows, _) = csv_rows(&dir.path().join("all.csv"));
    let (quiet_rows, _) = csv_rows(&dir.path().join("quiet.csv"));
    let expected: Vec<_> = all_rows
        .iter()
        .filter(|r| r[0].parse::<i64>().unwrap() > 50)
        .cloned()
        .collect();
    assert_eq!(
        quiet_rows, expected,
        "exactly the rows of the quiet conversations"
    );
    assert!(quiet_rows.len() < all_rows.len());
    // Without created_at in the mapping, --min-age is bad input.
    let plain = dir.path().join("plain.toml");
    std::fs::write(&plain, scenario::mapping_toml("per_member", false)).unwrap();
    let out = tidemark(
        dir.path(),
        &db.url,
        &plain,
        &["--no-ledger", "--min-age", "10m"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("created_at"));
    drop(conn);
    db.cleanup().await;
}
