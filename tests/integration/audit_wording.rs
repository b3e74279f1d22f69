//! Issue 29, row 18: under a mapping never backfilled, where the application had written a
//! watermark for every member, the audit said "warning: 0 members have no watermark … the
//! drift above includes theirs". The zero case now says that no audited member lacks one
//! (and that no backfill has run, so the gate does not count the audit). And
//! `--accept-evidence-share` skips the measurement it accepts: the summary says it was not
//! measured instead of listing the shares.

use crate::common::faults::Fixture;
use crate::common::{exec_all, on_every_backend, Backend, TestDb};

on_every_backend!(zero_members_without_watermark_is_worded);

/// One conversation of four messages from `a`; members `b` and `c` with 2 unread each and
/// read receipts for 2; `expand` applied.
fn data() -> Vec<String> {
    let mut sql = tidemark::legacy_schema::schema_sql();
    for id in 1..=4i64 {
        sql.push(format!(
            "INSERT INTO messages (conv_id, id, sender_id) VALUES (1, {id}, 'a')"
        ));
    }
    for user in ["b", "c"] {
        sql.push(format!(
            "INSERT INTO members (conv_id, user_id, active) VALUES (1, '{user}', 1)"
        ));
        sql.push(format!(
            "INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES (1, '{user}', 2)"
        ));
        sql.push(format!(
            "INSERT INTO read_receipts (conv_id, user_id, message_id) VALUES (1, '{user}', 2)"
        ));
    }
    sql
}

/// The application writes both members' watermarks (2) before any backfill: the audit
/// (no drift) warns that no backfill has run, without "0 members have no watermark". Then a
/// backfill with `--accept-evidence-share` prints no share and says it was not measured; the
/// audit after it has no warning.
async fn zero_members_without_watermark_is_worded(backend: Backend) {
    let Some(db) = TestDb::create(backend, "audit_wording").await else {
        return;
    };
    let mut conn = db.connect().await;
    exec_all(&mut conn, &data()).await;
    let f = Fixture::with_mapping(db, &crate::scenario::mapping_toml("per_member", false));
    exec_all(
        &mut conn,
        &[
            "INSERT INTO read_watermarks (user_id, conversation_id, last_read_id) VALUES ('b', 1, 2)"
                .to_string(),
            "INSERT INTO read_watermarks (user_id, conversation_id, last_read_id) VALUES ('c', 1, 2)"
                .to_string(),
        ],
    )
    .await;
    let audit = f.run(&["audit", "--report", "drift.csv"]);
    audit.expect_code(0);
    assert!(
        !audit.stdout.contains("0 members have no watermark")
            && !audit.stdout.contains("includes theirs"),
        "{}",
        audit.stdout
    );
    assert!(
        audit.stdout.contains(
            "warning: no audited member lacks a watermark, but no backfill of this mapping has run: run `"
        ) && audit
            .stdout
            .contains("(the contract gate does not count this audit)"),
        "{}",
        audit.stdout
    );

    let backfill = f.run(&["backfill", "--settle-time", "0", "--accept-evidence-share"]);
    backfill.expect_code(0);
    assert!(
        backfill
            .stdout
            .contains("evidence share not measured: accepted with --accept-evidence-share")
            && !backfill.stdout.contains("evidence[1]"),
        "{}",
        backfill.stdout
    );
    let measured = f.run(&["backfill", "--settle-time", "0"]);
    measured.expect_code(0);
    assert!(
        measured.stdout.contains("evidence[1] position")
            && !measured.stdout.contains("not measured"),
        "{}",
        measured.stdout
    );
    let audit = f.run(&["audit", "--report", "drift.csv"]);
    audit.expect_code(0);
    assert!(!audit.stdout.contains("warning"), "{}", audit.stdout);
    drop(conn);
    f.db.cleanup().await;
}
