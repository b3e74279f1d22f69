//! `contract` as text: the target, the gate's verdict with every reason, the final audit, what
//! was archived, the exact DDL, and how the run ended. Each section is a function of its own,
//! written in this order by [`contract`].

use std::io::{self, Write};

use crate::db::Dsn;
use crate::gate::{self, StatementUse, Verdict};
use crate::stages::contract::{ContractOptions, ContractOutcome};
use crate::values::now_ms;

/// Writes what `contract` decided and did, for people: the gate's verdict with every reason,
/// the exact DDL, and what was archived and dropped (or why nothing was).
pub fn contract(
    w: &mut dyn Write,
    o: &ContractOutcome,
    dsn: &Dsn,
    opts: &ContractOptions,
) -> io::Result<()> {
    heading(w, o, dsn)?;
    if let Some(msg) = &o.nothing_to_drop {
        writeln!(w, "  {msg}")?;
        return Ok(());
    }
    if let Some(v) = &o.verdict {
        verdict(w, v, o.forced.is_some())?;
    }
    for n in &o.notes {
        writeln!(w, "  note: {n}")?;
    }
    if let Some(a) = &o.final_audit {
        writeln!(
            w,
            "  final audit{}: {} rows checked, {} drifting, {} (report {})",
            a.id.map(|i| format!(" #{i}")).unwrap_or_default(),
            a.rows_checked,
            a.drifting_rows,
            if a.passed { "PASS" } else { "FAIL" },
            a.report
        )?;
    }
    archives(w, o)?;
    ddl(w, o, opts)?;
    ending(w, o, opts)
}

/// The first lines: what is dropped (every target of a `[contract]` section), the counter's
/// shape, and its value with a `[contract]` section.
fn heading(w: &mut dyn Write, o: &ContractOutcome, dsn: &Dsn) -> io::Result<()> {
    let what = if o.value.is_some() {
        // A `[contract]` section: every target (none for drop = "nothing").
        match o.targets.len() {
            0 => "nothing to drop ([contract] drop = \"nothing\")".to_string(),
            _ => o
                .targets
                .iter()
                .map(|t| t.describe())
                .collect::<Vec<_>>()
                .join(", "),
        }
    } else {
        o.target.describe()
    };
    writeln!(w, "contract on {dsn}: {what} ({})", o.target.shape)?;
    if let Some(v) = &o.value {
        writeln!(w, "  counter value: {v}")?;
    }
    Ok(())
}

/// The gate's verdict: open, closed or bypassed (`forced`), the clean audits, the statement
/// statistics, every reason and note.
fn verdict(w: &mut dyn Write, v: &Verdict, forced: bool) -> io::Result<()> {
    if v.open {
        writeln!(w, "  gate: OPEN")?;
    } else if forced {
        writeln!(w, "  gate: CLOSED, bypassed by --force")?;
    } else {
        writeln!(w, "  gate: CLOSED")?;
    }
    if !v.relied_on.is_empty() {
        let ids: Vec<String> = v.relied_on.iter().map(|i| format!("#{i}")).collect();
        let newest = v.newest_clean.as_ref();
        writeln!(
            w,
            "  {}: {}{}",
            if v.open {
                "clean audits relied on"
            } else {
                "clean audits found"
            },
            ids.join(", "),
            newest
                .map(|a| format!(
                    " (newest {} ago, tolerance {})",
                    gate::human_ms(now_ms() - a.started_ms),
                    a.tolerance.describe()
                ))
                .unwrap_or_default()
        )?;
    }
    writeln!(w, "  statement statistics: {}", v.statements.describe())?;
    if let StatementUse::Used { statements, .. } = &v.statements {
        for s in statements.iter().take(10) {
            writeln!(w, "    {} call(s): {}", s.calls, s.text)?;
        }
    }
    for r in &v.reasons {
        writeln!(w, "  reason: {r}")?;
    }
    for n in &v.notes {
        writeln!(w, "  note: {n}")?;
    }
    Ok(())
}

/// What was archived (with `--execute`): one headline for several targets and then each
/// target's checksums, or the one target's checksums; the CSV copy, if any.
fn archives(w: &mut dyn Write, o: &ContractOutcome) -> io::Result<()> {
    if let (Some(a), true) = (&o.archive, o.target_archives.len() > 1) {
        // Every target's rows in one headline; the per-target checksums follow.
        writeln!(
            w,
            "  archived {} row(s) into {} (contract run #{}, covered by audit {}) for {} columns; verified",
            o.target_archives
                .iter()
                .map(|t| t.checksum.rows)
                .sum::<i64>(),
            a.table,
            a.contract_id,
            a.audit_id.map(|i| format!("#{i}")).unwrap_or_else(|| "-".into()),
            o.target_archives.len()
        )?;
        if let (Some(csv), Some(sha)) = (&a.csv, &a.csv_sha256) {
            writeln!(w, "  archive CSV: {csv} (sha256 {sha}); verified")?;
        }
    } else if let Some(a) = &o.archive {
        writeln!(w,
            "  archived {} row(s) into {} (contract run #{}, covered by audit {}): {} non-NULL, sum {}, sum of squares {}; verified",
            a.checksum.rows,
            a.table,
            a.contract_id,
            a.audit_id.map(|i| format!("#{i}")).unwrap_or_else(|| "-".into()),
            a.checksum.non_null,
            a.checksum.sum,
            a.checksum.sum_squares
        )?;
        if let (Some(csv), Some(sha)) = (&a.csv, &a.csv_sha256) {
            writeln!(w, "  archive CSV: {csv} (sha256 {sha}); verified")?;
        }
    }
    if o.target_archives.len() > 1 {
        for t in &o.target_archives {
            writeln!(
                w,
                "    {}: {} row(s), {} non-NULL, sum {}, sum of squares {}; verified",
                t.target,
                t.checksum.rows,
                t.checksum.non_null,
                t.checksum.sum,
                t.checksum.sum_squares
            )?;
        }
    }
    Ok(())
}

/// The DDL, under "ran:" or what it would run (none ran for `drop = "nothing"`), and the
/// `--force` reason.
fn ddl(w: &mut dyn Write, o: &ContractOutcome, opts: &ContractOptions) -> io::Result<()> {
    if o.executed && o.drops_nothing() {
        // Nothing ran: the ending says that the decision was recorded.
    } else if o.executed {
        writeln!(w, "  ran:")?;
    } else {
        writeln!(
            w,
            "  DDL{}:",
            if opts.execute {
                " (not run)"
            } else {
                " it would run"
            }
        )?;
    }
    if !(o.executed && o.drops_nothing()) {
        for line in &o.ddl {
            writeln!(w, "    {line}")?;
        }
    }
    if let Some(reason) = &o.forced {
        writeln!(w, "  forced: {reason} (recorded in the ledger)")?;
    }
    Ok(())
}

/// The last line(s): the failure and the database's detail, what was dropped, the dry run,
/// or the refusal.
fn ending(w: &mut dyn Write, o: &ContractOutcome, opts: &ContractOptions) -> io::Result<()> {
    if let Some(f) = &o.failure {
        writeln!(w, "  failed: {}", f.message)?;
        if let Some(detail) = &f.detail {
            writeln!(w, "  database detail: {detail}")?;
        }
    } else if o.executed && o.drops_nothing() {
        writeln!(
            w,
            "  done: the gate's decision is recorded (ledger run #{}); nothing was archived or dropped ([contract] drop = \"nothing\": the counter was never stored)",
            o.ledger_id.unwrap_or_default()
        )?;
    } else if o.executed {
        writeln!(
            w,
            "  done: {} dropped (ledger run #{})",
            if o.targets.len() > 1 && o.targets.iter().all(|t| !t.drop_table) {
                format!(
                    "columns {}",
                    o.targets
                        .iter()
                        .map(|t| format!("{}.{}", t.table, t.column))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            } else if o.targets.len() > 1 {
                o.targets
                    .iter()
                    .map(|t| t.describe())
                    .collect::<Vec<_>>()
                    .join(", ")
            } else {
                o.target.describe()
            },
            o.ledger_id.unwrap_or_default()
        )?;
    } else if !opts.execute {
        let open = o.verdict.as_ref().is_some_and(|v| v.open);
        if open && o.drops_nothing() {
            writeln!(
                w,
                "  dry run: nothing was changed; --execute records the gate's decision (nothing is archived or dropped)"
            )?;
        } else if open {
            writeln!(
                w,
                "  dry run: nothing was changed; --execute archives the values and drops"
            )?;
        } else if opts.force {
            writeln!(
                w,
                "  dry run: nothing was changed; with --execute, --force would bypass the gate"
            )?;
        } else {
            writeln!(w, "  dry run: nothing was changed")?;
        }
    } else {
        writeln!(w, "  refused: nothing was archived or dropped")?;
    }
    Ok(())
}
