//! Every statement the preflight ([`super::preflight`]) and the evidence share
//! ([`super::evidence_share`]) send over the mapped tables, rendered without a database: for a
//! review and for the Citus lint (`tests/integration/citus_lint.rs`, issue 29 row 20: a form
//! Citus refuses is found before a cluster runs it). The catalog reads (column types,
//! collations, the ledger) read the system catalogs, not the mapped tables, and are not listed.

use anyhow::Result;

use super::{counter_values, evidence_share, sections};
use crate::dialect::{render, Dialect, SqlContext};
use crate::mapping::{Combine, Mapping, Shape};

/// The statements, each with what it is: per counter view ([`Mapping::per_counter`]) the
/// zero-row section checks, the counter's rows (whose type is read), the mentions check, the
/// counter values' check (each row, and each member's sum under `combine = "sum"`), the
/// duplicate members' and duplicate counter rows' checks; then the evidence share of the
/// whole mapping. Rendered as the stages render them, whether or not a run would send one
/// (a counter's values are read only when its declared type may hold another value).
///
/// Errors: a template that fails to render (a bug in tidemark, exit 3).
pub fn statements(mapping: &Mapping, dialect: Dialect) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for view in mapping.per_counter() {
        let ctx = SqlContext::new(&view, dialect);
        let text_type = minijinja::context! { text_type => dialect.text_type() };
        for check in sections::section_checks(&view, dialect)? {
            out.push((format!("preflight: {}", check.section), check.sql));
            for (key, _, sql) in check.parts {
                out.push((format!("preflight: {} alone", key), sql));
            }
        }
        let rows = render("preflight_counter_rows.sql", &ctx, minijinja::context! {})?;
        out.push((
            "preflight: the counter's rows (for the value's type)".into(),
            format!("SELECT 1 FROM {rows} AND 1 = 0"),
        ));
        if view.counter.mentions.is_some() {
            out.push((
                "preflight: the mentions table".into(),
                render("preflight_mentions.sql", &ctx, minijinja::context! {})?,
            ));
        }
        if view.counter.shape != Shape::ReadFlags {
            let values = counter_values::counter_values(&ctx, view.counter.shape);
            out.push((
                "preflight: the counter's values".into(),
                counter_values::statement(&ctx, &values, false)?,
            ));
            if view.counter.combine == Some(Combine::Sum) {
                out.push((
                    "preflight: the counter's sums".into(),
                    counter_values::statement(&ctx, &values, true)?,
                ));
            }
        }
        if view.members.is_some() {
            out.push((
                "preflight: one members row per member".into(),
                render("preflight_member_duplicates.sql", &ctx, text_type.clone())?,
            ));
        }
        if view.counter_is_expression() && view.counter.shape == Shape::PerMember {
            out.push((
                "preflight: one counter row per member".into(),
                render("audit_counter_duplicates.sql", &ctx, text_type)?,
            ));
        }
    }
    let ctx = SqlContext::new(mapping, dialect);
    for s in evidence_share::statements(mapping, &ctx)? {
        out.push((
            format!(
                "evidence share: evidence[{}] ({} {})",
                s.entry, s.kind, s.source
            ),
            s.sql,
        ));
    }
    Ok(out)
}
