//! The fixture's copies checked: the book's worked example (`docs/src/synapse.md`) shows this fixture's mapping, and the fixture holds the rows of `../shared/fixtures/` (when present) in all three dialect files.

use super::*;

/// The book's worked example (`docs/src/synapse.md`) shows this fixture's views and mapping (the report is checked by
/// `synapse_sqlite`).
#[test]
fn readme_shows_the_fixture() {
    let sql = readme_blocks("sql");
    assert_eq!(sql.len(), 1, "one sql block in the section");
    let views = std::fs::read_to_string(crate::common::known_mapping_file(
        "synapse",
        "views.sqlite.sql",
    ))
    .unwrap();
    let trimmed = |v: Vec<String>| v.iter().map(|s| s.trim().to_string()).collect::<Vec<_>>();
    assert_eq!(
        trimmed(split_sql(&sql[0], "docs/src/synapse.md")),
        trimmed(split_sql(&views, "views.sqlite.sql")),
        "docs/src/synapse.md's views differ from contrib/mappings/synapse/views.sqlite.sql (comments aside)"
    );
    let toml = readme_blocks("toml");
    assert_eq!(toml.len(), 1, "one toml block in the section");
    let file = std::fs::read_to_string(crate::common::known_mapping("synapse")).unwrap();
    let body: String = file
        .lines()
        .skip_while(|l| l.starts_with('#') || l.trim().is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        toml[0], body,
        "docs/src/synapse.md's mapping differs from contrib/mappings/synapse/tidemark.toml"
    );
}

/// The project's fixture holds the shared fixture's rows (the columns it keeps), its three
/// dialect files hold the same data, and EXPECTED is the shared header's table. Skipped without
/// `../shared`.
#[tokio::test]
async fn fixture_matches_shared() {
    let dir = fixture_dir();
    // The data is the same in every dialect: from the first INSERT on, the files are equal.
    let data = |d: &str| {
        let t = std::fs::read_to_string(dir.join(format!("synapse.{d}.sql"))).unwrap();
        let at = t.find("INSERT INTO").expect("data");
        t[at..].to_string()
    };
    assert_eq!(
        data("sqlite"),
        data("postgres"),
        "synapse.postgres.sql data"
    );
    assert_eq!(data("sqlite"), data("mysql"), "synapse.mysql.sql data");

    let shared_path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/synapse.sqlite.sql");
    let Ok(shared_sql) = std::fs::read_to_string(&shared_path) else {
        eprintln!("{} not found: nothing to compare", shared_path.display());
        return;
    };

    // EXPECTED is the shared header's table.
    let header: Vec<Vec<String>> = shared_sql
        .lines()
        .filter(|l| l.starts_with("-- | R"))
        .map(|l| l[3..].split('|').map(|c| c.trim().to_string()).collect())
        .collect();
    assert_eq!(
        header.len(),
        EXPECTED.len(),
        "rows of the shared expected table"
    );
    for cells in &header {
        // | room | user | room_id | user_id | stored | recomputed | drift | notif | last_read | kind |
        let (room, user) = (cells[3].as_str(), cells[4].as_str());
        let e = EXPECTED
            .iter()
            .find(|e| e.room == room && e.user == user)
            .unwrap_or_else(|| panic!("shared row {user} in {room} is not in EXPECTED"));
        let ev: i64 = cells[9]
            .split_whitespace()
            .find_map(|w| {
                w.trim_start_matches('(')
                    .strip_prefix("ev")?
                    .trim_end_matches(')')
                    .parse()
                    .ok()
            })
            .expect("evN");
        let nums: Vec<i64> = cells[5..8].iter().map(|c| c.parse().unwrap()).collect();
        assert_eq!(
            nums,
            vec![e.stored, e.recomputed, e.drift],
            "{user} in {room}"
        );
        // The watermark the shared table names (dave's receipt ev6 included: tidemark writes none
        // for a member who left, and owes him 0 whatever it is).
        assert_eq!(e.last_read.unwrap_or(6), ev, "{user} in {room}: watermark");
    }

    // The rows: load both files into SQLite and compare the columns the project keeps.
    let tmp = tempfile::tempdir().unwrap();
    let open = |file: &str| format!("sqlite:{}?mode=rwc", tmp.path().join(file).display());
    let mut shared = crate::common::connect(&open("shared.db")).await;
    sqlx::raw_sql(&shared_sql)
        .execute(&mut shared)
        .await
        .expect("loading the shared fixture");
    let mut ours = crate::common::connect(&open("ours.db")).await;
    exec_all(&mut ours, &statements(&dir.join("synapse.sqlite.sql"))).await;
    let tables = [
        ("events", "stream_ordering, event_id, type, room_id, sender, state_key, outlier, rejection_reason", "stream_ordering"),
        ("redactions", "event_id, redacts", "event_id"),
        ("local_current_membership", "room_id, user_id, event_id, membership, event_stream_ordering", "user_id, room_id"),
        ("receipts_linearized", "stream_id, room_id, receipt_type, user_id, event_id, thread_id, event_stream_ordering", "stream_id"),
        ("event_push_summary", "user_id, room_id, notif_count, stream_ordering, unread_count, last_receipt_stream_ordering, thread_id", "user_id, room_id, thread_id"),
        ("event_json", "event_id, room_id, json", "event_id"),
    ];
    for (table, cols, order) in tables {
        let quoted = cols
            .split(", ")
            .map(|c| format!("quote({c})"))
            .collect::<Vec<_>>()
            .join(" || '|' || ");
        let sql = format!("SELECT {quoted} FROM {table} ORDER BY {order}");
        let read = |rows: Vec<sqlx::any::AnyRow>| -> Vec<String> {
            rows.iter()
                .map(|r| r.try_get::<String, _>(0).unwrap())
                .collect()
        };
        let a = read(sqlx::query(&sql).fetch_all(&mut shared).await.unwrap());
        let b = read(sqlx::query(&sql).fetch_all(&mut ours).await.unwrap());
        assert!(!a.is_empty(), "{table}: no rows in the shared fixture");
        if table != "event_json" {
            assert_eq!(
                a, b,
                "{table}: the project's rows differ from the shared fixture's"
            );
            continue;
        }
        // event_json: the same events; the project keeps the keys that decide unread, equal.
        assert_eq!(a.len(), b.len(), "event_json rows");
        let json_of = |quoted_row: &str| -> serde_json::Value {
            let json = quoted_row.splitn(3, '|').nth(2).unwrap();
            let inner = &json[1..json.len() - 1];
            serde_json::from_str(&inner.replace("''", "'")).unwrap()
        };
        for (full, kept) in a.iter().zip(&b) {
            let prefix = |s: &str| s.splitn(3, '|').take(2).collect::<Vec<_>>().join("|");
            assert_eq!(prefix(full), prefix(kept), "event_json keys");
            let (full, kept) = (json_of(full), json_of(kept));
            for key in [
                "type",
                "room_id",
                "sender",
                "state_key",
                "content",
                "redacts",
            ] {
                assert_eq!(
                    full.get(key),
                    kept.get(key),
                    "event_json.json {key}: {full}"
                );
            }
        }
    }
    let _ = shared.close().await;
    let _ = ours.close().await;
}
