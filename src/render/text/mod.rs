//! What users read, as text: the summaries of expand, backfill, audit, status, plan and contract, written
//! to any [`Write`] (the command line passes stdout; the demo too, through the library). The
//! wording is part of the interface (`shared/spec/interface.md`; tests compare it).
//!
//! `status` and `contract`, the longest, are in files of their own ([`status()`],
//! [`contract()`]); this file writes the others.

use std::io::{self, Write};

use crate::db::Dsn;
use crate::mapping::Mapping;
use crate::stages::audit::AuditSummary;
use crate::stages::backfill::BackfillSummary;
use crate::stages::expand::ExpandReport;

mod contract;
mod status;
pub use contract::contract;
pub use status::status;

/// Writes what expand did.
pub fn expand(w: &mut dyn Write, r: &ExpandReport, dsn: &Dsn) -> io::Result<()> {
    writeln!(w, "expand on {dsn}")?;
    notes(w, &r.notices)?;
    for name in &r.already_applied {
        writeln!(w, "  already applied: {name}")?;
    }
    if r.pending.is_empty() {
        writeln!(w, "  nothing to apply: the schema is up to date")?;
        return distribution(w, &r.distribution);
    }
    for (name, sql) in &r.pending {
        if r.dry_run {
            writeln!(w, "  would apply {name}:\n{}", indent(sql, "    "))?;
        } else {
            writeln!(w, "  applied {name}")?;
        }
    }
    distribution(w, &r.distribution)?;
    if r.dry_run {
        writeln!(w, "  dry run: nothing was changed")?;
    }
    Ok(())
}

/// Where tidemark's tables were placed beside distributed chat tables (Citus), one line each.
fn distribution(w: &mut dyn Write, said: &[String]) -> io::Result<()> {
    for line in said {
        writeln!(w, "  {line}")?;
    }
    Ok(())
}

/// The evidence measured on the data (issue 24), one line per entry: `  evidence[1] position
/// topic_users.last_read_post_number: 100.0 % of 57 sampled values are positions of their
/// conversation (or 0)`, marked when it is under the share that stops a backfill.
pub fn evidence_shares(
    w: &mut dyn Write,
    shares: &[crate::schema::evidence_share::Share],
) -> io::Result<()> {
    for s in shares {
        let mark = if s.suspect() {
            " (ANOTHER POSITION SPACE?)"
        } else {
            ""
        };
        writeln!(
            w,
            "  evidence[{}] {} {}: {}{mark}",
            s.entry,
            s.kind,
            s.source,
            s.describe()
        )?;
    }
    Ok(())
}

/// `tidemark plan`'s lines on the evidence measured on the data (issue 24), after the
/// backfill's statements: each entry's share, and what the backfill does under the limit.
pub fn plan_evidence_shares(
    w: &mut dyn Write,
    shares: &[crate::schema::evidence_share::Share],
) -> io::Result<()> {
    if shares.is_empty() {
        return Ok(());
    }
    writeln!(
        w,
        "  -- before its first batch, the evidence measured on a sample (under {:.0} % of at least {} values, {:.0} % for the counter, the backfill stops with exit 2; --accept-evidence-share runs it anyway):",
        100.0 * crate::schema::evidence_share::MIN_SHARE,
        crate::schema::evidence_share::MIN_VALUES,
        100.0 * crate::schema::evidence_share::MIN_COUNTER_SHARE
    )?;
    evidence_shares(w, shares)
}

/// Writes a backfill summary.
pub fn backfill(w: &mut dyn Write, s: &BackfillSummary, dry_run: bool) -> io::Result<()> {
    let verb = if dry_run { "would write" } else { "wrote" };
    // Only rows that change count as written: an existing watermark already at or past the
    // evidence is left as it was (forward-only) and reported apart.
    let unchanged = if s.unchanged > 0 {
        format!(
            "; {} already at or past the evidence, left as they were",
            s.unchanged
        )
    } else {
        String::new()
    };
    writeln!(
        w,
        "backfill: {} members in {} batches; {verb} {} watermarks ({} new, {} advanced){unchanged}",
        s.members,
        s.batches,
        s.written + s.advanced,
        s.written,
        s.advanced,
    )?;
    notes(w, &s.notices)?;
    evidence_shares(w, &s.evidence_shares)?;
    if s.not_positions > 0 {
        writeln!(
            w,
            "  {} members' position evidence was below 0 (a \"nothing read\" marker), no position: the next source applied",
            s.not_positions
        )?;
    }
    if s.evidence_share_accepted {
        writeln!(
            w,
            "  evidence share not measured: accepted with --accept-evidence-share"
        )?;
    }
    if let (Some(batches), Some(after)) = (s.resumed_after_batches, &s.resumed_after) {
        writeln!(
            w,
            "  resumed from the checkpoint after conversation {after} (an unfinished run: {batches} batches were done before; the counts include them)"
        )?;
    }
    for (source, n) in &s.by_source {
        writeln!(w, "  from {source:<12} {n}")?;
    }
    if s.kept_over_counter > 0 {
        writeln!(w,
            "  kept {} existing watermarks whose only evidence was the counter (a counter never advances a watermark that exists)",
            s.kept_over_counter
        )?;
    }
    if s.no_evidence > 0 {
        writeln!(
            w,
            "  no evidence for {} members: no watermark written (unread counts everything)",
            s.no_evidence
        )?;
    }
    if s.times_not_times > 0 {
        writeln!(w,
            "  {} members' read-at times are no time (a zero date, a text that is not a time): not used as evidence, the next source applied",
            s.times_not_times
        )?;
    }
    if s.left_without_evidence > 0 {
        writeln!(w,
            "  {} members who left have no read position (position or timestamp evidence): none written, none owed",
            s.left_without_evidence
        )?;
    }
    if !dry_run && s.counted_changes {
        writeln!(w,
            "  {} counters differ from the unread recomputed from the watermarks: those members will see another unread number once the counters are gone (`tidemark audit` classifies them)",
            s.unread_changes
        )?;
    }
    if s.left_unsettled > 0 {
        writeln!(w,
            "  left {} members (in {} conversations) for a later run: their derived watermark would cover a message younger than the settle time ({}s); run backfill again once it is older",
            s.left_unsettled_members, s.left_unsettled, s.settle_time_s.unwrap_or(0)
        )?;
    }
    if s.settle_unguarded {
        writeln!(w,
            "  settle time not guarded: the mapping has no messages.created_at, so a watermark derived from a counter, a timestamp, an own message or read flags may cover a position whose transaction had not committed yet"
        )?;
    }
    if s.unrepresentable_counters > 0 {
        writeln!(w,
            "  {} counters no watermark can represent (negative, or more than the countable messages): the audit reports them",
            s.unrepresentable_counters
        )?;
    }
    if let Some(f) = &s.read_flags {
        writeln!(w,
            "  read flags: {} messages read out of order become unread under the watermarks, {} messages flagged unread are marked read ({} members; `tidemark audit` of a read_flags mapping lists each, class read_out_of_order)",
            f.read_out_of_order, f.unread_marked_read, f.members
        )?;
    }
    if dry_run {
        writeln!(w, "  dry run: nothing was written")?;
    }
    Ok(())
}

/// The drifting rows per class with up to 3 examples each, every line after `indent`.
fn class_table(
    w: &mut dyn Write,
    indent: &str,
    by_class: &std::collections::BTreeMap<String, u64>,
    examples: &std::collections::BTreeMap<String, Vec<crate::stages::audit::Example>>,
    read_flags: bool,
) -> io::Result<()> {
    writeln!(
        w,
        "{indent}{:<22} {:>8}  examples (conversation/subject: stored -> recomputed)",
        "class", "rows"
    )?;
    for class in crate::drift::DriftClass::in_order(read_flags) {
        let n = by_class.get(class.as_str()).copied().unwrap_or(0);
        if n == 0 {
            continue;
        }
        let examples = examples
            .get(class.as_str())
            .map(|ex| {
                ex.iter()
                    .map(|e| {
                        format!(
                            "{}/{}: {} -> {}",
                            e.conversation,
                            e.subject,
                            e.stored
                                .map(|v| v.to_string())
                                .unwrap_or_else(|| "NULL".into()),
                            e.recomputed
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            })
            .unwrap_or_default();
        writeln!(w, "{indent}{:<22} {:>8}  {examples}", class.as_str(), n)?;
    }
    Ok(())
}

/// Writes an audit summary for people.
pub fn audit(w: &mut dyn Write, s: &AuditSummary) -> io::Result<()> {
    let cap = s
        .cap
        .map(|c| format!(", capped at {c}+"))
        .unwrap_or_default();
    writeln!(
        w,
        "audit ({}{cap}): {} rows checked, {} drifting; sum |drift| {}, largest |drift| {}",
        s.shape, s.rows_checked, s.drifting_rows, s.sum_abs_drift, s.max_abs_drift
    )?;
    notes(w, &s.notices)?;
    // Shape C has a class of its own (read_out_of_order), listed in its place.
    let read_flags = s.shape == crate::mapping::Shape::ReadFlags;
    if s.counters.is_empty() {
        if s.drifting_rows > 0 {
            class_table(w, "  ", &s.by_class, &s.examples, read_flags)?;
        }
    } else {
        // Several counters (issue 22): each its own line and classes.
        for c in &s.counters {
            writeln!(
                w,
                "  counter {} ({}{}): {} rows checked, {} drifting; sum |drift| {}, largest |drift| {}: {}",
                c.name,
                c.value,
                if c.mentions { ", mentions" } else { "" },
                c.rows_checked,
                c.drifting_rows,
                c.sum_abs_drift,
                c.max_abs_drift,
                if c.passed { "PASS" } else { "FAIL" }
            )?;
            if c.drifting_rows > 0 {
                class_table(w, "    ", &c.by_class, &c.examples, read_flags)?;
            }
        }
    }
    if let Some(b) = s.backfill_unfinished() {
        let next = match &b.command {
            Some(command) => format!("run `{command}`, then audit again"),
            None => "audit again once it is done".to_string(),
        };
        if let Some(warning) = s.backfill_warning(Some(&next)) {
            writeln!(w, "  warning: {warning}")?;
        }
    }
    if !s.scope.is_empty() {
        writeln!(w, "  scope: {}", s.scope.join("; "))?;
    }
    if s.left_out_recent > 0 {
        writeln!(
            w,
            "  left out {} conversations whose newest message is younger than --min-age",
            s.left_out_recent
        )?;
    }
    if s.parts > 1 {
        writeln!(w, "  this run took {} parts (--resume)", s.parts)?;
    }
    if !s.complete {
        writeln!(
            w,
            "  INCOMPLETE: stopped {} after conversation {}; {}",
            match s.stopped_by.as_deref() {
                Some("signal") => "by a signal (Ctrl-C or SIGTERM)",
                _ => "at --run-time",
            },
            s.checkpoint
                .as_ref()
                .map(|k| k.to_string())
                .unwrap_or_default(),
            if s.ledger_id.is_some() {
                "run the same command with --resume to continue"
            } else {
                "with --no-ledger it cannot be resumed: run it again without --no-ledger (and --resume) to continue from a checkpoint"
            }
        )?;
        writeln!(w, "  rows so far are kept in {}.partial", s.report)?;
    } else {
        writeln!(w, "  report: {} (sha256 {})", s.report, s.report_sha256)?;
    }
    if s.passed {
        writeln!(w, "  PASS: drift within tolerance")?;
    } else {
        for c in &s.crossed {
            writeln!(w, "  FAIL: {c}")?;
        }
    }
    Ok(())
}

/// A stage's notices (the preflight's: key columns whose collations differ), each as an
/// indented `note:` line.
fn notes(w: &mut dyn Write, notices: &[String]) -> io::Result<()> {
    for n in notices {
        writeln!(w, "  note: {n}")?;
    }
    Ok(())
}

/// `text` with `prefix` before each line.
pub fn indent(text: &str, prefix: &str) -> String {
    text.lines()
        .map(|l| format!("{prefix}{l}"))
        .collect::<Vec<_>>()
        .join("\n")
}
/// The first lines of `tidemark plan`: what it is for, its warnings (the key columns whose
/// collations differ), the indexes the stages read by (each found, or the statement that
/// creates it), and the expand section's title.
pub fn plan_header(
    w: &mut dyn Write,
    dsn: &Dsn,
    mapping: &Mapping,
    indexes: &[crate::inspect::indexes::IndexCheck],
    warnings: &[String],
) -> io::Result<()> {
    use crate::inspect::indexes::IndexStatus;
    writeln!(
        w,
        "plan for {dsn} (mapping {}, dialect {})",
        &mapping.fingerprint[..12],
        dsn.dialect.name()
    )?;
    for warning in warnings {
        writeln!(w, "warning: {warning}")?;
    }
    writeln!(w, "\n== indexes the stages read by ==")?;
    for c in indexes {
        let what = format!("{} ({})", c.need.table, c.need.columns.join(", "));
        match &c.status {
            IndexStatus::Present(name) => writeln!(w, "  ok       {what}: {name}")?,
            IndexStatus::Missing(sql) => {
                writeln!(
                    w,
                    "  MISSING  {what}: {}; each batch scans the whole table",
                    c.need.why
                )?;
                writeln!(w, "    {sql}")?
            }
            IndexStatus::Partial {
                index,
                leading,
                create,
            } => {
                writeln!(
                    w,
                    "  partly   {what}: {index} serves ({}): each batch reads its conversations by it, then all of each conversation's rows to find ({}) ({}); that costs as much as a conversation is large",
                    c.need.columns[..*leading].join(", "),
                    c.need.columns[*leading..].join(", "),
                    c.need.why
                )?;
                writeln!(w, "    {create}")?
            }
            IndexStatus::View => writeln!(
                w,
                "  view     {what}: the table under the view needs it ({})",
                c.need.why
            )?,
            IndexStatus::NoTable => writeln!(w, "  ?        {what}: no such table yet")?,
        }
    }
    writeln!(w, "\n== 1. expand ==")
}

/// A section of `tidemark plan`: its title, then each statement (what it does, and the SQL
/// indented).
pub fn plan_statements(
    w: &mut dyn Write,
    title: &str,
    statements: &[(&str, String)],
) -> io::Result<()> {
    writeln!(w, "\n== {title} ==")?;
    statements_list(w, statements)
}

/// Statements as `  -- what` followed by the SQL indented by four spaces.
pub fn statements_list(w: &mut dyn Write, statements: &[(&str, String)]) -> io::Result<()> {
    for (what, sql) in statements {
        writeln!(w, "  -- {what}\n{}", indent(sql, "    "))?;
    }
    Ok(())
}

/// What `tidemark plan` says about the contract.
#[derive(Debug, Clone, Copy)]
pub enum PlanContract<'a> {
    /// There is nothing to drop, and why.
    NothingToDrop(&'a str),
    /// The DDL the contract runs once the gate opens.
    Ddl(&'a [String]),
    /// The contract cannot be planned yet (before expand): the error, described.
    NotYet(&'a str),
}

/// The audit's `--cap` note, the contract section and the last line of `tidemark plan`.
pub fn plan_end(w: &mut dyn Write, contract: PlanContract<'_>) -> io::Result<()> {
    writeln!(w, "  -- with --cap N the counts stop at N+1: LIMIT 1 OFFSET N probes, see sql/common/macros.sql")?;
    writeln!(w, "\n== 4. contract ==")?;
    match contract {
        PlanContract::NothingToDrop(why) => writeln!(w, "  {why}")?,
        PlanContract::Ddl(ddl) => {
            writeln!(w, "  after the gate opens (archive, verify, then):")?;
            for line in ddl {
                writeln!(w, "    {line}")?;
            }
        }
        PlanContract::NotYet(why) => writeln!(w, "  (shown once expand has run: {why})")?,
    }
    writeln!(w, "\nnothing was changed")
}

/// The statements `backfill --dry-run` would run, before its summary.
pub fn backfill_plan(
    w: &mut dyn Write,
    dsn: &Dsn,
    batch_size: u64,
    statements: &[(&str, String)],
) -> io::Result<()> {
    writeln!(
        w,
        "backfill plan on {dsn}: batches of whole conversations, at most {batch_size} members each"
    )?;
    statements_list(w, statements)
}

/// The line after the summary of a backfill stopped by Ctrl-C or SIGTERM.
pub fn backfill_interrupted(w: &mut dyn Write, s: &BackfillSummary) -> io::Result<()> {
    writeln!(
        w,
        "  interrupted after batch {}: the checkpoint is recorded; run the same command again to continue (--restart starts over)",
        s.batches
    )
}

/// `tidemark sql app`: each statement preceded by `--` comments (what it is, when to run it,
/// the bug it prevents, its binds) and ended by `;`, blank lines between them.
pub fn app_sql(
    w: &mut dyn Write,
    dsn: &Dsn,
    mapping: &Mapping,
    statements: &[crate::app_sql::AppStatement],
) -> io::Result<()> {
    writeln!(
        w,
        "-- statements for the application, {} dialect, mapping {} (tidemark sql app)",
        dsn.dialect.name(),
        &mapping.fingerprint[..12]
    )?;
    let mut previous = String::new();
    for s in statements {
        // With several counters an unread count is one counter's: named after the statement.
        let name = match &s.counter {
            Some(c) => format!("{} (counter {c})", s.name),
            None => s.name.to_string(),
        };
        if name == previous {
            writeln!(w, "-- {name} (continued)")?;
        } else {
            writeln!(w, "\n-- {name}: {}", s.when)?;
            writeln!(w, "-- prevents: {}", s.prevents)?;
        }
        previous = name;
        if !s.binds.is_empty() {
            writeln!(w, "-- binds: {}", s.binds.join(", "))?;
        }
        writeln!(w, "{};", s.sql)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The summary line counts only the watermarks that changed as written; the ones already
    /// at or past the evidence are reported apart, and a resumed run says where it went on.
    #[test]
    fn backfill_counts_changed_rows_and_says_where_it_resumed() {
        let s = BackfillSummary {
            members: 10,
            batches: 3,
            written: 4,
            advanced: 2,
            unchanged: 3,
            resumed_after_batches: Some(2),
            resumed_after: Some("42".into()),
            ..Default::default()
        };
        let mut out = Vec::new();
        backfill(&mut out, &s, false).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with(
                "backfill: 10 members in 3 batches; wrote 6 watermarks (4 new, 2 advanced); 3 already at or past the evidence, left as they were\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "resumed from the checkpoint after conversation 42 (an unfinished run: 2 batches"
            ),
            "{text}"
        );
        let fresh = BackfillSummary {
            written: 1,
            ..Default::default()
        };
        let mut out = Vec::new();
        backfill(&mut out, &fresh, false).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            !text.contains("resumed") && !text.contains("already at or past"),
            "{text}"
        );
    }
}
