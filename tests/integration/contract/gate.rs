//! The gate: closed for each reason, open in a dry run that changes nothing, the final audit inside it, `--force --reason`, and the CLI's exit codes.

use super::*;

on_every_backend!(multi_thread: gate_closed_for_each_reason, gate_open_dry_run_changes_nothing, final_audit_inside_the_gate_must_pass, force_with_reason_bypasses_a_closed_gate, cli_exit_codes);

fn reasons(o: &ContractOutcome) -> Vec<Reason> {
    o.verdict.as_ref().expect("a verdict").reasons.clone()
}

fn assert_closed(o: &ContractOutcome, what: &str, pred: impl Fn(&Reason) -> bool) {
    let v = o.verdict.as_ref().expect("a verdict");
    assert!(!v.open, "{what}: the gate is open");
    assert!(o.gate_closed(), "{what}");
    assert!(!o.executed, "{what}");
    assert!(
        v.reasons.iter().any(pred),
        "{what}: reasons {:?}",
        v.reasons
    );
    // Every reason is printable.
    for r in &v.reasons {
        assert!(!r.to_string().is_empty());
    }
}

async fn gate_closed_for_each_reason(backend: Backend) {
    let Some(mut s) = setup(backend, "gate_reasons", "per_member").await else {
        return;
    };
    let opts = s.opts();

    // No audit.
    let o = s.contract(&opts).await.unwrap();
    assert_closed(&o, "no audit", |r| *r == Reason::NoAudit);
    assert_eq!(reasons(&o), vec![Reason::NoAudit]);

    // Only audits of another mapping.
    let other = Mapping::parse(&scenario::mapping_toml("per_member", true), "<other>").unwrap();
    assert_ne!(other.fingerprint, s.mapping.fingerprint);
    let (other_id, _) = s.audit_with(&other, false).await;
    assert!(other_id > 0);
    let o = s.contract(&opts).await.unwrap();
    assert_closed(&o, "other mapping", |r| {
        matches!(r, Reason::OtherMapping { audits: 1, .. })
    });
    assert_eq!(reasons(&o).len(), 1);

    // One clean audit of this mapping: open; fewer than asked: closed.
    let (first, passed) = s.audit().await;
    assert!(passed);
    let o = s.contract(&opts).await.unwrap();
    assert!(o.verdict.as_ref().unwrap().open, "{:?}", reasons(&o));
    assert_eq!(o.verdict.as_ref().unwrap().relied_on, vec![first]);
    let two = ContractOptions {
        gate: tidemark::gate::GateOptions {
            min_clean_audits: 2,
            ..Default::default()
        },
        ..opts.clone()
    };
    let o = s.contract(&two).await.unwrap();
    assert_closed(&o, "fewer clean audits", |r| {
        *r == Reason::TooFewCleanAudits { have: 1, want: 2 }
    });
    let (second, _) = s.audit().await;
    let o = s.contract(&two).await.unwrap();
    assert!(o.verdict.as_ref().unwrap().open, "{:?}", reasons(&o));
    assert_eq!(o.verdict.as_ref().unwrap().relied_on, vec![second, first]);

    // Old audits.
    s.exec("UPDATE tidemark_ledger SET started_ms = started_ms - 172800000 WHERE stage = 'audit'")
        .await;
    let o = s.contract(&opts).await.unwrap();
    assert_closed(
        &o,
        "old audit",
        |r| matches!(r, Reason::AuditTooOld { id, .. } if *id == second),
    );
    let young = ContractOptions {
        gate: tidemark::gate::GateOptions {
            max_audit_age: Duration::from_secs(3 * 86400),
            ..Default::default()
        },
        ..opts.clone()
    };
    assert!(s.contract(&young).await.unwrap().verdict.unwrap().open);

    // A failed audit after the clean ones.
    s.exec("UPDATE unread_counters SET unread_count = unread_count + 5 WHERE conv_id = 2 AND user_id = 'u2'")
        .await;
    let (failed, passed) = s.audit().await;
    assert!(!passed);
    let o = s.contract(&young).await.unwrap();
    assert_closed(
        &o,
        "failed audit",
        |r| matches!(r, Reason::AuditFailed { id, crossed } if *id == failed && !crossed.is_empty()),
    );

    // A passing audit within a tolerance: counts only with --accept-tolerance.
    let mapping = s.mapping.clone();
    let (tolerant, passed) = s.audit_with(&mapping, true).await;
    assert!(passed);
    let o = s.contract(&opts).await.unwrap();
    assert_closed(
        &o,
        "tolerance",
        |r| matches!(r, Reason::ToleranceNotAccepted { id, .. } if *id == tolerant),
    );
    let accept = ContractOptions {
        gate: tidemark::gate::GateOptions {
            accept_tolerance: true,
            ..Default::default()
        },
        ..opts.clone()
    };
    let o = s.contract(&accept).await.unwrap();
    assert!(o.verdict.as_ref().unwrap().open, "{:?}", reasons(&o));
    assert_eq!(o.verdict.as_ref().unwrap().relied_on, vec![tolerant]);

    // Every reason at once is listed; then --require-unused.
    every_reason_at_once_and_statement_use(&mut s, &opts, backend).await;

    // --execute with a closed gate changes nothing.
    let closed = ContractOptions {
        execute: true,
        ..two.clone()
    };
    let o = s.contract(&closed).await.unwrap();
    assert!(o.gate_closed());
    assert!(!o.executed);
    assert!(s.column_exists("unread_counters", "unread_count").await);
    assert_eq!(
        s.count("SELECT COUNT(*) FROM tidemark_counter_archive")
            .await,
        0
    );
    assert!(s.contracts().await.is_empty());
    s.finish().await;
}

/// Part of `gate_closed_for_each_reason`: every reason at once is listed, and
/// `--require-unused` says what the server knows of the column's use.
async fn every_reason_at_once_and_statement_use(
    s: &mut Setup,
    opts: &ContractOptions,
    backend: Backend,
) {
    // Every reason at once is listed.
    let all = ContractOptions {
        gate: tidemark::gate::GateOptions {
            min_clean_audits: 3,
            max_audit_age: Duration::from_millis(1),
            accept_tolerance: true,
            require_unused: true,
        },
        ..opts.clone()
    };
    tokio::time::sleep(Duration::from_millis(5)).await;
    let o = s.contract(&all).await.unwrap();
    let v = o.verdict.as_ref().unwrap();
    assert!(!v.open);
    assert!(v
        .reasons
        .iter()
        .any(|r| matches!(r, Reason::AuditFailed { .. })));
    assert!(v
        .reasons
        .iter()
        .any(|r| matches!(r, Reason::TooFewCleanAudits { have: 1, want: 3 })));
    assert!(v
        .reasons
        .iter()
        .any(|r| matches!(r, Reason::AuditTooOld { .. })));

    // --require-unused: these servers keep no statement statistics (or show the column
    // unused): the gate says which.
    let require = ContractOptions {
        gate: tidemark::gate::GateOptions {
            require_unused: true,
            accept_tolerance: true,
            ..Default::default()
        },
        ..opts.clone()
    };
    let o = s.contract(&require).await.unwrap();
    let v = o.verdict.as_ref().unwrap();
    match &v.statements {
        StatementUse::Unused { .. } => assert!(v.open, "{:?}", v.reasons),
        StatementUse::Unavailable { .. } => assert_closed(&o, "usage unknown", |r| {
            matches!(r, Reason::UsageUnknown { .. })
        }),
        StatementUse::Used { .. } => assert_closed(&o, "column used", |r| {
            matches!(r, Reason::ColumnStillUsed { .. })
        }),
    }
    if backend == Backend::Sqlite {
        assert!(matches!(v.statements, StatementUse::Unavailable { .. }));
    }
}

async fn gate_open_dry_run_changes_nothing(backend: Backend) {
    let Some(mut s) = setup(backend, "dry_run", "per_member").await else {
        return;
    };
    s.audit().await;
    let audits_before = s
        .count("SELECT COUNT(*) FROM tidemark_ledger WHERE stage = 'audit'")
        .await;
    let o = s.contract(&s.opts()).await.unwrap();
    assert!(!o.gate_closed());
    assert!(o.verdict.as_ref().unwrap().open);
    assert!(!o.executed);
    let ddl = o.ddl.join("\n");
    match backend {
        Backend::Postgres => {
            assert!(ddl.contains("SET LOCAL lock_timeout = '1000ms';"), "{ddl}");
            assert!(
                ddl.contains("ALTER TABLE \"unread_counters\" DROP COLUMN \"unread_count\";"),
                "{ddl}"
            );
        }
        Backend::Mysql => {
            assert!(ddl.contains("SET SESSION lock_wait_timeout = 1;"), "{ddl}");
            assert!(
                ddl.contains("ALTER TABLE `unread_counters` DROP COLUMN `unread_count`"),
                "{ddl}"
            );
        }
        Backend::Sqlite => {
            assert!(ddl.contains("PRAGMA busy_timeout = 1000;"), "{ddl}");
            assert!(
                ddl.contains("ALTER TABLE \"unread_counters\" DROP COLUMN \"unread_count\";"),
                "{ddl}"
            );
        }
    }
    // A table of its own: the note says --drop-table would drop it.
    assert!(
        o.notes.iter().any(|n| n.contains("--drop-table")),
        "{:?}",
        o.notes
    );
    // Nothing changed: no final audit, no archive, no ledger row, the column is there.
    assert!(s.column_exists("unread_counters", "unread_count").await);
    assert_eq!(
        s.count("SELECT COUNT(*) FROM tidemark_counter_archive")
            .await,
        0
    );
    assert!(s.contracts().await.is_empty());
    assert_eq!(
        s.count("SELECT COUNT(*) FROM tidemark_ledger WHERE stage = 'audit'")
            .await,
        audits_before
    );
    s.finish().await;
}

/// The gate opens on a clean audit, but the counters drifted since: the final audit inside the
/// gate fails, and nothing is archived or dropped.
async fn final_audit_inside_the_gate_must_pass(backend: Backend) {
    let Some(mut s) = setup(backend, "final_audit", "per_member").await else {
        return;
    };
    s.audit().await;
    s.exec("UPDATE unread_counters SET unread_count = 7 WHERE conv_id = 3 AND user_id = 'u1'")
        .await;
    let o = s
        .contract(&ContractOptions {
            execute: true,
            ..s.opts()
        })
        .await
        .unwrap();
    assert!(o.gate_closed());
    assert!(!o.executed);
    let final_audit = o.final_audit.as_ref().expect("the final audit ran");
    assert!(!final_audit.passed);
    assert_closed(
        &o,
        "final audit",
        |r| matches!(r, Reason::FinalAuditFailed { id, .. } if *id == final_audit.id),
    );
    assert!(s.column_exists("unread_counters", "unread_count").await);
    assert_eq!(
        s.count("SELECT COUNT(*) FROM tidemark_counter_archive")
            .await,
        0
    );
    let contracts = s.contracts().await;
    assert_eq!(contracts.len(), 1);
    assert_eq!(contracts[0].1, "refused");
    assert_eq!(contracts[0].2, Some(0));
    // The failed final audit is in the ledger: the next dry run is closed too.
    let o = s.contract(&s.opts()).await.unwrap();
    assert_closed(&o, "after the final audit", |r| {
        matches!(r, Reason::AuditFailed { .. })
    });
    // status can ask for the verdict alone.
    let v = contract::verdict(&mut s.conn, &s.mapping, s.dialect, &Default::default())
        .await
        .unwrap();
    assert!(!v.open);
    assert_eq!(
        contract::dropped_by(&mut s.conn, &s.mapping, s.dialect)
            .await
            .unwrap(),
        None
    );
    s.finish().await;
}

async fn force_with_reason_bypasses_a_closed_gate(backend: Backend) {
    let Some(mut s) = setup(backend, "force", "per_member").await else {
        return;
    };
    // --force without --reason is bad input.
    let err = s
        .contract(&ContractOptions {
            execute: true,
            force: true,
            ..s.opts()
        })
        .await
        .unwrap_err();
    assert_eq!(tidemark::cli::Outcome::code_of(&err), 2);
    // Drift, and no clean audit: the gate is closed, the final audit fails too.
    s.exec("UPDATE unread_counters SET unread_count = 40 WHERE conv_id = 1 AND user_id = 'u1'")
        .await;
    let (_, passed) = s.audit().await;
    assert!(!passed);
    let before = s.values("per_member").await;
    let reason = "counters unread by the app since release 7.2 (CHG-1234)";
    let o = s
        .contract(&ContractOptions {
            execute: true,
            force: true,
            reason: Some(reason.into()),
            ..s.opts()
        })
        .await
        .unwrap();
    assert!(o.executed);
    assert!(!o.gate_closed());
    assert_eq!(o.forced.as_deref(), Some(reason));
    let v = o.verdict.as_ref().unwrap();
    assert!(!v.open);
    assert!(v
        .reasons
        .iter()
        .any(|r| matches!(r, Reason::AuditFailed { .. })));
    assert!(v
        .reasons
        .iter()
        .any(|r| matches!(r, Reason::FinalAuditFailed { .. })));
    assert!(!s.column_exists("unread_counters", "unread_count").await);
    let contracts = s.contracts().await;
    let (id, status, passed, summary) = contracts.last().unwrap();
    assert_eq!(status, "done");
    assert_eq!(*passed, Some(0), "a forced drop is not a passed gate");
    assert_eq!(summary["forced"]["reason"].as_str(), Some(reason));
    assert!(!summary["forced"]["overridden"]
        .as_array()
        .unwrap()
        .is_empty());
    let (archived, _) = s.archived(*id, "per_member").await;
    assert_eq!(archived, before);
    s.finish().await;
}

async fn cli_exit_codes(backend: Backend) {
    let Some(s) = setup(backend, "cli", "per_member").await else {
        return;
    };
    let files = tempfile::tempdir().unwrap();
    let mapping_file = files.path().join("tidemark.toml");
    let report = files.path().join("final.csv").display().to_string();
    std::fs::write(&mapping_file, scenario::mapping_toml("per_member", false)).unwrap();
    let args = |extra: &[&str]| -> ContractArgs {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Wrap {
            #[command(flatten)]
            args: ContractArgs,
        }
        let mut argv = vec![
            "contract".to_string(),
            "--database".into(),
            s.db.url.clone(),
            "--mapping".into(),
            mapping_file.display().to_string(),
            "--lock-timeout".into(),
            "1s".into(),
            "--audit-report".into(),
            report.clone(),
        ];
        argv.extend(extra.iter().map(|a| a.to_string()));
        Wrap::try_parse_from(argv).unwrap().args
    };
    // Closed: exit 1.
    assert_eq!(run_cli(args(&[])).await.unwrap().code(), 1);
    // Bad input: exit 2.
    let err = run_cli(args(&["--force"])).await.unwrap_err();
    assert_eq!(tidemark::cli::Outcome::code_of(&err), 2);
    let err = run_cli(args(&[
        "--drop-table",
        "--execute",
        "--force",
        "--reason",
        "x",
        "--max-audit-age",
        "1h",
    ]))
    .await;
    assert!(err.is_ok(), "a table of its own may be dropped: {err:?}");
    s.finish().await;
    let Some(mut s) = setup(backend, "cli2", "per_member").await else {
        return;
    };
    std::fs::write(&mapping_file, scenario::mapping_toml("per_member", false)).unwrap();
    s.audit().await;
    let url = s.db.url.clone();
    let args = |extra: &[&str]| -> ContractArgs {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Wrap {
            #[command(flatten)]
            args: ContractArgs,
        }
        let mut argv = vec![
            "contract".to_string(),
            "--database".into(),
            url.clone(),
            "--mapping".into(),
            mapping_file.display().to_string(),
        ];
        argv.extend(extra.iter().map(|a| a.to_string()));
        Wrap::try_parse_from(argv).unwrap().args
    };
    // Open: exit 0; with --execute: done, exit 0; again: nothing to drop, exit 0.
    assert_eq!(run_cli(args(&[])).await.unwrap().code(), 0);
    assert_eq!(
        run_cli(args(&["--min-clean-audits", "2"]))
            .await
            .unwrap()
            .code(),
        1
    );
    assert_eq!(
        run_cli(args(&["--execute", "--audit-report", &report]))
            .await
            .unwrap()
            .code(),
        0
    );
    assert!(!s.column_exists("unread_counters", "unread_count").await);
    assert_eq!(run_cli(args(&["--execute"])).await.unwrap().code(), 0);
    s.finish().await;
}
