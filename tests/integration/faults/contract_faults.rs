//! The contract killed at each step, after the drop and while its DDL waits, and the server lost mid-archive or while the DDL waits: the column and the archive stay consistent.

use super::*;

on_every_backend!(multi_thread: contract_kill9_at_each_step, contract_kill9_after_the_drop);

on_every_backend!(servers: contract_server_lost_mid_archive, contract_server_lost_while_ddl_waits, contract_kill9_while_ddl_waits);

// ---- kill -9 during contract --execute ----

/// A generated fleet, expanded and backfilled: its counters drift, so every contract here is
/// forced past the closed gate (`--force --reason`), which runs the same steps.
async fn contract_fixture(backend: Backend, label: &str) -> Option<(Fixture, Vec<String>)> {
    let f = Fixture::generated(backend, label).await?;
    f.run(&BACKFILL).expect_code(0);
    let mut conn = f.connect().await;
    let values = counters(&mut conn).await;
    assert!(values.len() > 100, "many counter rows: {}", values.len());
    let _ = conn.close().await;
    Some((f, values))
}

/// The contract arguments of every run here (several archive batches).
const CONTRACT: [&str; 8] = [
    "contract",
    "--execute",
    "--quiet",
    "--force",
    "--reason",
    "fault test",
    "--batch-size",
    "200",
];

/// kill -9 at each step of `contract --execute` in turn (in the archive after its first
/// batch, before the checksum, before the DDL), each a new run on the same database: after
/// each kill the column is there with every value; the last rerun drops it, with an archive
/// equal to the values.
async fn contract_kill9_at_each_step(backend: Backend) {
    let Some((f, values)) = contract_fixture(backend, "fault_contract9").await else {
        return;
    };
    let mut conn = f.connect().await;
    let signal_file = f.path().join("paused");
    for step in ["archive", "checksum", "ddl"] {
        let child = f.spawn(
            &CONTRACT,
            &[
                ("TIDEMARK_TEST_PAUSE_AT", step),
                ("TIDEMARK_TEST_PAUSE_FILE", signal_file.to_str().unwrap()),
            ],
        );
        until!(&format!("the contract at {step}"), {
            signal_file.exists().then_some(())
        });
        faults::signal(&child, "KILL");
        let run = wait(child, LIMIT);
        assert_eq!(run.code, None, "killed: {run:?}");
        std::fs::remove_file(&signal_file).unwrap();
        assert!(
            counter_column_exists(&mut conn, backend).await,
            "{step}: the column is there"
        );
        assert_eq!(counters(&mut conn).await, values, "{step}: every value");
        let contracts = faults::ledger(&mut conn).await;
        let (id, _, status) = contracts
            .iter()
            .rev()
            .find(|(_, s, _)| s == "contract")
            .unwrap()
            .clone();
        let rows = archived(&mut conn, id).await;
        match step {
            "archive" => assert!(
                !rows.is_empty() && rows.len() < values.len(),
                "archive: part archived ({} of {})",
                rows.len(),
                values.len()
            ),
            _ => assert_eq!(rows, values, "{step}: archived whole"),
        }
        eprintln!(
            "{}: kill -9 at {step}: contract run #{id} left {status:?}, {} archived rows",
            backend.name(),
            rows.len()
        );
        // The killed run stays `running` (nothing could record its end); each earlier killed
        // run was marked `abandoned` by the next run once it held the runner lock.
        let runs = statuses(&mut conn, "contract").await;
        let mut want = vec!["abandoned"; runs.len() - 1];
        want.push("running");
        assert_eq!(runs, want, "{step}: the contract runs in the ledger");
    }
    let run = f.run(&CONTRACT);
    run.expect_code(0);
    assert!(!counter_column_exists(&mut conn, backend).await);
    let contracts = faults::ledger(&mut conn).await;
    let (id, _, status) = contracts
        .iter()
        .rev()
        .find(|(_, s, _)| s == "contract")
        .unwrap()
        .clone();
    assert_eq!(status, "done");
    // The three killed runs are `abandoned`.
    assert_eq!(
        statuses(&mut conn, "contract").await,
        ["abandoned", "abandoned", "abandoned", "done"]
    );
    assert_eq!(archived(&mut conn, id).await, values);
    let again = f.run(&["contract"]);
    again.expect_code(0);
    assert!(again.stdout.contains("nothing left to drop"), "{again:?}");
    done(f, vec![conn]).await;
}

/// kill -9 right after the DDL committed, before the ledger recorded it (issue 25 row 8): the
/// column is gone, the run's verified archive holds every value and its ledger row says
/// `running`. `status` and a dry run name the run that dropped it and say that its end is not
/// recorded; `contract --execute` checks the archive against what the run recorded before
/// its DDL, records the drop in that run's row (done, with the archive and the DDL) and says
/// so; then `status` reads the drop from the ledger and a last run has nothing left to do.
async fn contract_kill9_after_the_drop(backend: Backend) {
    let Some((f, values)) = contract_fixture(backend, "fault_contract_dropped").await else {
        return;
    };
    let mut conn = f.connect().await;
    let signal_file = f.path().join("paused");
    let child = f.spawn(
        &CONTRACT,
        &[
            ("TIDEMARK_TEST_PAUSE_AT", "dropped"),
            ("TIDEMARK_TEST_PAUSE_FILE", signal_file.to_str().unwrap()),
        ],
    );
    until!("the contract after its DDL", {
        signal_file.exists().then_some(())
    });
    faults::signal(&child, "KILL");
    let run = wait(child, LIMIT);
    assert_eq!(run.code, None, "killed: {run:?}");
    std::fs::remove_file(&signal_file).unwrap();
    assert!(!counter_column_exists(&mut conn, backend).await, "dropped");
    let (id, _, _) = faults::ledger(&mut conn)
        .await
        .into_iter()
        .rev()
        .find(|(_, s, _)| s == "contract")
        .unwrap();
    assert_eq!(archived(&mut conn, id).await, values, "the archive");
    assert_eq!(statuses(&mut conn, "contract").await, ["running"]);

    let status = f.run(&["status"]);
    status.expect_code(0);
    assert!(
        status.stdout.contains(&format!(
            "contract:  done: the counter was dropped by run #{id}, whose process ended before the ledger recorded it (its archive verifies): `tidemark contract --execute` records it"
        )),
        "{status:?}"
    );
    assert!(!status.stdout.contains("gate would open"), "{status:?}");
    let dry = f.run(&["contract"]);
    dry.expect_code(0);
    assert!(
        dry.stdout.contains(&format!(
            "nothing left to drop: column unread_counters.unread_count is gone (dropped by contract run #{id}, whose end the ledger does not record: its archive verifies; --execute records it)"
        )),
        "{dry:?}"
    );
    assert_eq!(
        statuses(&mut conn, "contract").await,
        ["running"],
        "a dry run writes nothing"
    );

    let rerun = f.run(&CONTRACT[..2]);
    rerun.expect_code(0);
    assert!(
        rerun.stdout.contains(&format!(
            "recorded: contract run #{id} dropped column unread_counters.unread_count; its process ended before the ledger recorded it, and its archive verifies ({} rows, as recorded before the DDL)",
            values.len()
        )),
        "{rerun:?}"
    );
    assert_eq!(
        statuses(&mut conn, "contract").await,
        ["done"],
        "no other run"
    );
    let row = sqlx::query(&format!(
        "SELECT summary FROM tidemark_ledger WHERE id = {id}"
    ))
    .fetch_one(&mut conn)
    .await
    .unwrap();
    let summary: serde_json::Value =
        serde_json::from_str(&tidemark::values::text(&row, "summary").unwrap().unwrap()).unwrap();
    assert_eq!(summary["executed"], true, "{summary}");
    assert_eq!(
        summary["archive"]["checksum"]["rows"],
        values.len(),
        "{summary}"
    );
    assert!(
        summary["ddl"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l.as_str().unwrap().contains("DROP COLUMN")),
        "{summary}"
    );
    let status = f.run(&["status"]);
    assert!(
        status.stdout.contains(&format!(
            "contract:  done: the counter was dropped by run #{id}\n"
        )),
        "{status:?}"
    );
    let again = f.run(&CONTRACT[..2]);
    again.expect_code(0);
    assert!(
        again.stdout.contains(&format!(
            "nothing left to drop: column unread_counters.unread_count is gone (dropped by contract run #{id})"
        )),
        "{again:?}"
    );
    assert_eq!(statuses(&mut conn, "contract").await, ["done"]);
    done(f, vec![conn]).await;
}

/// The contract's server session is ended while it waits after its first archive batch (the
/// `archive` pause): the next batch meets the lost connection; exit 3, and the message names
/// the step, the batch and what was kept (issue 25, row 14): the counter intact, nothing
/// dropped, the rows archived so far under the run; a rerun drops it with the whole archive.
async fn contract_server_lost_mid_archive(backend: Backend) {
    let Some((f, values)) = contract_fixture(backend, "fault_contract_lost").await else {
        return;
    };
    let mut admin = f.connect().await;
    let mine = vec![session_id(&mut admin, backend).await];
    let signal_file = f.path().join("paused");
    let child = f.spawn(
        &CONTRACT,
        &[
            ("TIDEMARK_TEST_PAUSE_AT", "archive"),
            ("TIDEMARK_TEST_PAUSE_FILE", signal_file.to_str().unwrap()),
        ],
    );
    until!("the contract at the archive", {
        signal_file.exists().then_some(())
    });
    let victim = tidemark_session(&mut admin, backend, &f.db.name, &mine).await;
    kill_session(&mut admin, backend, victim).await;
    std::fs::remove_file(&signal_file).unwrap();
    let run = wait(child, LIMIT);
    run.expect_code(3);
    for said in [
        "archiving column unread_counters.unread_count stopped in batch 2 (conversations after ",
        "column unread_counters.unread_count is intact and nothing was dropped",
        "the 1 batch(es) archived so far stay in tidemark_counter_archive under contract run #",
        "run the same command again",
    ] {
        assert!(run.stderr.contains(said), "says {said:?}: {run:?}");
    }
    eprintln!("{}: {}", backend.name(), run.stderr.trim());
    assert!(counter_column_exists(&mut admin, backend).await);
    assert_eq!(counters(&mut admin).await, values);
    f.run(&CONTRACT).expect_code(0);
    assert!(!counter_column_exists(&mut admin, backend).await);
    done(f, vec![admin]).await;
}

/// The contract's server session is ended while its DDL waits for a lock a second connection
/// holds: exit 3; the message names the drop, says that the lost connection leaves unknown
/// whether the server applied it, and that the verified archive stays (issue 25, row 14);
/// a rerun finishes.
async fn contract_server_lost_while_ddl_waits(backend: Backend) {
    let Some((f, values)) = contract_fixture(backend, "fault_contract_ddl_lost").await else {
        return;
    };
    let mut admin = f.connect().await;
    let mut holder = f.connect().await;
    let mine = vec![
        session_id(&mut admin, backend).await,
        session_id(&mut holder, backend).await,
    ];
    let reader = match backend {
        Backend::Postgres => "BEGIN",
        _ => "START TRANSACTION",
    };
    exec_all(
        &mut holder,
        &[
            reader.to_string(),
            "SELECT COUNT(*) FROM unread_counters".to_string(),
        ],
    )
    .await;
    let mut args = CONTRACT.to_vec();
    args.extend(["--lock-timeout", "60s"]);
    let child = f.spawn(&args, &[]);
    let victim = until!("the DDL waiting for the lock", {
        if statuses(&mut admin, "contract").await.is_empty() {
            None
        } else {
            waiting_session(&mut admin, backend, &f.db.name, &mine).await
        }
    });
    kill_session(&mut admin, backend, victim).await;
    let run = wait(child, LIMIT);
    exec_all(&mut holder, &["ROLLBACK".to_string()]).await;
    run.expect_code(3);
    for said in [
        "dropping column unread_counters.unread_count",
        "the connection to the database was lost while it ran",
        "the verified archive of contract run #",
        "run the same command again",
    ] {
        assert!(run.stderr.contains(said), "says {said:?}: {run:?}");
    }
    eprintln!("{}: {}", backend.name(), run.stderr.trim());
    let id = faults::ledger(&mut admin)
        .await
        .iter()
        .rev()
        .find(|(_, s, _)| s == "contract")
        .unwrap()
        .0;
    assert_eq!(
        archived(&mut admin, id).await,
        values,
        "the verified archive"
    );
    f.run(&CONTRACT).expect_code(0);
    assert!(!counter_column_exists(&mut admin, backend).await);
    done(f, vec![admin, holder]).await;
}

/// tidemark's server session on database `db` (not one of `mine`), found by its
/// `application_name` on PostgreSQL (`tidemark <lease time> …`), as the one other connection on MariaDB/MySQL.
async fn tidemark_session(
    admin: &mut AnyConnection,
    backend: Backend,
    db: &str,
    mine: &[i64],
) -> i64 {
    let not_mine = mine
        .iter()
        .map(|m| m.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let sql = match backend {
        Backend::Postgres => format!(
            "SELECT CAST(pid AS BIGINT) FROM pg_stat_activity WHERE datname = '{db}' \
             AND pid NOT IN ({not_mine}) AND application_name LIKE 'tidemark%' LIMIT 1"
        ),
        _ => format!(
            "SELECT CAST(ID AS SIGNED) FROM information_schema.PROCESSLIST \
             WHERE DB = '{db}' AND ID NOT IN ({not_mine}) LIMIT 1"
        ),
    };
    sqlx::query_scalar(&sql)
        .fetch_one(&mut *admin)
        .await
        .unwrap()
}

/// kill -9 while the DDL waits for a lock a second connection holds on the counter table
/// (an open transaction that read it): the archive is verified before the DDL starts, so
/// whether the server then drops the column or not, the values are kept; a rerun finishes.
async fn contract_kill9_while_ddl_waits(backend: Backend) {
    let Some((f, values)) = contract_fixture(backend, "fault_contract_ddl").await else {
        return;
    };
    let mut admin = f.connect().await;
    let mut holder = f.connect().await;
    let mine = vec![
        session_id(&mut admin, backend).await,
        session_id(&mut holder, backend).await,
    ];
    let reader = match backend {
        Backend::Postgres => vec![
            "BEGIN".to_string(),
            "SELECT COUNT(*) FROM unread_counters".to_string(),
        ],
        _ => vec![
            "START TRANSACTION".to_string(),
            "SELECT COUNT(*) FROM unread_counters".to_string(),
        ],
    };
    exec_all(&mut holder, &reader).await;
    let mut args = CONTRACT.to_vec();
    args.extend(["--lock-timeout", "60s"]);
    let child = f.spawn(&args, &[]);
    // The contract's run in the ledger (the archive follows it) and a session waiting: the DDL.
    until!("the DDL waiting for the lock", {
        if statuses(&mut admin, "contract").await.is_empty() {
            None
        } else {
            waiting_session(&mut admin, backend, &f.db.name, &mine).await
        }
    });
    faults::signal(&child, "KILL");
    let run = wait(child, LIMIT);
    assert_eq!(run.code, None, "killed: {run:?}");
    exec_all(&mut holder, &["ROLLBACK".to_string()]).await;
    let id = faults::ledger(&mut admin)
        .await
        .iter()
        .rev()
        .find(|(_, s, _)| s == "contract")
        .unwrap()
        .0;
    // The server may still run the DDL once the lock is free: wait until it settles.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let column = counter_column_exists(&mut admin, backend).await;
    if column {
        assert_eq!(counters(&mut admin).await, values);
    }
    assert_eq!(
        archived(&mut admin, id).await,
        values,
        "the verified archive"
    );
    eprintln!(
        "{}: kill -9 while the DDL waited: column {}",
        backend.name(),
        if column { "kept" } else { "dropped" }
    );
    let rerun = f.run(&CONTRACT);
    rerun.expect_code(0);
    assert!(!counter_column_exists(&mut admin, backend).await);
    done(f, vec![admin, holder]).await;
}
