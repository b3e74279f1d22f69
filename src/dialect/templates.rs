//! The statement templates: files under `sql/` compiled into the binary, rendered with
//! minijinja. `sql/<dialect>/NAME` overrides `sql/common/NAME` for that engine. A template too
//! long to read in one file is split into parts under `sql/common/<template>/` (its
//! `{% include %}`s and macro files), registered as `<template>/<part>.sql`: never rendered alone.

use anyhow::{Context, Result};
use minijinja::Environment;
use serde::Serialize;
use std::sync::OnceLock;

use super::context::SqlContext;

/// The statement templates, by name. Each is a file under `sql/` compiled into the binary.
const TEMPLATES: &[(&str, &str)] = &[
    ("macros.sql", include_str!("../../sql/common/macros.sql")),
    (
        "mention_macros.sql",
        include_str!("../../sql/common/mention_macros.sql"),
    ),
    (
        "preflight_mentions.sql",
        include_str!("../../sql/common/preflight_mentions.sql"),
    ),
    (
        "preflight_flag_messages.sql",
        include_str!("../../sql/common/preflight_flag_messages.sql"),
    ),
    (
        "evidence_macros.sql",
        include_str!("../../sql/common/evidence_macros.sql"),
    ),
    (
        "reader_macros.sql",
        include_str!("../../sql/common/reader_macros.sql"),
    ),
    (
        "audit_per_member.sql",
        include_str!("../../sql/common/audit_per_member.sql"),
    ),
    (
        "audit_per_member/streams.sql",
        include_str!("../../sql/common/audit_per_member/streams.sql"),
    ),
    (
        "audit_per_member/count.sql",
        include_str!("../../sql/common/audit_per_member/count.sql"),
    ),
    (
        "audit_per_member/facts.sql",
        include_str!("../../sql/common/audit_per_member/facts.sql"),
    ),
    (
        "audit_per_member/total.sql",
        include_str!("../../sql/common/audit_per_member/total.sql"),
    ),
    (
        "audit_per_member/read_flags.sql",
        include_str!("../../sql/common/audit_per_member/read_flags.sql"),
    ),
    (
        "audit_probe.sql",
        include_str!("../../sql/common/audit_probe.sql"),
    ),
    (
        "audit_form_stats.sql",
        include_str!("../../sql/common/audit_form_stats.sql"),
    ),
    (
        "audit_per_message.sql",
        include_str!("../../sql/common/audit_per_message.sql"),
    ),
    (
        "audit_count.sql",
        include_str!("../../sql/common/audit_count.sql"),
    ),
    (
        "audit_unwatermarked.sql",
        include_str!("../../sql/common/audit_unwatermarked.sql"),
    ),
    (
        "audit_counter_duplicates.sql",
        include_str!("../../sql/common/audit_counter_duplicates.sql"),
    ),
    (
        "preflight_check.sql",
        include_str!("../../sql/common/preflight_check.sql"),
    ),
    (
        "preflight_positions.sql",
        include_str!("../../sql/common/preflight_positions.sql"),
    ),
    (
        "preflight_member_duplicates.sql",
        include_str!("../../sql/common/preflight_member_duplicates.sql"),
    ),
    (
        "preflight_counter_rows.sql",
        include_str!("../../sql/common/preflight_counter_rows.sql"),
    ),
    (
        "preflight_counter_values.sql",
        include_str!("../../sql/common/preflight_counter_values.sql"),
    ),
    (
        "subjects.sql",
        include_str!("../../sql/common/subjects.sql"),
    ),
    (
        "batch_bounds.sql",
        include_str!("../../sql/common/batch_bounds.sql"),
    ),
    (
        "evidence.sql",
        include_str!("../../sql/common/evidence.sql"),
    ),
    (
        "evidence_share.sql",
        include_str!("../../sql/common/evidence_share.sql"),
    ),
    (
        "inspect_fit.sql",
        include_str!("../../sql/common/inspect_fit.sql"),
    ),
    (
        "backfill_plan.sql",
        include_str!("../../sql/common/backfill_plan.sql"),
    ),
    (
        "backfill_plan/macros.sql",
        include_str!("../../sql/common/backfill_plan/macros.sql"),
    ),
    (
        "backfill_plan/choose.sql",
        include_str!("../../sql/common/backfill_plan/choose.sql"),
    ),
    (
        "backfill_flags.sql",
        include_str!("../../sql/common/backfill_flags.sql"),
    ),
    (
        "backfill_tally.sql",
        include_str!("../../sql/common/backfill_tally.sql"),
    ),
    (
        "postgres/backfill_write.sql",
        include_str!("../../sql/postgres/backfill_write.sql"),
    ),
    (
        "mysql/backfill_write.sql",
        include_str!("../../sql/mysql/backfill_write.sql"),
    ),
    (
        "sqlite/backfill_write.sql",
        include_str!("../../sql/sqlite/backfill_write.sql"),
    ),
    (
        "backfill_counter_rank.sql",
        include_str!("../../sql/common/backfill_counter_rank.sql"),
    ),
    (
        "postgres/upsert_watermarks.sql",
        include_str!("../../sql/postgres/upsert_watermarks.sql"),
    ),
    (
        "mysql/upsert_watermarks.sql",
        include_str!("../../sql/mysql/upsert_watermarks.sql"),
    ),
    (
        "sqlite/upsert_watermarks.sql",
        include_str!("../../sql/sqlite/upsert_watermarks.sql"),
    ),
    (
        "postgres/column_type.sql",
        include_str!("../../sql/postgres/column_type.sql"),
    ),
    (
        "mysql/column_type.sql",
        include_str!("../../sql/mysql/column_type.sql"),
    ),
    (
        "sqlite/column_type.sql",
        include_str!("../../sql/sqlite/column_type.sql"),
    ),
    (
        "contract_archive.sql",
        include_str!("../../sql/common/contract_archive.sql"),
    ),
    (
        "contract_checksum.sql",
        include_str!("../../sql/common/contract_checksum.sql"),
    ),
    (
        "contract_missing.sql",
        include_str!("../../sql/common/contract_missing.sql"),
    ),
    (
        "contract_key_duplicates.sql",
        include_str!("../../sql/common/contract_key_duplicates.sql"),
    ),
    (
        "contract_archive_rows.sql",
        include_str!("../../sql/common/contract_archive_rows.sql"),
    ),
    (
        "postgres/contract_columns.sql",
        include_str!("../../sql/postgres/contract_columns.sql"),
    ),
    (
        "mysql/contract_columns.sql",
        include_str!("../../sql/mysql/contract_columns.sql"),
    ),
    (
        "sqlite/contract_columns.sql",
        include_str!("../../sql/sqlite/contract_columns.sql"),
    ),
    (
        "postgres/contract_dependents.sql",
        include_str!("../../sql/postgres/contract_dependents.sql"),
    ),
    (
        "mysql/contract_dependents.sql",
        include_str!("../../sql/mysql/contract_dependents.sql"),
    ),
    (
        "sqlite/contract_dependents.sql",
        include_str!("../../sql/sqlite/contract_dependents.sql"),
    ),
    (
        "postgres/contract_statements.sql",
        include_str!("../../sql/postgres/contract_statements.sql"),
    ),
    (
        "mysql/contract_statements.sql",
        include_str!("../../sql/mysql/contract_statements.sql"),
    ),
    // ---- application statements (output helper: `tidemark sql app`) ----
    (
        "app_macros.sql",
        include_str!("../../sql/common/app_macros.sql"),
    ),
    (
        "app_unread_member.sql",
        include_str!("../../sql/common/app_unread_member.sql"),
    ),
    (
        "app_unread_page.sql",
        include_str!("../../sql/common/app_unread_page.sql"),
    ),
    (
        "app_message_unread.sql",
        include_str!("../../sql/common/app_message_unread.sql"),
    ),
    (
        "app_seq_schema.sql",
        include_str!("../../sql/common/app_seq_schema.sql"),
    ),
    (
        "app_seq_new.sql",
        include_str!("../../sql/common/app_seq_new.sql"),
    ),
    (
        "app_seq_next.sql",
        include_str!("../../sql/common/app_seq_next.sql"),
    ),
    // ---- end application statements ----
];

fn env() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        for (name, source) in TEMPLATES {
            env.add_template(name, source)
                .expect("sql templates compile");
        }
        env
    })
}

/// Bind placeholders for a batch's conversation range, in the order the templates use them:
/// `lo` (exclusive), `hi` (inclusive), then the scope's `from` and `to` (inclusive); any may
/// be absent. Or, when the key columns' collations differ (issue 25), the batch's keys
/// (`keys`), which then stand for all of these.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RangeParams {
    /// Placeholder for the exclusive lower bound.
    pub lo: Option<String>,
    /// Placeholder for the inclusive upper bound.
    pub hi: Option<String>,
    /// Placeholder for the scope's inclusive lowest conversation (`--conversations`).
    pub from: Option<String>,
    /// Placeholder for the scope's inclusive highest conversation.
    pub to: Option<String>,
    /// The sample predicate over `{col}` (`--sample`).
    pub sample: Option<String>,
    /// The quiescence predicate over `{col}` (`--min-age`).
    pub quiet: Option<String>,
    /// A placeholder per conversation key of the batch: the batch is these conversations
    /// (`sql/common/macros.sql` `range`: an equality list instead of the range, the scope
    /// and the recent conversations already applied to the list).
    pub keys: Option<Vec<String>>,
}

/// Renders the statement `name` (a `sql/` file; `{dialect}/` is tried first) with the
/// mapping context and extra variables.
///
/// Errors: a template that fails to render (a bug in tidemark, exit 3).
pub fn render(name: &str, ctx: &SqlContext, extra: minijinja::Value) -> Result<String> {
    let env = env();
    let dialect_name = format!("{}/{name}", ctx.dialect.name());
    let template = env
        .get_template(&dialect_name)
        .or_else(|_| env.get_template(name))
        .with_context(|| format!("no SQL template {name}"))?;
    let merged = minijinja::context! { ..extra, ..minijinja::Value::from_serialize(ctx) };
    let sql = template
        .render(merged)
        .with_context(|| format!("rendering sql/{name}"))?;
    Ok(tidy(&sql))
}

/// Renders the statement `name` for the dialect named `dialect` (`Spelling::name`) with `vars`
/// alone, for what has no mapping yet (`inspect`'s measures: identifiers quoted by the
/// caller); the template sees `int`, the dialect's 64-bit integer cast type.
///
/// Errors: a template that fails to render (a bug in tidemark, exit 3).
pub fn render_plain(
    name: &str,
    dialect: &str,
    int: &str,
    vars: minijinja::Value,
) -> Result<String> {
    let env = env();
    let dialect_name = format!("{dialect}/{name}");
    let template = env
        .get_template(&dialect_name)
        .or_else(|_| env.get_template(name))
        .with_context(|| format!("no SQL template {name}"))?;
    let merged = minijinja::context! { int => int, ..vars };
    let sql = template
        .render(merged)
        .with_context(|| format!("rendering sql/{name}"))?;
    Ok(tidy(&sql))
}

/// Drops blank lines left by template tags.
fn tidy(sql: &str) -> String {
    sql.lines()
        .filter(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
#[path = "templates_tests.rs"]
mod tests;
