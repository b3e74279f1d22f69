//! SQLite only: the table rebuild where a column cannot be dropped in place, an index on the counter dropped first, a trigger using it refused.

use super::*;

/// SQLite cannot drop a column named in a table CHECK constraint in place: the documented
/// rebuild runs, keeps the data, the other indexes and the triggers, and drops the index on the
/// counter.
#[tokio::test]
async fn sqlite_rebuild_where_the_column_cannot_be_dropped_in_place() {
    let schema: Vec<String> = scenario::schema_sql()
        .into_iter()
        .map(|s| {
            if s.starts_with("CREATE TABLE unread_counters") {
                "CREATE TABLE unread_counters (\
                 conv_id BIGINT NOT NULL, \
                 user_id VARCHAR(64) NOT NULL COLLATE NOCASE, \
                 unread_count INT NULL, \
                 note TEXT DEFAULT 'a, b', \
                 PRIMARY KEY (conv_id, user_id), \
                 CHECK (unread_count IS NULL OR unread_count > -1000000))"
                    .to_string()
            } else {
                s
            }
        })
        .chain([
            "CREATE INDEX unread_by_count ON unread_counters (unread_count)".to_string(),
            "CREATE INDEX unread_by_note ON unread_counters (note)".to_string(),
            "CREATE TABLE counter_log (conv_id BIGINT, user_id TEXT)".to_string(),
            "CREATE TRIGGER unread_log AFTER INSERT ON unread_counters BEGIN INSERT INTO counter_log VALUES (NEW.conv_id, NEW.user_id); END".to_string(),
        ])
        .collect();
    let Some(mut s) = setup_with(Backend::Sqlite, "rebuild", "per_member", &schema).await else {
        return;
    };
    let (audit_id, _) = s.audit().await;
    let before = s.values("per_member").await;
    let dry = s.contract(&s.opts()).await.unwrap();
    let ddl = dry.ddl.join("\n");
    assert!(
        ddl.contains("CREATE TABLE \"main\".\"tidemark_rebuild_unread_counters\""),
        "{ddl}"
    );
    assert!(ddl.contains("PRAGMA legacy_alter_table = ON;"), "{ddl}");
    assert!(ddl.contains("PRAGMA foreign_keys = OFF;"), "{ddl}");
    assert!(!ddl.contains("unread_by_count"), "{ddl}");
    assert!(ddl.contains("CREATE INDEX unread_by_note"), "{ddl}");
    assert!(
        dry.notes.iter().any(|n| n.contains("rebuilt")),
        "{:?}",
        dry.notes
    );
    let o = s
        .contract(&ContractOptions {
            execute: true,
            ..s.opts()
        })
        .await
        .unwrap();
    check_done(&mut s, &o, "per_member", &before, audit_id).await;
    assert!(!s.column_exists("unread_counters", "unread_count").await);
    assert_eq!(s.count("SELECT COUNT(*) FROM unread_counters").await, 9);
    assert_eq!(
        s.count(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = 'unread_by_note'"
        )
        .await,
        1
    );
    assert_eq!(
        s.count("SELECT COUNT(*) FROM sqlite_master WHERE name = 'unread_by_count'")
            .await,
        0
    );
    assert_eq!(
        s.count(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'trigger' AND name = 'unread_log'"
        )
        .await,
        1
    );
    assert_eq!(
        s.count(
            "SELECT COUNT(*) FROM sqlite_master WHERE name = 'tidemark_rebuild_unread_counters'"
        )
        .await,
        0
    );
    // The primary key, the collation and the default survived.
    s.exec("INSERT INTO unread_counters (conv_id, user_id) VALUES (9, 'X')")
        .await;
    assert!(
        sqlx::raw_sql("INSERT INTO unread_counters (conv_id, user_id) VALUES (9, 'x')")
            .execute(&mut s.conn)
            .await
            .is_err()
    );
    assert_eq!(
        s.count("SELECT COUNT(*) FROM unread_counters WHERE note = 'a, b'")
            .await,
        10
    );
    // 9 rows loaded, 1 inserted since the rebuild: the trigger still fires.
    assert_eq!(s.count("SELECT COUNT(*) FROM counter_log").await, 10);
    assert_eq!(
        s.count("SELECT COUNT(*) FROM pragma_foreign_keys WHERE foreign_keys = 1")
            .await,
        1,
        "foreign keys are on again"
    );
    s.finish().await;
}

/// An index on the counter alone does not need the rebuild: it is dropped, then the column in
/// place.
#[tokio::test]
async fn sqlite_index_on_the_counter_is_dropped_first() {
    let mut schema = scenario::schema_sql();
    schema.push("CREATE INDEX unread_by_count ON unread_counters (conv_id, unread_count)".into());
    let Some(mut s) = setup_with(Backend::Sqlite, "sqlite_index", "per_member", &schema).await
    else {
        return;
    };
    s.audit().await;
    let dry = s.contract(&s.opts()).await.unwrap();
    let ddl = dry.ddl.join("\n");
    assert!(
        ddl.contains("DROP INDEX \"main\".\"unread_by_count\";"),
        "{ddl}"
    );
    assert!(
        ddl.contains("ALTER TABLE \"unread_counters\" DROP COLUMN \"unread_count\";"),
        "{ddl}"
    );
    let o = s
        .contract(&ContractOptions {
            execute: true,
            ..s.opts()
        })
        .await
        .unwrap();
    assert!(o.executed);
    assert!(!s.column_exists("unread_counters", "unread_count").await);
    s.finish().await;
}

/// A trigger that still uses the counter makes the plan refuse (bad input): SQLite would leave
/// it broken.
#[tokio::test]
async fn sqlite_trigger_using_the_counter_is_refused() {
    let mut schema = scenario::schema_sql();
    schema.push(
        "CREATE TRIGGER bump AFTER INSERT ON messages BEGIN UPDATE unread_counters SET unread_count = unread_count + 1 WHERE conv_id = NEW.conv_id; END"
            .into(),
    );
    let Some(mut s) = setup_with(Backend::Sqlite, "sqlite_trigger", "per_member", &schema).await
    else {
        return;
    };
    s.audit().await;
    let err = s.contract(&s.opts()).await.unwrap_err();
    assert_eq!(tidemark::cli::Outcome::code_of(&err), 2);
    assert!(err.to_string().contains("bump"), "{err}");
    s.finish().await;
}
