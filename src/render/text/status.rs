//! `status` as text: where each stage stands, the last audits as a table with the drift trend,
//! and the contract gate's verdict with default options.

use std::io::{self, Write};

use crate::db::Dsn;
use crate::ledger::RunStatus;
use crate::mapping::Mapping;
use crate::stages::contract::Done;
use crate::stages::status::Status;

/// Writes `status`.
pub fn status(w: &mut dyn Write, s: &Status, dsn: &Dsn, mapping: &Mapping) -> io::Result<()> {
    writeln!(
        w,
        "status of {dsn} (mapping {})",
        &mapping.fingerprint[..12]
    )?;
    if s.migrations.is_empty() {
        writeln!(w, "  expand:    not run (no migrations applied)")?;
    } else {
        writeln!(w, "  expand:    applied {}", s.migrations.join(", "))?;
    }
    match s.watermarks {
        Some(n) => writeln!(w, "  watermarks: {n} rows in {}", mapping.watermarks.table)?,
        None => writeln!(
            w,
            "  watermarks: table {} does not exist",
            mapping.watermarks.table
        )?,
    }
    match &s.last_backfill {
        Some(b) if b.status == RunStatus::Running && !s.backfill_alive => writeln!(w,
            "  backfill:  run #{} stopped unfinished (started {}; its process is gone): run backfill again to resume it",
            b.id,
            when(b.started_ms)
        )?,
        Some(b) => match b.finished_ms {
            Some(end) => writeln!(w,
                "  backfill:  run #{} {} at {} (started {})",
                b.id,
                b.status,
                when(end),
                when(b.started_ms)
            )?,
            None => writeln!(w,
                "  backfill:  run #{} {} (started {})",
                b.id,
                b.status,
                when(b.started_ms)
            )?,
        },
        None => writeln!(w, "  backfill:  never run")?,
    }
    for column in &s.missing_contract_columns {
        writeln!(
            w,
            "  warning:   [contract] columns names {column}, which the database does not have (and no contract run dropped it): backfill, audit and contract refuse this mapping until it is fixed"
        )?;
    }
    if s.audits.is_empty() {
        writeln!(w, "  audit:     never run")?;
        return contract_state(w, s);
    }
    writeln!(w, "  last audits:")?;
    writeln!(
        w,
        "    {:>5}  {:<20}  {:<10}  {:>10}  {:>9}  same mapping",
        "run", "started (UTC)", "result", "checked", "drifting"
    )?;
    let mut trend = Vec::new();
    for a in &s.audits {
        let result = match (a.status, a.passed) {
            (RunStatus::Done, Some(true)) => "pass",
            (RunStatus::Done, Some(false)) => "fail",
            (RunStatus::Running, _) if !a.alive => "gone",
            (other, _) => other.as_str(),
        };
        let checked = a.summary.as_ref().map(|r| r.rows_checked);
        let drifting = a.summary.as_ref().map(|r| r.drifting_rows);
        if a.status == RunStatus::Done && a.fingerprint == mapping.fingerprint {
            if let Some(d) = drifting {
                trend.push(d);
            }
        }
        writeln!(
            w,
            "    {:>5}  {:<20}  {:<10}  {:>10}  {:>9}  {}",
            a.id,
            when(a.started_ms),
            result,
            checked.map(|v| v.to_string()).unwrap_or_default(),
            drifting.map(|v| v.to_string()).unwrap_or_default(),
            if a.fingerprint == mapping.fingerprint {
                "yes"
            } else {
                "no"
            }
        )?;
    }
    for a in s
        .audits
        .iter()
        .filter(|a| a.status == RunStatus::Running && !a.alive)
    {
        writeln!(
            w,
            "  audit run #{} is recorded as running, but its process is gone (killed, or its server session ended): the next audit of its mapping marks it abandoned",
            a.id
        )?;
    }
    if trend.len() > 1 {
        trend.reverse();
        let direction = match trend.last().cmp(&trend.first()) {
            std::cmp::Ordering::Less => "falling",
            std::cmp::Ordering::Greater => "rising",
            std::cmp::Ordering::Equal => "flat",
        };
        let list: Vec<String> = trend.iter().map(u64::to_string).collect();
        writeln!(
            w,
            "  drifting rows, oldest to newest: {} ({direction})",
            list.join(" -> ")
        )?;
    }
    if let Some((newer, older, new, fixed)) = s.changes {
        writeln!(w, "  since audit #{older}, audit #{newer} found {new} newly drifting rows and {fixed} fixed (--store-rows)")?;
    }
    contract_state(w, s)
}

/// The contract line of `status`.
fn contract_state(w: &mut dyn Write, s: &Status) -> io::Result<()> {
    match (&s.contract_done, &s.gate) {
        (Some(Done::Dropped(id)), _) => {
            writeln!(w, "  contract:  done: the counter was dropped by run #{id}")?
        }
        (Some(Done::Decided(id)), _) => writeln!(
            w,
            "  contract:  done: run #{id} recorded the gate's decision; nothing was dropped ([contract] drop = \"nothing\")"
        )?,
        (Some(Done::Unrecorded(id)), _) => writeln!(
            w,
            "  contract:  done: the counter was dropped by run #{id}, whose process ended before the ledger recorded it (its archive verifies): `tidemark contract --execute` records it"
        )?,
        (None, Some(v)) if v.open => writeln!(w,
            "  contract:  the gate would open (default options), on audits {:?}: `tidemark contract` shows the DDL",
            v.relied_on
        )?,
        (None, Some(v)) => {
            writeln!(w, "  contract:  the gate is closed (default options):")?;
            for r in &v.reasons {
                writeln!(w, "    - {r}")?;
            }
        }
        (None, None) => {}
    }
    Ok(())
}

/// A ledger time (ms since the epoch) as `YYYY-MM-DD HH:MM:SS` (UTC).
fn when(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_seconds(t)
        .to_string()
        .replace('T', " ")
        .trim_end_matches('Z')
        .to_string()
}
