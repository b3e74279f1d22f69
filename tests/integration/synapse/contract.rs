//! The contract on the Synapse fixture: its real drift accepted as a tolerance, the column archived and dropped, and thread rows (several per key) refused before anything is archived.

use super::*;

on_every_backend!(thread_rows_are_refused_by_the_contract);

/// The contract on the fixture. Its drift is real (Synapse's counters are wrong where the table
/// says), so the DBA accepts it as the tolerance of an audit (6 rows, |drift| up to 3, ratio
/// 0.5) and `--accept-tolerance` lets that audit count; `contract --execute` runs its final
/// audit with the same tolerance, archives `event_push_summary.unread_count` and drops it.
pub(super) async fn contract(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: tidemark::dialect::Dialect,
    dir: &Path,
    problems: &mut Vec<String>,
) {
    use tidemark::stages::contract::{self, ContractOptions};
    let tolerated = audit::run(
        conn,
        mapping,
        dialect,
        &audit::AuditOptions {
            report: dir.join("tolerated.csv"),
            max_drift_rows: 6,
            max_abs_drift: 3,
            max_drift_ratio: 0.5,
            ..Default::default()
        },
    )
    .await
    .expect("audit with a tolerance");
    assert!(tolerated.summary.passed, "{:?}", tolerated.summary);

    // Every row of the table (every thread's, though the fixture has only 'main'): the
    // column is dropped from all of them.
    let read_all = "SELECT room_id, user_id, unread_count FROM event_push_summary";
    let before: BTreeMap<(String, String), Option<i64>> = sqlx::query(read_all)
        .fetch_all(&mut *conn)
        .await
        .expect("event_push_summary")
        .iter()
        .map(|r| {
            (
                (
                    text(r, 0).unwrap().unwrap_or_default(),
                    text(r, 1).unwrap().unwrap_or_default(),
                ),
                r.try_get::<Option<i64>, _>(2).unwrap(),
            )
        })
        .collect();
    let archive_csv = dir.join("archive.csv");
    let outcome = contract::run(
        conn,
        mapping,
        dialect,
        &ContractOptions {
            execute: true,
            gate: tidemark::gate::GateOptions {
                accept_tolerance: true,
                ..Default::default()
            },
            archive_csv: Some(archive_csv.clone()),
            ..Default::default()
        },
    )
    .await
    .expect("contract --execute");
    if !outcome.executed || outcome.gate_closed() {
        problems.push(format!("contract --execute did not drop: {outcome:?}"));
        return;
    }
    // The archive: one row per counter row, the dropped values.
    let archived: BTreeMap<(String, String), Option<i64>> =
        sqlx::query("SELECT conversation_id, user_id, counter_value FROM tidemark_counter_archive")
            .fetch_all(&mut *conn)
            .await
            .expect("tidemark_counter_archive")
            .iter()
            .map(|r| {
                (
                    (
                        text(r, 0).unwrap().unwrap_or_default(),
                        text(r, 1).unwrap().unwrap_or_default(),
                    ),
                    r.try_get::<Option<i64>, _>(2).unwrap(),
                )
            })
            .collect();
    let sum = |m: &BTreeMap<(String, String), Option<i64>>| m.values().flatten().sum::<i64>();
    assert_eq!(before.len(), EXPECTED.len());
    assert_eq!(sum(&before), EXPECTED.iter().map(|e| e.stored).sum::<i64>());
    if archived != before {
        problems.push(format!(
            "the archive ({} rows, sum {}) differs from the dropped column ({} rows, sum {}):\n{archived:?}\n{before:?}",
            archived.len(),
            sum(&archived),
            before.len(),
            sum(&before)
        ));
    }
    let from_csv = csv::read(&archive_csv);
    if from_csv.rows.len() != before.len() {
        problems.push(format!(
            "archive CSV: {} rows, expected {}",
            from_csv.rows.len(),
            before.len()
        ));
    }
    // The column is gone; the rest of the table stays, every row.
    if sqlx::query(read_all).fetch_all(&mut *conn).await.is_ok() {
        problems.push("event_push_summary.unread_count is still there".into());
    }
    let kept: i64 = sqlx::query("SELECT COUNT(notif_count) FROM event_push_summary")
        .fetch_one(&mut *conn)
        .await
        .expect("event_push_summary keeps its other columns")
        .try_get(0)
        .unwrap();
    if kept != EXPECTED.len() as i64 {
        problems.push(format!("event_push_summary kept {kept} rows"));
    }
}

/// A member with a thread's summary row beside the main timeline's (the fixture has only
/// 'main' rows): the archive keys values by (room, user), so it could not tell the two rows'
/// values apart; the contract (dry run or not) refuses with exit 2 before archiving anything,
/// naming the table and the room, and the column stays.
async fn thread_rows_are_refused_by_the_contract(backend: Backend) {
    use tidemark::stages::contract::{self, ContractOptions};
    let Some(mut f) = Fixture::load_files(backend, "synapse", &["synapse", "views"]).await else {
        return;
    };
    let (dialect, mapping) = (f.dialect, f.mapping.clone());
    let conn = &mut f.conn;
    let (room, user): (String, String) = {
        let row = sqlx::query(
            "SELECT room_id, user_id FROM event_push_summary WHERE thread_id = 'main' ORDER BY room_id, user_id",
        )
        .fetch_one(&mut *conn)
        .await
        .expect("a main row");
        (row.get(0), row.get(1))
    };
    exec_all(
        conn,
        &[format!(
            "INSERT INTO event_push_summary (user_id, room_id, notif_count, stream_ordering, unread_count, thread_id) \
             VALUES ('{user}', '{room}', 0, 1, 7, '$thread1')"
        )],
    )
    .await;
    expand::run(conn, &mapping, dialect, false)
        .await
        .expect("expand");
    for execute in [false, true] {
        let err = contract::run(
            conn,
            &mapping,
            dialect,
            &ContractOptions {
                execute,
                force: true,
                reason: Some("test".into()),
                ..Default::default()
            },
        )
        .await
        .expect_err("the contract refuses keys with several rows");
        let text = format!("{err:#}");
        assert!(
            text.contains("1 key(s) of the archive") && text.contains(&room),
            "{text}"
        );
        assert_eq!(tidemark::cli::Outcome::code_of(&err), 2, "{text}");
    }
    let n: i64 = sqlx::query_scalar("SELECT COUNT(unread_count) FROM event_push_summary")
        .fetch_one(&mut *conn)
        .await
        .expect("the column is still there");
    assert!(n > 0);
    let archived: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tidemark_counter_archive")
        .fetch_one(&mut *conn)
        .await
        .expect("the archive table");
    assert_eq!(archived, 0, "nothing archived");
    f.finish().await;
}
