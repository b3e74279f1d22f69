//! The preflight's zero-row queries, one per section of the mapping (`[messages]`,
//! `[members]`, `[counter]`, each evidence entry and its lookup…), each with a zero-row query
//! per key it reads, so that a query that fails can be pinned on the key at fault. Every query
//! is rendered from `sql/common/preflight_check.sql`, which joins a predicate's own row and the
//! rows it reads as every stage does (`sql/common/macros.sql`, `own` and `pred`).

use anyhow::Result;

use crate::dialect::{render, Dialect, Joins, SqlContext};
use crate::mapping::{Mapping, RowRefs};

/// One preflight query (a section, or an evidence entry's lookup) and what names the mapping
/// key at fault when it fails: the key of its table, and a zero-row query per key it reads.
pub struct SectionCheck {
    /// `[messages]`, `[[evidence]] #2 (position)`, `[[evidence]] #2 lookup`… (for
    /// [`checked_table`]).
    pub section: String,
    /// The section's one zero-row query.
    pub sql: String,
    /// The dotted key naming the table (`members.table`) and the table.
    pub table: (String, String),
    /// Per key the section reads: (dotted key, its value, a zero-row query of it alone).
    pub parts: Vec<(String, String, String)>,
}

/// The own row of a query: a table, aliased `this`, and the key columns the rows its text
/// reads (`conv.`, `usr.`) are joined by.
#[derive(Clone, Copy)]
struct Own<'a> {
    table: &'a str,
    conv_col: &'a str,
    user_col: Option<&'a str>,
}

/// Renders the zero-row queries of one mapping.
struct Queries<'a> {
    mapping: &'a Mapping,
    dialect: Dialect,
    ctx: SqlContext,
}

impl Queries<'_> {
    /// `SELECT <select> FROM <own> WHERE <conds> AND 1 = 0`, the rows that `texts` read joined.
    fn query(
        &self,
        select: &str,
        own: Own<'_>,
        texts: &[Option<&str>],
        conds: &[Option<&str>],
    ) -> Result<String> {
        self.query_looked_up(select, own, texts, conds, None)
    }

    /// [`Queries::query`] with an evidence entry's lookup row joined as `lookup` (issue 22: a
    /// `filter` may read it), as the backfill joins it.
    fn query_looked_up(
        &self,
        select: &str,
        own: Own<'_>,
        texts: &[Option<&str>],
        conds: &[Option<&str>],
        lookup: Option<(&crate::mapping::Lookup, &str)>,
    ) -> Result<String> {
        let q = |s: &str| self.dialect.quote(s);
        let lk = lookup.map(|(l, column)| {
            minijinja::context! { table => q(&l.table), key => q(&l.key), column => q(column) }
        });
        let refs = texts
            .iter()
            .fold(RowRefs::default(), |r, t| r.or(RowRefs::of(*t)));
        render(
            "preflight_check.sql",
            &self.ctx,
            minijinja::context! {
                select => select,
                t => q(own.table),
                j => Joins::new(self.mapping, self.dialect, refs),
                conv_col => q(own.conv_col),
                user_col => own.user_col.map(q).unwrap_or_default(),
                conds => conds,
                lk => lk,
            },
        )
    }

    /// `this.a, this.b` for the columns given.
    fn columns(&self, cols: &[Option<&String>]) -> String {
        cols.iter()
            .flatten()
            .map(|c| format!("this.{}", self.dialect.quote(c)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// A zero-row query of one column of `table`, for `key`.
    fn column_part(
        &self,
        key: &str,
        table: &str,
        column: &str,
    ) -> Result<(String, String, String)> {
        let own = Own {
            table,
            conv_col: "",
            user_col: None,
        };
        let sql = self.query(&self.columns(&[Some(&column.to_string())]), own, &[], &[])?;
        Ok((key.to_string(), column.to_string(), sql))
    }

    /// A zero-row query of one predicate (or, `as_value`, one expression) over its own row.
    fn predicate_part(
        &self,
        key: &str,
        text: &str,
        own: Own<'_>,
        as_value: bool,
    ) -> Result<(String, String, String)> {
        let sql = if as_value {
            let select = format!("({text}) AS tm_value");
            self.query(&select, own, &[Some(text)], &[])?
        } else {
            self.query("1", own, &[Some(text)], &[Some(text)])?
        };
        Ok((key.to_string(), text.to_string(), sql))
    }
}

/// Every section check of `mapping`, in the order they run: `[messages]`, `[conversations]`,
/// `[users]`, `[members]`, `[counter]`, then each evidence entry and its lookup.
///
/// Errors: a template that fails to render (a bug in tidemark, exit 3).
pub fn section_checks(mapping: &Mapping, dialect: Dialect) -> Result<Vec<SectionCheck>> {
    let qs = Queries {
        mapping,
        dialect,
        ctx: SqlContext::new(mapping, dialect),
    };
    let mut checks = vec![messages(&qs)?];
    for (name, k) in [
        ("conversations", &mapping.conversations),
        ("users", &mapping.users),
    ] {
        if let Some(k) = k {
            let own = Own {
                table: &k.table,
                conv_col: "",
                user_col: None,
            };
            checks.push(SectionCheck {
                section: format!("[{name}]"),
                sql: qs.query(&qs.columns(&[Some(&k.key)]), own, &[], &[])?,
                table: (format!("{name}.table"), k.table.clone()),
                parts: vec![qs.column_part(&format!("{name}.key"), &k.table, &k.key)?],
            });
        }
    }
    if mapping.members.is_some() {
        checks.push(members(&qs)?);
    }
    checks.push(counter(&qs)?);
    checks.extend(evidence(&qs)?);
    Ok(checks)
}

/// `[messages]`: its columns under `countable` and `legacy_countable`.
fn messages(qs: &Queries<'_>) -> Result<SectionCheck> {
    let m = &qs.mapping.messages;
    let own = Own {
        table: &m.table,
        conv_col: &m.conversation,
        user_col: None,
    };
    let mut parts = vec![
        qs.column_part("messages.id", &m.table, &m.id)?,
        qs.column_part("messages.conversation", &m.table, &m.conversation)?,
        qs.column_part("messages.sender", &m.table, &m.sender)?,
    ];
    if let Some(c) = &m.created_at {
        parts.push(qs.column_part("messages.created_at", &m.table, c)?);
    }
    for (key, p, as_value) in [
        ("messages.countable", &m.countable, false),
        ("messages.legacy_countable", &m.legacy_countable, false),
        ("messages.restricted", &m.restricted, false),
        ("messages.recipient", &m.recipient, true),
    ] {
        if let Some(p) = p {
            parts.push(qs.predicate_part(key, p, own, as_value)?);
        }
    }
    // Issue 22's keys join the section's query only when given (its text is otherwise as
    // before).
    let mut predicates = vec![m.countable.as_deref(), m.legacy_countable.as_deref()];
    if m.restricted.is_some() {
        predicates.push(m.restricted.as_deref());
    }
    let mut cols = qs.columns(&[
        Some(&m.id),
        Some(&m.conversation),
        Some(&m.sender),
        m.created_at.as_ref(),
    ]);
    // The texts whose rows are joined: the predicates, and the recipient expression.
    let mut texts = predicates.clone();
    if let Some(r) = &m.recipient {
        cols = format!("{cols}, ({r}) AS tm_recipient");
        texts.push(Some(r));
    }
    Ok(SectionCheck {
        section: "[messages]".into(),
        sql: qs.query(&cols, own, &texts, &predicates)?,
        table: ("messages.table".into(), m.table.clone()),
        parts,
    })
}

/// `[members]`: its keys and join columns under `active`.
fn members(qs: &Queries<'_>) -> Result<SectionCheck> {
    let mb = qs.mapping.members.as_ref().expect("called with [members]");
    let own = Own {
        table: &mb.table,
        conv_col: &mb.conversation,
        user_col: Some(&mb.user),
    };
    let mut parts = vec![
        qs.column_part("members.user", &mb.table, &mb.user)?,
        qs.column_part("members.conversation", &mb.table, &mb.conversation)?,
    ];
    for (key, c) in [
        ("members.join_position", &mb.join_position),
        ("members.join_time", &mb.join_time),
    ] {
        if let Some(c) = c {
            parts.push(qs.column_part(key, &mb.table, c)?);
        }
    }
    if let Some(a) = &mb.active {
        parts.push(qs.predicate_part("members.active", a, own, false)?);
    }
    let readers = qs.mapping.messages.restricted_readers.as_deref();
    if let Some(r) = readers {
        parts.push(qs.predicate_part("messages.restricted_readers", r, own, false)?);
    }
    let cols = qs.columns(&[
        Some(&mb.user),
        Some(&mb.conversation),
        mb.join_position.as_ref(),
        mb.join_time.as_ref(),
    ]);
    let mut active = vec![mb.active.as_deref()];
    if readers.is_some() {
        active.push(readers);
    }
    Ok(SectionCheck {
        section: "[members]".into(),
        sql: qs.query(&cols, own, &active, &active)?,
        table: ("members.table".into(), mb.table.clone()),
        parts,
    })
}

/// `[counter]`: its column (or `value`) and keys under `rows`.
fn counter(qs: &Queries<'_>) -> Result<SectionCheck> {
    let mapping = qs.mapping;
    let c = &mapping.counter;
    let table = mapping.counter_table();
    let own = Own {
        table,
        conv_col: c
            .conversation
            .as_deref()
            .unwrap_or(&mapping.messages.conversation),
        user_col: c.user.as_deref(),
    };
    let mut parts = Vec::new();
    for (key, col) in [
        ("counter.column", c.stored_column().map(|_| &c.column)),
        ("counter.user", c.user.as_ref()),
        ("counter.conversation", c.conversation.as_ref()),
        ("counter.message", c.message.as_ref()),
    ] {
        if let Some(col) = col {
            parts.push(qs.column_part(key, table, col)?);
        }
    }
    for (key, text, as_value) in [
        ("counter.value", &c.value, true),
        ("counter.rows", &c.rows, false),
        ("counter.read", &c.read, false),
    ] {
        if let Some(t) = text {
            parts.push(qs.predicate_part(key, t, own, as_value)?);
        }
    }
    let value = c
        .value
        .as_ref()
        .map(|v| format!("({v}) AS tm_value, "))
        .unwrap_or_default();
    let cols = qs.columns(&[
        c.stored_column().map(|_| &c.column),
        c.user.as_ref(),
        c.conversation.as_ref(),
        c.message.as_ref(),
    ]);
    let texts = [c.value.as_deref(), c.rows.as_deref(), c.read.as_deref()];
    let conds = [c.rows.as_deref(), c.read.as_deref()];
    let sql = qs.query(&format!("{value}{cols}"), own, &texts, &conds)?;
    let table_key = if c.table.is_some() {
        "counter.table"
    } else {
        "messages.table"
    };
    Ok(SectionCheck {
        section: "[counter]".into(),
        sql,
        table: (table_key.into(), table.to_string()),
        parts,
    })
}

/// Per `position` / `timestamp` entry its columns under its `filter` (the evidence row is
/// `this`, as in the backfill), and its `lookup` table's key and position columns (section
/// `[[evidence]] #N lookup`), each with its keys (`evidence[N].column`,
/// `evidence[N].lookup.key`…).
fn evidence(qs: &Queries<'_>) -> Result<Vec<SectionCheck>> {
    let mut checks = Vec::new();
    for (i, e) in qs.mapping.evidence.iter().enumerate() {
        let Some(src) = e.source() else { continue };
        let n = i + 1;
        let own = Own {
            table: &src.table,
            conv_col: src.conversation.as_deref().unwrap_or_default(),
            user_col: Some(&src.user),
        };
        let mut parts = Vec::new();
        // read_flags names its message column `message` in the file.
        let column_key = if src.read.is_some() {
            "message"
        } else {
            "column"
        };
        for (k, c) in [
            ("user", Some(&src.user)),
            ("conversation", src.conversation.as_ref()),
            (column_key, Some(&src.column)),
        ] {
            if let Some(c) = c {
                parts.push(qs.column_part(&format!("evidence[{n}].{k}"), &src.table, c)?);
            }
        }
        // The lookup row only where the filter reads it (`lookup.`): a missing lookup table
        // is then still named by its own section below.
        let reads_lookup = src
            .filter
            .as_deref()
            .is_some_and(|f| crate::sql_text::qualifiers(f).iter().any(|q| q == "lookup"));
        let looked_up = src
            .lookup
            .as_ref()
            .filter(|_| reads_lookup)
            .map(|l| (l, src.column.as_str()));
        if let Some(f) = &src.filter {
            let sql = qs.query_looked_up("1", own, &[Some(f)], &[Some(f)], looked_up)?;
            parts.push((format!("evidence[{n}].filter"), f.clone(), sql));
        }
        if let Some(r) = &src.read {
            parts.push(qs.predicate_part(&format!("evidence[{n}].read"), r, own, false)?);
        }
        let cols = qs.columns(&[
            Some(&src.user),
            src.conversation.as_ref(),
            Some(&src.column),
        ]);
        let filter = [src.filter.as_deref(), src.read.as_deref()];
        checks.push(SectionCheck {
            section: format!("[[evidence]] #{n} ({})", e.kind().as_str()),
            sql: qs.query_looked_up(&cols, own, &filter, &filter, looked_up)?,
            table: (format!("evidence[{n}].table"), src.table.clone()),
            parts,
        });
        if let Some(l) = &src.lookup {
            let mut parts = Vec::new();
            for (k, c) in [
                ("key", Some(&l.key)),
                ("position", Some(&l.position)),
                ("conversation", l.conversation.as_ref()),
            ] {
                if let Some(c) = c {
                    parts.push(qs.column_part(
                        &format!("evidence[{n}].lookup.{k}"),
                        &l.table,
                        c,
                    )?);
                }
            }
            let own = Own {
                table: &l.table,
                conv_col: "",
                user_col: None,
            };
            let cols = qs.columns(&[Some(&l.key), Some(&l.position), l.conversation.as_ref()]);
            checks.push(SectionCheck {
                section: format!("[[evidence]] #{n} lookup"),
                sql: qs.query(&cols, own, &[], &[])?,
                table: (format!("evidence[{n}].lookup.table"), l.table.clone()),
                parts,
            });
        }
    }
    Ok(checks)
}

/// The table a preflight section (`[messages]`, `[[evidence]] #2 (position)`,
/// `[[evidence]] #2 lookup`…) reads.
pub fn checked_table(mapping: &Mapping, section: &str) -> String {
    match section {
        "[messages]" => mapping.messages.table.clone(),
        "[members]" => mapping
            .members
            .as_ref()
            .map(|m| m.table.clone())
            .unwrap_or_default(),
        "[counter]" => mapping.counter_table().to_string(),
        "[conversations]" => mapping
            .conversations
            .as_ref()
            .map(|k| k.table.clone())
            .unwrap_or_default(),
        "[users]" => mapping
            .users
            .as_ref()
            .map(|k| k.table.clone())
            .unwrap_or_default(),
        _ => section
            .strip_prefix("[[evidence]] #")
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse::<usize>().ok())
            .and_then(|n| mapping.evidence.get(n - 1))
            .and_then(|e| e.source())
            .map(|s| match &s.lookup {
                Some(l) if section.ends_with(" lookup") => l.table.clone(),
                _ => s.table.clone(),
            })
            .unwrap_or_default(),
    }
}
