//! `inspect` reads the declared foreign keys from the catalogs (issue 32: pg_constraint,
//! information_schema.KEY_COLUMN_USAGE, pragma_foreign_key_list): a conversation column with
//! an unusual name (`thread_ref`, neither a known name nor `<x>_id`) is found when it is
//! declared as a foreign key, and not found without the declaration. The proposal, unedited,
//! backfills the watermarks worked out by hand below.

use crate::common::{bin, exec_all, on_every_backend, Backend, TestDb};
use sqlx::Row;

on_every_backend!(declared_foreign_key_names_the_conversation);

/// The schema, with or without the foreign keys, and its data: thread 1 holds notes 1, 2, 4,
/// thread 2 notes 3, 5.
fn schema(with_keys: bool) -> Vec<String> {
    let fk = if with_keys {
        ", FOREIGN KEY (thread_ref) REFERENCES threads (id)"
    } else {
        ""
    };
    vec![
        "CREATE TABLE threads (id BIGINT NOT NULL PRIMARY KEY, title VARCHAR(40) NOT NULL)".into(),
        format!(
            "CREATE TABLE notes (id BIGINT NOT NULL PRIMARY KEY, thread_ref BIGINT NOT NULL, \
             sender_id VARCHAR(64) NOT NULL, created_at BIGINT NOT NULL{fk})"
        ),
        format!(
            "CREATE TABLE members (thread_ref BIGINT NOT NULL, user_id VARCHAR(64) NOT NULL, \
             unread_count INT NOT NULL, PRIMARY KEY (thread_ref, user_id){fk})"
        ),
        "INSERT INTO threads (id, title) VALUES (1, 'a'), (2, 'b')".into(),
        "INSERT INTO notes (id, thread_ref, sender_id, created_at) VALUES \
         (1, 1, 'u1', 100), (2, 1, 'u2', 101), (3, 2, 'u1', 102), (4, 1, 'u1', 103), \
         (5, 2, 'u2', 104)"
            .into(),
        "INSERT INTO members (thread_ref, user_id, unread_count) VALUES \
         (1, 'u1', 0), (1, 'u2', 1), (2, 'u1', 1), (2, 'u2', 0)"
            .into(),
    ]
}

async fn declared_foreign_key_names_the_conversation(backend: Backend) {
    for with_keys in [false, true] {
        let Some(db) = TestDb::create(backend, "insp_fk").await else {
            return;
        };
        let mut conn = db.connect().await;
        exec_all(&mut conn, &schema(with_keys)).await;
        let dir = tempfile::tempdir().unwrap();
        let run = bin::run(dir.path(), &["inspect", "--database", &db.url]);
        if !with_keys {
            // Without the declaration, nothing names thread_ref a conversation.
            run.expect_code(1);
            assert!(
                !run.stdout.contains("conversation = \"thread_ref\""),
                "{}",
                run.stdout
            );
            drop(conn);
            db.cleanup().await;
            continue;
        }
        run.expect_code(0);
        let text = &run.stdout;
        for fact in [
            "table = \"notes\"",
            "conversation = \"thread_ref\"",
            "column = \"unread_count\"",
        ] {
            assert!(text.contains(fact), "{fact:?} in:\n{text}");
        }
        let mapping = dir.path().join("tidemark.toml");
        std::fs::write(&mapping, text).unwrap();
        let mapping = mapping.to_string_lossy().to_string();
        for cmd in ["expand", "backfill"] {
            bin::run(
                dir.path(),
                &[cmd, "--database", &db.url, "--mapping", &mapping],
            )
            .expect_code(0);
        }
        // By hand, semantics.md's counter evidence: L = the member's countable positions
        // (others' notes), newest first; k = 0 → the newest note; 0 < k < |L| → L[k];
        // k >= |L| → 0. (1, u1) k 0 → 4; (1, u2) L [4, 1], k 1 → 1; (2, u1) L [5], k 1 → 0;
        // (2, u2) k 0 → 5.
        let rows = sqlx::query(
            "SELECT conversation_id, user_id, last_read_id FROM read_watermarks \
             ORDER BY conversation_id, user_id",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap();
        let got: Vec<(i64, String, i64)> = rows
            .iter()
            .map(|r| {
                (
                    r.try_get(0).unwrap(),
                    tidemark::values::text(r, 1).unwrap().unwrap_or_default(),
                    r.try_get(2).unwrap(),
                )
            })
            .collect();
        let want = vec![
            (1, "u1".to_string(), 4),
            (1, "u2".to_string(), 1),
            (2, "u1".to_string(), 0),
            (2, "u2".to_string(), 5),
        ];
        assert_eq!(got, want);
        drop(conn);
        db.cleanup().await;
    }
}
