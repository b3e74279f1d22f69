//! Reading the legacy schema: the declared types of key columns (the watermark table copies
//! them) and a preflight that every mapped table, column and predicate exists and parses, so
//! that a mapping mistake is reported as bad input (exit 2) naming the mapping key, before
//! any stage writes anything.

use anyhow::Result;
use sqlx::AnyConnection;

use crate::dialect::{render, Dialect, SqlContext, TypeClass};
use crate::error::input_error;
use crate::mapping::{Combine, Mapping, RowRefs, Shape};
use crate::values::text;

/// The type family of a key column, which decides how keys are bound and read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// Any integer type: bound and read as i64.
    Integer,
    /// Any character type: bound and read as strings.
    Text,
}

/// A key column's declared type and the DDL type the watermark table uses for it.
#[derive(Debug, Clone)]
pub struct KeyType {
    /// Integer or text.
    pub kind: KeyKind,
    /// Type for `CREATE TABLE` in this dialect.
    pub ddl: String,
}

/// The declared type of `table.column` as the catalog spells it, or None when the column does
/// not exist.
pub async fn column_type(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    table: &str,
    column: &str,
) -> Result<Option<String>> {
    let sql = render("column_type.sql", ctx, minijinja::context! {})?;
    let mut q = sqlx::query(&sql);
    for bind in ctx.dialect.catalog().catalog_table_binds(table) {
        q = q.bind(bind);
    }
    let row = q
        .bind(column.to_string())
        .fetch_optional(&mut *conn)
        .await?;
    Ok(match row {
        Some(r) => text(&r, 0)?,
        None => None,
    })
}

/// Maps a declared key type to a [`KeyType`].
///
/// Errors (exit 2): a type tidemark cannot key a watermark by (uuid, binary, decimal…), named.
pub fn key_type(dialect: Dialect, declared: &str, what: &str) -> Result<KeyType> {
    match dialect.catalog().type_class(declared) {
        TypeClass::Integer => Ok(KeyType {
            kind: KeyKind::Integer,
            ddl: "BIGINT".into(),
        }),
        TypeClass::Text | TypeClass::Unknown => Ok(KeyType {
            kind: KeyKind::Text,
            ddl: dialect.text_key_ddl(declared),
        }),
        _ => Err(input_error(format!(
            "{what} has type {declared}: tidemark keys watermarks by integer or text columns"
        ))),
    }
}

/// The key types of the watermark table: (user, conversation), read from the members table
/// when mapped, else from the per-member counter table.
///
/// Errors (exit 2): a key column that does not exist or has an unusable type.
pub async fn watermark_key_types(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    ctx: &SqlContext,
) -> Result<(KeyType, KeyType)> {
    let (section, table, user, conv) = match (&mapping.members, mapping.counter.shape) {
        (Some(mb), _) => (
            "members",
            mb.table.clone(),
            mb.user.clone(),
            mb.conversation.clone(),
        ),
        (None, Shape::PerMember) => (
            "counter",
            mapping.counter_table().to_string(),
            mapping.counter.user.clone().unwrap_or_default(),
            mapping.counter.conversation.clone().unwrap_or_default(),
        ),
        (None, Shape::PerMessage) => unreachable!("validated: per_message needs [members]"),
    };
    let mut types = Vec::new();
    for (key, column) in [("user", user), ("conversation", conv)] {
        let declared = column_type(conn, ctx, &table, &column)
            .await?
            .ok_or_else(|| {
                input_error(format!(
                    "{section}.{key}: column {column:?} not found in table {table:?}"
                ))
            })?;
        types.push(key_type(
            ctx.dialect,
            &declared,
            &format!("{section}.{key} ({table}.{column})"),
        )?);
    }
    let conv = types.pop().expect("two types");
    let user = types.pop().expect("two types");
    Ok((user, conv))
}

/// One preflight query (a section, or an evidence entry's lookup) and what names the mapping
/// key at fault when it fails: the key of its table, and a zero-row query per key it reads.
struct SectionCheck {
    /// `[messages]`, `[[evidence]] #2 (position)`, `[[evidence]] #2 lookup`… (for
    /// [`checked_table`]).
    section: String,
    /// The section's one zero-row query.
    sql: String,
    /// The dotted key naming the table (`members.table`) and the table.
    table: (String, String),
    /// Per key the section reads: (dotted key, its value, a zero-row query of it alone).
    parts: Vec<(String, String, String)>,
}

/// Checks that every table, column and predicate of the mapping is usable by running
/// `SELECT <columns> FROM <table> WHERE (<predicate>) AND 1 = 0` for each section: the
/// database parses and resolves it but reads no row.
///
/// First the declared type of every mapped column ([`crate::column_types::check`]); last the
/// type of `[counter] value` ([`crate::column_types::check_value`]).
///
/// Errors (exit 2): a column or expression of the wrong type, named by its mapping key; the
/// first section that fails, named by the mapping key at fault (its table, a column or a
/// predicate, each tried alone with a zero-row query) with where it is written
/// (`tidemark.toml:21:10: evidence[1].column = "nope" does not match the database: …`) and the
/// database's message.
pub async fn preflight(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
) -> Result<()> {
    crate::column_types::check(conn, mapping, dialect).await?;
    check_contract_columns(conn, mapping, dialect).await?;
    let q = |s: &str| dialect.quote(s);
    // Columns are qualified: SQLite reads an unknown double-quoted bare name as a string
    // literal, but reports an unknown `alias."name"`.
    // The own row is `this`, as in the stage templates (issue 12: predicates may qualify
    // with `this.`, and read `conv.` / `usr.`, joined as sql/common/macros.sql `own` does).
    let cols = |c: &[Option<&String>]| {
        c.iter()
            .flatten()
            .map(|c| format!("this.{}", q(c)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let own = |table: &str, refs: RowRefs, conv_col: &str, user_col: Option<&str>| {
        let mut from = format!("{} this", q(table));
        if let (true, Some(k)) = (refs.conv, &mapping.conversations) {
            from.push_str(&format!(
                " LEFT JOIN {} conv ON conv.{} = this.{}",
                q(&k.table),
                q(&k.key),
                q(conv_col)
            ));
        }
        if let (true, Some(k), Some(u)) = (refs.usr, &mapping.users, user_col) {
            from.push_str(&format!(
                " LEFT JOIN {} usr ON usr.{} = this.{}",
                q(&k.table),
                q(&k.key),
                q(u)
            ));
        }
        from
    };
    // A zero-row query of one column of `table`.
    let column_part = |key: &str, table: &str, column: &str| {
        (
            key.to_string(),
            column.to_string(),
            format!(
                "SELECT this.{} FROM {} this WHERE 1 = 0",
                q(column),
                q(table)
            ),
        )
    };
    // A zero-row query of one predicate (or expression, `as_value`) over `from`.
    let predicate_part = |key: &str, text: &str, from: String, as_value: bool| {
        let sql = if as_value {
            format!("SELECT ({text}) AS tm_value FROM {from} WHERE 1 = 0")
        } else {
            format!("SELECT 1 FROM {from} WHERE ({text}) AND 1 = 0")
        };
        (key.to_string(), text.to_string(), sql)
    };
    let m = &mapping.messages;
    let mut msg_parts = vec![
        column_part("messages.id", &m.table, &m.id),
        column_part("messages.conversation", &m.table, &m.conversation),
        column_part("messages.sender", &m.table, &m.sender),
    ];
    if let Some(c) = &m.created_at {
        msg_parts.push(column_part("messages.created_at", &m.table, c));
    }
    for (key, p) in [
        ("messages.countable", &m.countable),
        ("messages.legacy_countable", &m.legacy_countable),
    ] {
        if let Some(p) = p {
            let from = own(&m.table, RowRefs::of(Some(p)), &m.conversation, None);
            msg_parts.push(predicate_part(key, p, from, false));
        }
    }
    let mut checks: Vec<SectionCheck> = vec![SectionCheck {
        section: "[messages]".into(),
        sql: format!(
            "SELECT {} FROM {} WHERE ({}) AND ({}) AND 1 = 0",
            cols(&[
                Some(&m.id),
                Some(&m.conversation),
                Some(&m.sender),
                m.created_at.as_ref()
            ]),
            own(
                &m.table,
                RowRefs::of(m.countable.as_deref()).or(RowRefs::of(m.legacy_countable.as_deref())),
                &m.conversation,
                None
            ),
            m.countable.as_deref().unwrap_or("1 = 1"),
            m.legacy_countable.as_deref().unwrap_or("1 = 1"),
        ),
        table: ("messages.table".into(), m.table.clone()),
        parts: msg_parts,
    }];
    for (name, k) in [
        ("conversations", &mapping.conversations),
        ("users", &mapping.users),
    ] {
        if let Some(k) = k {
            checks.push(SectionCheck {
                section: format!("[{name}]"),
                sql: format!(
                    "SELECT {} FROM {} this WHERE 1 = 0",
                    cols(&[Some(&k.key)]),
                    q(&k.table)
                ),
                table: (format!("{name}.table"), k.table.clone()),
                parts: vec![column_part(&format!("{name}.key"), &k.table, &k.key)],
            });
        }
    }
    if let Some(mb) = &mapping.members {
        let mut parts = vec![
            column_part("members.user", &mb.table, &mb.user),
            column_part("members.conversation", &mb.table, &mb.conversation),
        ];
        for (key, c) in [
            ("members.join_position", &mb.join_position),
            ("members.join_time", &mb.join_time),
        ] {
            if let Some(c) = c {
                parts.push(column_part(key, &mb.table, c));
            }
        }
        if let Some(a) = &mb.active {
            let from = own(
                &mb.table,
                RowRefs::of(Some(a)),
                &mb.conversation,
                Some(&mb.user),
            );
            parts.push(predicate_part("members.active", a, from, false));
        }
        checks.push(SectionCheck {
            section: "[members]".into(),
            sql: format!(
                "SELECT {} FROM {} WHERE ({}) AND 1 = 0",
                cols(&[
                    Some(&mb.user),
                    Some(&mb.conversation),
                    mb.join_position.as_ref(),
                    mb.join_time.as_ref()
                ]),
                own(
                    &mb.table,
                    RowRefs::of(mb.active.as_deref()),
                    &mb.conversation,
                    Some(&mb.user)
                ),
                mb.active.as_deref().unwrap_or("1 = 1"),
            ),
            table: ("members.table".into(), mb.table.clone()),
            parts,
        });
    }
    let c = &mapping.counter;
    let value = c
        .value
        .as_ref()
        .map(|v| format!("({v}) AS tm_value, "))
        .unwrap_or_default();
    let counter_table = mapping.counter_table();
    let counter_conv = c.conversation.as_deref().unwrap_or(&m.conversation);
    let counter_from = own(
        counter_table,
        RowRefs::of(c.value.as_deref()).or(RowRefs::of(c.rows.as_deref())),
        counter_conv,
        c.user.as_deref(),
    );
    let mut counter_parts = Vec::new();
    for (key, col) in [
        ("counter.column", c.stored_column().map(|_| &c.column)),
        ("counter.user", c.user.as_ref()),
        ("counter.conversation", c.conversation.as_ref()),
    ] {
        if let Some(col) = col {
            counter_parts.push(column_part(key, counter_table, col));
        }
    }
    for (key, text, as_value) in [
        ("counter.value", &c.value, true),
        ("counter.rows", &c.rows, false),
    ] {
        if let Some(t) = text {
            let from = own(
                counter_table,
                RowRefs::of(Some(t)),
                counter_conv,
                c.user.as_deref(),
            );
            counter_parts.push(predicate_part(key, t, from, as_value));
        }
    }
    checks.push(SectionCheck {
        section: "[counter]".into(),
        sql: format!(
            "SELECT {value}{} FROM {counter_from} WHERE ({}) AND 1 = 0",
            cols(&[
                c.stored_column().map(|_| &c.column),
                c.user.as_ref(),
                c.conversation.as_ref()
            ]),
            c.rows.as_deref().unwrap_or("1 = 1"),
        ),
        table: (
            if c.table.is_some() {
                "counter.table"
            } else {
                "messages.table"
            }
            .into(),
            counter_table.to_string(),
        ),
        parts: counter_parts,
    });
    checks.extend(evidence_checks(mapping, dialect, &own));
    for check in &checks {
        if let Err(e) = sqlx::raw_sql(&check.sql).execute(&mut *conn).await {
            let section = check.section.as_str();
            let e = anyhow::Error::from(e);
            if crate::lock::is_lock_wait(&e) {
                return Err(e.context(format!(
                    "checking mapping {section}: another session holds a lock"
                )));
            }
            if crate::db::privileges::is_permission_denied(&e) {
                let table = checked_table(mapping, section);
                let select = [crate::db::privileges::Privilege::Select];
                return Err(
                    crate::db::privileges::denied(conn, dialect, &table, &select, &e).await,
                );
            }
            let e = e.downcast::<sqlx::Error>().expect("a sqlx error");
            if matches!(e, sqlx::Error::Database(_)) {
                // The check's own table alias means nothing to the reader.
                let why = e
                    .as_database_error()
                    .map(|d| d.message().replace("this.", ""))
                    .unwrap_or_default();
                let dropped = if section == "[counter]" {
                    match dropped_by(conn, mapping, dialect).await.ok().flatten() {
                        Some(id) => format!(" (the counter was dropped by contract run #{id}: there is nothing left to backfill from or audit)"),
                        None => dropped_columns(conn, mapping, dialect)
                            .await
                            .ok()
                            .filter(|d| !d.is_empty())
                            .map(|d| format!(" (the counter's columns were dropped by {}: there is nothing left to backfill from or audit)", d.join(", ")))
                            .unwrap_or_default(),
                    }
                } else {
                    String::new()
                };
                return Err(input_error(
                    match key_at_fault(conn, dialect, check).await {
                        Some((key, value, why)) => format!(
                            "{} = {value:?} does not match the database: {why}{dropped}",
                            mapping.located(&key)
                        ),
                        None => {
                            format!("mapping {section} does not match the database: {why}{dropped}")
                        }
                    },
                ));
            }
            return Err(e.into());
        }
    }
    let counter_rows = format!(
        "{counter_from} WHERE ({})",
        c.rows.as_deref().unwrap_or("1 = 1")
    );
    crate::column_types::check_value(conn, mapping, dialect, &counter_rows).await?;
    check_counter_rows(conn, mapping, dialect).await
}

/// The mapping key at fault in a failed preflight `check`, with its value and the database's
/// message: its table when the table does not exist, else the first of its keys whose own
/// zero-row query fails. None when each succeeds alone.
async fn key_at_fault(
    conn: &mut AnyConnection,
    dialect: Dialect,
    check: &SectionCheck,
) -> Option<(String, String, String)> {
    let (table_key, table) = &check.table;
    if !table_exists(conn, dialect, table).await.unwrap_or(true) {
        return Some((
            table_key.clone(),
            table.clone(),
            format!("table {table:?} not found"),
        ));
    }
    for (key, value, sql) in &check.parts {
        if let Err(e) = sqlx::raw_sql(sql).execute(&mut *conn).await {
            let why = e
                .as_database_error()
                .map(|d| d.message().replace("this.", ""))
                .unwrap_or_else(|| e.to_string());
            return Some((key.clone(), value.clone(), why));
        }
    }
    None
}

/// The `[contract] columns` entries (`drop = "columns"`) must name existing columns, unless a
/// contract run dropped them (its archive in `tidemark_counter_archive` holds them: then the
/// `[counter]` check reports which run dropped what).
///
/// Errors (exit 2): the first missing column, named with the key `[contract] columns`. Exit 3:
/// the catalog or the archive cannot be read.
async fn check_contract_columns(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
) -> Result<()> {
    match missing_contract_columns(conn, mapping, dialect).await?.first() {
        None => Ok(()),
        Some(dc) => Err(input_error(format!(
            "{} = \"{}.{}\": column {:?} not found in table {:?} (and tidemark_counter_archive holds no archive of it)",
            mapping.located("contract.columns"),
            dc.table,
            dc.column,
            dc.column,
            dc.table
        ))),
    }
}

/// The `[contract] columns` entries (`drop = "columns"`, in the mapping's order) that name a
/// column the database does not have (any more) and that no contract run dropped (none of
/// them is archived in `tidemark_counter_archive`). Empty without such a section. The
/// preflight refuses the first (exit 2); `status` warns about each.
///
/// Errors (exit 3): the catalog or the archive cannot be read.
pub async fn missing_contract_columns(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
) -> Result<Vec<crate::mapping::DropColumn>> {
    if mapping.contract.is_none() {
        return Ok(Vec::new());
    }
    let crate::mapping::ContractTargets::Columns(cols) = mapping.contract_targets() else {
        return Ok(Vec::new());
    };
    let ctx = SqlContext::new(mapping, dialect);
    let mut missing = Vec::new();
    for dc in cols {
        let present = crate::stages::contract::table_columns(conn, &ctx, &dc.table).await?;
        if present.iter().any(|p| p.eq_ignore_ascii_case(&dc.column)) {
            continue;
        }
        if crate::stages::contract::archived_by(conn, dialect, &dc.table, &dc.column)
            .await?
            .is_some()
        {
            continue;
        }
        missing.push(dc);
    }
    Ok(missing)
}

/// The `[contract] columns` a contract run dropped, each as `contract run #N (table.column)`,
/// grouped per run: `contract run #4 (conv.msg_total, conv.seen)`. Empty without a
/// `[contract]` section or when nothing was archived.
///
/// Errors (exit 3): the catalog or the archive cannot be read.
async fn dropped_columns(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
) -> Result<Vec<String>> {
    if mapping.contract.is_none() {
        return Ok(Vec::new());
    }
    let crate::mapping::ContractTargets::Columns(cols) = mapping.contract_targets() else {
        return Ok(Vec::new());
    };
    let ctx = SqlContext::new(mapping, dialect);
    let mut runs: Vec<(i64, Vec<String>)> = Vec::new();
    for dc in cols {
        let present = crate::stages::contract::table_columns(conn, &ctx, &dc.table).await?;
        if present.iter().any(|p| p.eq_ignore_ascii_case(&dc.column)) {
            continue;
        }
        let Some(id) =
            crate::stages::contract::archived_by(conn, dialect, &dc.table, &dc.column).await?
        else {
            continue;
        };
        let name = format!("{}.{}", dc.table, dc.column);
        match runs.iter_mut().find(|(r, _)| *r == id) {
            Some((_, names)) => names.push(name),
            None => runs.push((id, vec![name])),
        }
    }
    Ok(runs
        .into_iter()
        .map(|(id, names)| format!("contract run #{id} ({})", names.join(", ")))
        .collect())
}

/// Under `[counter] value` / `rows` without `combine = "sum"`, a member must have one counter
/// row: several are bad input (issue 12), named with how many members and the first of them.
///
/// Errors: exit 2 when a member has several rows; exit 3 when the database fails.
async fn check_counter_rows(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
) -> Result<()> {
    if !mapping.counter_is_expression()
        || mapping.counter.combine == Some(Combine::Sum)
        || mapping.counter.shape != Shape::PerMember
    {
        return Ok(());
    }
    let ctx = SqlContext::new(mapping, dialect);
    let sql = render(
        "audit_counter_duplicates.sql",
        &ctx,
        minijinja::context! { text_type => dialect.text_type() },
    )?;
    let Some(row) = sqlx::query(&sql).fetch_optional(&mut *conn).await? else {
        return Ok(());
    };
    let members: i64 = sqlx::Row::try_get(&row, "members")?;
    let rows: i64 = sqlx::Row::try_get(&row, "n")?;
    Err(input_error(format!(
        "[counter]: {members} member(s) have several counter rows in {} (the first: conversation {}, user {}: {rows} rows); keep one per member with `rows = \"…\"` or add `combine = \"sum\"`",
        mapping.counter_table(),
        text(&row, "conv")?.unwrap_or_default(),
        text(&row, "usr")?.unwrap_or_default(),
    )))
}

/// Builds `FROM <table> this [LEFT JOIN … conv] [LEFT JOIN … usr]` from the table, the row
/// names its predicate reads, the own row's conversation and user key columns.
type OwnFrom<'a> = dyn Fn(&str, RowRefs, &str, Option<&str>) -> String + 'a;

/// The preflight queries of the evidence: per `position` / `timestamp` entry its columns
/// under its `filter` (the evidence row is `this`, as in the backfill), and its `lookup`
/// table's key and position columns (section `[[evidence]] #N lookup`), each with its keys
/// (`evidence[N].column`, `evidence[N].lookup.key`…) for naming the one at fault.
/// `own` builds the FROM clause of an own row `this` with the `conv` / `usr` rows its
/// predicate reads (as in [`preflight`]).
fn evidence_checks(mapping: &Mapping, dialect: Dialect, own: &OwnFrom<'_>) -> Vec<SectionCheck> {
    let q = |s: &str| dialect.quote(s);
    let zero_rows = |table: &str, column: &str| {
        format!(
            "SELECT this.{} FROM {} this WHERE 1 = 0",
            q(column),
            q(table)
        )
    };
    let mut checks = Vec::new();
    for (i, e) in mapping.evidence.iter().enumerate() {
        let Some(src) = e.source() else { continue };
        let n = i + 1;
        let cols = [
            Some(&src.user),
            src.conversation.as_ref(),
            Some(&src.column),
        ]
        .iter()
        .flatten()
        .map(|c| format!("this.{}", q(c)))
        .collect::<Vec<_>>()
        .join(", ");
        let mut parts = Vec::new();
        for (k, c) in [
            ("user", Some(&src.user)),
            ("conversation", src.conversation.as_ref()),
            ("column", Some(&src.column)),
        ] {
            if let Some(c) = c {
                parts.push((
                    format!("evidence[{n}].{k}"),
                    c.clone(),
                    zero_rows(&src.table, c),
                ));
            }
        }
        if let Some(f) = &src.filter {
            parts.push((
                format!("evidence[{n}].filter"),
                f.clone(),
                format!(
                    "SELECT 1 FROM {} WHERE ({f}) AND 1 = 0",
                    own(
                        &src.table,
                        RowRefs::of(Some(f)),
                        src.conversation.as_deref().unwrap_or_default(),
                        Some(&src.user)
                    )
                ),
            ));
        }
        checks.push(SectionCheck {
            section: format!("[[evidence]] #{n} ({})", e.kind().as_str()),
            sql: format!(
                "SELECT {cols} FROM {} WHERE ({}) AND 1 = 0",
                own(
                    &src.table,
                    RowRefs::of(src.filter.as_deref()),
                    src.conversation.as_deref().unwrap_or_default(),
                    Some(&src.user)
                ),
                src.filter.as_deref().unwrap_or("1 = 1"),
            ),
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
                    parts.push((
                        format!("evidence[{n}].lookup.{k}"),
                        c.clone(),
                        zero_rows(&l.table, c),
                    ));
                }
            }
            checks.push(SectionCheck {
                section: format!("[[evidence]] #{n} lookup"),
                sql: format!(
                    "SELECT tm_t.{}, tm_t.{}{} FROM {} tm_t WHERE 1 = 0",
                    q(&l.key),
                    q(&l.position),
                    l.conversation
                        .as_deref()
                        .map(|c| format!(", tm_t.{}", q(c)))
                        .unwrap_or_default(),
                    q(&l.table)
                ),
                table: (format!("evidence[{n}].lookup.table"), l.table.clone()),
                parts,
            });
        }
    }
    checks
}

/// The table a preflight section (`[messages]`, `[[evidence]] #2 (position)`,
/// `[[evidence]] #2 lookup`…) reads.
fn checked_table(mapping: &Mapping, section: &str) -> String {
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

/// Whether `table` is a view (stages that only read accept views; `contract` does not).
pub async fn is_view(conn: &mut AnyConnection, dialect: Dialect, table: &str) -> Result<bool> {
    let (sql, binds) = dialect.catalog().view_count_query(table);
    let mut q = sqlx::query_scalar(&sql);
    for bind in binds {
        q = q.bind(bind);
    }
    let n: i64 = q.fetch_one(&mut *conn).await?;
    Ok(n > 0)
}

/// Whether a table exists (used by `status` and `expand --dry-run`).
///
/// Errors (exit 3): the session may not read it ("permission denied", with the GRANT that is
/// missing: [`crate::db::privileges::denied`]), or the database fails.
pub async fn table_exists(conn: &mut AnyConnection, dialect: Dialect, table: &str) -> Result<bool> {
    let sql = format!("SELECT 1 FROM {} WHERE 1 = 0", dialect.quote(table));
    match sqlx::raw_sql(&sql).execute(&mut *conn).await {
        Ok(_) => Ok(true),
        Err(e) => {
            let e = anyhow::Error::from(e);
            if crate::lock::is_lock_wait(&e) {
                return Err(e.context(format!(
                    "reading table {table}: another session holds a lock"
                )));
            }
            if crate::db::privileges::is_permission_denied(&e) {
                let select = [crate::db::privileges::Privilege::Select];
                return Err(crate::db::privileges::denied(conn, dialect, table, &select, &e).await);
            }
            match e.downcast::<sqlx::Error>() {
                Ok(sqlx::Error::Database(_)) => Ok(false),
                Ok(other) => Err(other.into()),
                Err(other) => Err(other),
            }
        }
    }
}

/// The contract run that dropped the mapping's counter column, if the ledger exists and one
/// did (for the preflight's message about a counter that is gone).
async fn dropped_by(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
) -> Result<Option<i64>> {
    if !table_exists(conn, dialect, crate::tables::LEDGER_TABLE).await? {
        return Ok(None);
    }
    crate::ledger::contract_that_dropped(
        conn,
        dialect,
        mapping.counter_table(),
        &mapping.counter.column,
    )
    .await
}
