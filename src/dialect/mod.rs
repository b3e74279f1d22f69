//! Dialects: identifier quoting, the few SQL spellings that differ (the forward-only
//! `GREATEST` / `MAX`, upsert syntax, integer casts, placeholders), and the stage SQL itself,
//! kept as files under `sql/` so a DBA can read exactly what will run.
//!
//! Statements are minijinja templates filled with the mapping's quoted identifiers
//! ([`SqlContext`]); predicates from the mapping are inserted verbatim (they are the DBA's SQL,
//! validated in [`crate::mapping`]).

use anyhow::{Context, Result};
use minijinja::Environment;
use serde::Serialize;
use std::sync::OnceLock;

use crate::mapping::{EvidenceKind, Mapping, Shape};

/// The SQL dialect of a target database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    /// PostgreSQL 12 or later.
    Postgres,
    /// MySQL 8 or MariaDB 10.6 or later.
    Mysql,
    /// SQLite 3.35 or later (the bundled library).
    Sqlite,
}

impl Dialect {
    /// The folder under `sql/` and `migrations/`.
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Postgres => "postgres",
            Dialect::Mysql => "mysql",
            Dialect::Sqlite => "sqlite",
        }
    }

    /// Quotes one identifier, or a `schema.table` pair part by part. Identifiers were
    /// validated by [`crate::mapping::check_identifier`], so they hold no quote characters.
    pub fn quote(self, ident: &str) -> String {
        ident
            .split('.')
            .map(|part| match self {
                Dialect::Mysql => format!("`{part}`"),
                _ => format!("\"{part}\""),
            })
            .collect::<Vec<_>>()
            .join(".")
    }

    /// The `n`-th (1-based) bind placeholder: `$n` on PostgreSQL, `?` elsewhere.
    pub fn placeholder(self, n: usize) -> String {
        match self {
            Dialect::Postgres => format!("${n}"),
            _ => "?".to_string(),
        }
    }

    /// The type name for `CAST(x AS …)` to a 64-bit integer.
    pub fn int_cast(self) -> &'static str {
        match self {
            Dialect::Postgres => "BIGINT",
            Dialect::Mysql => "SIGNED",
            Dialect::Sqlite => "INTEGER",
        }
    }

    /// The two-argument maximum: `GREATEST` (PostgreSQL, MySQL) or SQLite's scalar `MAX`.
    pub fn greatest(self) -> &'static str {
        match self {
            Dialect::Sqlite => "MAX",
            _ => "GREATEST",
        }
    }
}

/// A mapping's identifiers, quoted for one dialect, as the templates see them.
#[derive(Debug, Clone, Serialize)]
pub struct SqlContext {
    /// `postgres`, `mysql` or `sqlite`.
    pub dialect: Dialect,
    /// `CAST(x AS {{ int }})` target.
    pub int: &'static str,
    /// `GREATEST` or `MAX`.
    pub greatest: &'static str,
    /// `MATERIALIZED` where the dialect accepts it on a CTE (an optimisation fence).
    pub materialized: &'static str,
    /// Messages table columns.
    pub msg: MsgIdents,
    /// Members table columns, if mapped.
    pub mem: Option<MemIdents>,
    /// Counter location.
    pub ctr: CtrIdents,
    /// Evidence sources, best first.
    pub evidence: Vec<EvIdents>,
    /// Watermark table.
    pub wm: String,
    /// Watermark table name unquoted (for index names).
    pub wm_name: String,
    /// Shape: `per_member` or `per_message`.
    pub shape: Shape,
}

/// Quoted `[messages]` identifiers and predicates.
#[derive(Debug, Clone, Serialize)]
pub struct MsgIdents {
    pub table: String,
    pub id: String,
    pub conv: String,
    pub sender: String,
    pub created_at: Option<String>,
    pub countable: Option<String>,
    pub legacy: Option<String>,
}

/// Quoted `[members]` identifiers and predicate.
#[derive(Debug, Clone, Serialize)]
pub struct MemIdents {
    pub table: String,
    pub user: String,
    pub conv: String,
    pub active: Option<String>,
    pub join: Option<String>,
}

/// Quoted `[counter]` identifiers (user/conv empty for per_message).
#[derive(Debug, Clone, Serialize)]
pub struct CtrIdents {
    pub table: String,
    pub user: String,
    pub conv: String,
    pub column: String,
}

/// One quoted `[[evidence]]` entry.
#[derive(Debug, Clone, Serialize)]
pub struct EvIdents {
    pub kind: &'static str,
    pub table: String,
    pub user: String,
    pub conv: String,
    pub column: String,
}

impl SqlContext {
    /// Quotes every identifier of `mapping` for `dialect`.
    pub fn new(mapping: &Mapping, dialect: Dialect) -> SqlContext {
        let q = |s: &str| dialect.quote(s);
        let oq = |s: &Option<String>| s.as_deref().map(q);
        let m = &mapping.messages;
        let ctr = &mapping.counter;
        SqlContext {
            dialect,
            int: dialect.int_cast(),
            greatest: dialect.greatest(),
            materialized: match dialect {
                Dialect::Mysql => "",
                _ => "MATERIALIZED",
            },
            msg: MsgIdents {
                table: q(&m.table),
                id: q(&m.id),
                conv: q(&m.conversation),
                sender: q(&m.sender),
                created_at: oq(&m.created_at),
                countable: m.countable.clone(),
                legacy: m.legacy_countable.clone(),
            },
            mem: mapping.members.as_ref().map(|mb| MemIdents {
                table: q(&mb.table),
                user: q(&mb.user),
                conv: q(&mb.conversation),
                active: mb.active.clone(),
                join: oq(&mb.join_position),
            }),
            ctr: CtrIdents {
                table: q(mapping.counter_table()),
                user: ctr.user.as_deref().map(q).unwrap_or_default(),
                conv: ctr.conversation.as_deref().map(q).unwrap_or_default(),
                column: q(&ctr.column),
            },
            evidence: mapping
                .evidence
                .iter()
                .map(|e| EvIdents {
                    kind: e.kind.as_str(),
                    table: e.table.as_deref().map(q).unwrap_or_default(),
                    user: e.user.as_deref().map(q).unwrap_or_default(),
                    conv: e.conversation.as_deref().map(q).unwrap_or_default(),
                    column: e.column.as_deref().map(q).unwrap_or_default(),
                })
                .collect(),
            wm: q(&mapping.watermarks.table),
            wm_name: mapping
                .watermarks
                .table
                .rsplit('.')
                .next()
                .unwrap_or_default()
                .to_string(),
            shape: mapping.counter.shape,
        }
    }

    /// Whether the mapping lists an evidence kind.
    pub fn has_evidence(&self, kind: EvidenceKind) -> bool {
        self.evidence.iter().any(|e| e.kind == kind.as_str())
    }
}

/// The statement templates, by name. Each is a file under `sql/` compiled into the binary.
const TEMPLATES: &[(&str, &str)] = &[
    ("macros.sql", include_str!("../../sql/common/macros.sql")),
    (
        "audit_per_member.sql",
        include_str!("../../sql/common/audit_per_member.sql"),
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
        "subjects.sql",
        include_str!("../../sql/common/subjects.sql"),
    ),
    (
        "batch_bounds.sql",
        include_str!("../../sql/common/batch_bounds.sql"),
    ),
    (
        "backfill_evidence.sql",
        include_str!("../../sql/common/backfill_evidence.sql"),
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
        "postgres/contract_statements.sql",
        include_str!("../../sql/postgres/contract_statements.sql"),
    ),
    (
        "mysql/contract_statements.sql",
        include_str!("../../sql/mysql/contract_statements.sql"),
    ),
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
/// be absent.
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

/// Drops blank lines left by template tags.
fn tidy(sql: &str) -> String {
    sql.lines()
        .filter(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The identifiers of an SQL text: bare words and quoted names (`"…"`, `` `…` ``, `[…]`),
/// string literals and comments skipped.
pub fn identifiers(sql: &str) -> Vec<String> {
    let chars: Vec<char> = sql.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\'' => {
                i += 1;
                while i < chars.len() {
                    if chars[i] == '\'' {
                        if chars.get(i + 1) == Some(&'\'') {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
                i += 1;
            }
            '"' | '`' | '[' => {
                let close = if c == '[' { ']' } else { c };
                let from = i + 1;
                i += 1;
                while i < chars.len() && chars[i] != close {
                    i += 1;
                }
                out.push(chars[from..i.min(chars.len())].iter().collect());
                i += 1;
            }
            '-' if chars.get(i + 1) == Some(&'-') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            _ if c.is_alphanumeric() || c == '_' => {
                let from = i;
                while i < chars.len()
                    && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '$')
                {
                    i += 1;
                }
                out.push(chars[from..i].iter().collect());
            }
            _ => i += 1,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_per_dialect() {
        assert_eq!(
            Dialect::Postgres.quote("public.messages"),
            "\"public\".\"messages\""
        );
        assert_eq!(Dialect::Mysql.quote("messages"), "`messages`");
        assert_eq!(Dialect::Sqlite.quote("m"), "\"m\"");
        assert_eq!(Dialect::Postgres.placeholder(3), "$3");
        assert_eq!(Dialect::Mysql.placeholder(3), "?");
    }
}
