//! The preflight: before any stage writes anything, every mapped table, column and predicate
//! must exist, parse and have the right type, so that a mapping mistake is reported as bad
//! input (exit 2) naming the mapping key and where it is written, not as a database error in
//! the middle of a stage.

use anyhow::Result;
use sqlx::AnyConnection;

use super::collations::KeyCollations;
use super::sections::{checked_table, section_checks, SectionCheck};
use super::{column_types, counter_values, positions, time_kinds};
use crate::db::catalog::{table_columns, table_exists};
use crate::db::privileges::{denied, is_permission_denied, Privilege};
use crate::dialect::{render, Dialect, SqlContext};
use crate::error::input_error;
use crate::mapping::{Combine, Evidence, Mapping, Shape};
use crate::tables::LEDGER_TABLE;
use crate::values::text;

/// Checks that every table, column and predicate of the mapping is usable by running
/// `SELECT <columns> FROM <table> WHERE (<predicate>) AND 1 = 0` for each section
/// ([`super::sections`]): the database parses and resolves it but reads no row.
///
/// First the declared type of every mapped column ([`column_types::check`]), the kinds of the
/// time columns compared with each other ([`time_kinds::check`]: a number beside a time is
/// refused, a wall time beside an instant noted) and the `[contract] columns`; last the type of `[counter] value` ([`column_types::check_value`]), the counter's
/// values ([`counter_values::check`]: whole numbers within the 64-bit range; the one check
/// here that reads rows, where the declared type does not settle it), one `[members]` row per
/// member and one counter row per member; after every counter's checks, once, that every
/// message's position is > 0 ([`positions::check`], issue 29 row 4). Returns the key columns' collations
/// ([`KeyCollations`], issue 25): the stage's statements follow them
/// ([`KeyCollations::apply`]), and where they differ the stage reports
/// [`KeyCollations::notice`] in its summary (a notice, not an error: the statements then
/// compare keys byte for byte, so the results do not depend on the collations).
///
/// Errors (exit 2): a column or expression of the wrong type, named by its mapping key; a
/// counter value that is not a whole number within the 64-bit range, named with its row; the
/// first section that fails, named by the mapping key at fault (its table, a column or a
/// predicate, each tried alone with a zero-row query) with where it is written
/// (`tidemark.toml:21:10: evidence[1].column = "nope" does not match the database: …`) and the
/// database's message. Exit 3: a lock wait, a missing privilege (named with its GRANT), a
/// database failure.
///
/// A mapping of several counters (issue 22) is checked once per counter, through each
/// counter's view ([`Mapping::per_counter`]: its own `countable`, value and column), and a
/// mention counter's mentions table with a zero-row join to the messages; the collations
/// returned are the first view's.
pub async fn preflight(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
) -> Result<KeyCollations> {
    refuse_spider(conn, mapping, dialect).await?;
    let mut first = None;
    for view in mapping.per_counter() {
        let collations = preflight_one(conn, &view, dialect).await?;
        check_mentions(conn, &view, dialect).await?;
        first.get_or_insert(collations);
    }
    positions::check(conn, mapping, dialect).await?;
    super::flag_keys::check(conn, mapping, dialect).await?;
    first.ok_or_else(|| input_error("the mapping has no counter"))
}

/// The legacy tables the mapping reads (messages, members, counters, evidence, the
/// `[conversations]` and `[users]` tables), each once, in that order.
fn mapped_tables(mapping: &Mapping) -> Vec<String> {
    let mut tables = vec![mapping.messages.table.clone()];
    tables.extend(mapping.members.iter().map(|m| m.table.clone()));
    for c in &mapping.counters {
        tables.push(c.table.clone().unwrap_or(mapping.messages.table.clone()));
    }
    for e in &mapping.evidence {
        if let Evidence::Position(s) | Evidence::Timestamp(s) | Evidence::ReadFlags(s) = e {
            tables.push(s.table.clone());
        }
    }
    tables.extend(mapping.conversations.iter().map(|t| t.table.clone()));
    tables.extend(mapping.users.iter().map(|t| t.table.clone()));
    let mut seen = Vec::new();
    tables.retain(|t| {
        let new = !seen.contains(t);
        seen.push(t.clone());
        new
    });
    tables
}

/// Refuses MariaDB Spider tables among the mapped ones (issue 31): Spider pushes aggregates
/// down to its data nodes (`spider_direct_aggregate`, its group-by handler), and the
/// correlated counts of the audit and the backfill came back wrong through it (17,425
/// drifting rows instead of 1,790, measured by hand). No session setting is relied on to make
/// them exact: tidemark runs on each data node instead, where the tables are plain InnoDB.
///
/// Errors (exit 2): the Spider tables named, with the way out (one run per shard URL).
/// Exit 3: the catalog cannot be read.
async fn refuse_spider(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
) -> Result<()> {
    let tables = mapped_tables(mapping);
    let spider = dialect.catalog().spider_tables(conn, &tables).await?;
    if spider.is_empty() {
        return Ok(());
    }
    Err(input_error(spider_refusal(&spider)))
}

/// The message of [`refuse_spider`] for the Spider tables `spider`.
fn spider_refusal(spider: &[String]) -> String {
    format!(
        "the mapped tables {} are MariaDB Spider tables (ENGINE=SPIDER): Spider pushes counts down to its data nodes and the correlated counts tidemark relies on come back wrong through it, so tidemark does not run on them; run it on each shard's own server instead, with per-shard URLs (--database URL of each data node the Spider tables point at, one run per shard)",
        spider.join(", ")
    )
}

/// A mention counter's mentions table (`[[counter]] mentions`): its columns and the messages
/// column they match, with a zero-row query; or its mention predicate (`mentioned`, issue 29
/// row 16) over the messages and the readers; nothing for another counter.
///
/// Errors (exit 2): the table or a column is missing, named by `counter.mentions` and where
/// it is written; exit 3 for a lock wait or a missing privilege.
async fn check_mentions(conn: &mut AnyConnection, view: &Mapping, dialect: Dialect) -> Result<()> {
    let (mn, mentioned) = (&view.counter.mentions, &view.counter.mentioned);
    if mn.is_none() && mentioned.is_none() {
        return Ok(());
    }
    let ctx = SqlContext::new(view, dialect);
    let sql = render("preflight_mentions.sql", &ctx, minijinja::context! {})?;
    if let Err(e) = sqlx::raw_sql(&sql).execute(&mut *conn).await {
        let e = anyhow::Error::from(e);
        if Dialect::error_is_lock_wait(&e) || is_permission_denied(&e) {
            return Err(e);
        }
        let Some(mn) = mn else {
            return Err(input_error(format!(
                "{} = {:?} does not match the database (a predicate over the message `this` and the reader's [users] row `usr`): {}",
                view.located("counter.mentioned"),
                mentioned.as_deref().unwrap_or_default(),
                crate::error::masked(&format!("{e:#}"))
            )));
        };
        return Err(input_error(format!(
            "{} = {{ table = {:?}, message = {:?}, user = {:?} }} does not match the database (messages.{} is matched against the message column): {}",
            view.located("counter.mentions"),
            mn.table,
            mn.message,
            mn.user,
            mn.key.as_deref().unwrap_or(&view.messages.id),
            crate::error::masked(&format!("{e:#}"))
        )));
    }
    Ok(())
}

/// [`preflight`] of one counter's view.
async fn preflight_one(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
) -> Result<KeyCollations> {
    column_types::check(conn, mapping, dialect).await?;
    let time_notices = time_kinds::check(conn, mapping, dialect).await?;
    check_contract_columns(conn, mapping, dialect).await?;
    for check in &section_checks(mapping, dialect)? {
        if let Err(e) = sqlx::raw_sql(&check.sql).execute(&mut *conn).await {
            return Err(section_failed(conn, mapping, dialect, check, e).await);
        }
    }
    let from = counter_rows_from(mapping, dialect)?;
    column_types::check_value(conn, mapping, dialect, &from).await?;
    counter_values::check(conn, mapping, dialect, &from).await?;
    check_member_rows(conn, mapping, dialect).await?;
    check_counter_rows(conn, mapping, dialect).await?;
    let mut collations = KeyCollations::read(conn, mapping, dialect).await?;
    collations.other_notices.extend(time_notices);
    Ok(collations)
}

/// The counter's own rows as the stages read them, for the type of `[counter] value`:
/// `<counter table> this [LEFT JOIN … conv] [LEFT JOIN … usr] WHERE (<rows>)`.
fn counter_rows_from(mapping: &Mapping, dialect: Dialect) -> Result<String> {
    let ctx = SqlContext::new(mapping, dialect);
    render("preflight_counter_rows.sql", &ctx, minijinja::context! {})
}

/// The error of a section check that failed: a lock wait or a missing privilege as they are
/// (exit 3), a database error pinned on the mapping key at fault (exit 2).
async fn section_failed(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
    check: &SectionCheck,
    e: sqlx::Error,
) -> anyhow::Error {
    let section = check.section.as_str();
    let e = anyhow::Error::from(e);
    if Dialect::error_is_lock_wait(&e) {
        return e.context(format!(
            "checking mapping {section}: another session holds a lock"
        ));
    }
    if is_permission_denied(&e) {
        let table = checked_table(mapping, section);
        return denied(conn, dialect, &table, &[Privilege::Select], &e).await;
    }
    let e = e.downcast::<sqlx::Error>().expect("a sqlx error");
    if !matches!(e, sqlx::Error::Database(_)) {
        return e.into();
    }
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
    input_error(match key_at_fault(conn, dialect, check).await {
        Some((key, value, why)) => format!(
            "{} = {value:?} does not match the database: {why}{dropped}",
            mapping.located(&key)
        ),
        None => format!("mapping {section} does not match the database: {why}{dropped}"),
    })
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
        let present = table_columns(conn, &ctx, &dc.table).await?;
        if present.iter().any(|p| p.eq_ignore_ascii_case(&dc.column)) {
            continue;
        }
        if crate::ledger::archived_by(conn, dialect, &dc.table, &dc.column)
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
        let present = table_columns(conn, &ctx, &dc.table).await?;
        if present.iter().any(|p| p.eq_ignore_ascii_case(&dc.column)) {
            continue;
        }
        let Some(id) = crate::ledger::archived_by(conn, dialect, &dc.table, &dc.column).await?
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

/// A per-member counter without `combine = "sum"` must have one row per member (after
/// `[counter] rows`): several are bad input, named with how many members and the first of
/// them. Issue 12 for `value` / `rows`; issue 29 row 12 for a plain `[counter] column`, which
/// before was not checked ("wrote 9 watermarks" for one member, the member audited twice).
///
/// Errors: exit 2 when a member has several rows; exit 3 when the database fails.
async fn check_counter_rows(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
) -> Result<()> {
    if mapping.counter.combine == Some(Combine::Sum) || mapping.counter.shape != Shape::PerMember {
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

/// A member must have one `[members]` row (issue 25, row 4): every stage joins the members
/// table by (conversation, user), so a second row would make the backfill write the member's
/// watermark twice in one statement (PostgreSQL refuses it, the others count the member
/// twice) and the audit check its counter once per copy. Several are bad input, named with
/// how many members and the first of them by key, as several counter rows are
/// ([`check_counter_rows`]). One set-based query (`preflight_member_duplicates.sql`).
///
/// Errors: exit 2 when a member has several rows; exit 3 when the database fails.
async fn check_member_rows(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
) -> Result<()> {
    let Some(members) = &mapping.members else {
        return Ok(());
    };
    let ctx = SqlContext::new(mapping, dialect);
    let sql = render(
        "preflight_member_duplicates.sql",
        &ctx,
        minijinja::context! { text_type => dialect.text_type() },
    )?;
    let Some(row) = sqlx::query(&sql).fetch_optional(&mut *conn).await? else {
        return Ok(());
    };
    let count: i64 = sqlx::Row::try_get(&row, "members")?;
    let rows: i64 = sqlx::Row::try_get(&row, "n")?;
    Err(input_error(format!(
        "{} = {:?}: {count} member(s) have several rows in {} (the first: conversation {}, user {}: {rows} rows); the stages need one row per (conversation, user): map a table or view that keeps one per member (for a membership history, the latest)",
        mapping.located("members.table"),
        members.table,
        members.table,
        text(&row, "conv")?.unwrap_or_default(),
        text(&row, "usr")?.unwrap_or_default(),
    )))
}

/// The contract run that dropped the mapping's counter column, if the ledger exists and one
/// did (for the preflight's message about a counter that is gone).
async fn dropped_by(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
) -> Result<Option<i64>> {
    if !table_exists(conn, dialect, LEDGER_TABLE).await? {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The tables the Spider check asks about: every table the mapping reads, each once (the
    /// counter table named by both `[counter]` and an evidence entry is asked about once).
    #[test]
    fn mapped_tables_each_once_in_order() {
        let text = crate::legacy_schema::mapping_toml(Shape::PerMember, true);
        let mapping = Mapping::parse(&text, "t").unwrap();
        let tables = mapped_tables(&mapping);
        assert_eq!(
            tables,
            ["messages", "members", "unread_counters", "read_receipts"]
        );
    }

    /// The refusal names every Spider table and the way out.
    #[test]
    fn spider_refusal_names_the_tables_and_per_shard_urls() {
        let text = spider_refusal(&["messages".into(), "chat.members".into()]);
        for part in [
            "messages, chat.members",
            "ENGINE=SPIDER",
            "per-shard URLs",
            "--database URL of each data node",
        ] {
            assert!(text.contains(part), "{part:?} in {text}");
        }
    }
}
