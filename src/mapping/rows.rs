//! The rows a predicate or the counter's value can see, and the contract's own targets (issue
//! 12, "The stored value separate from what is dropped", "Predicates that can see their row").
//!
//! - `[conversations]` and `[users]` ([`KeyedTable`]): the conversation row and the user row a
//!   predicate may read as `conv.` and `usr.`; the own row is `this.` ([`RowRefs`]).
//! - `[counter] value`, `rows`, `combine` ([`Combine`](crate::mapping::Combine)): the stored
//!   value as an SQL expression over the counter row (and `conv` / `usr`), which counter rows
//!   count, and whether several rows per member are summed.
//! - `[contract]` ([`ContractTargets`]): what the contract drops (`drop = "columns"`, `"table"`
//!   or `"nothing"`), declared apart from the value.
//!
//! The sections' own types ([`KeyedTable`], `Combine`, [`DropKind`], [`RawContract`]) live in
//! [`super::types`] with the rest of the [`Mapping`]; this file reads and checks them, and
//! resolves what they mean.
//!
//! A mapping without these keys keeps its meaning and its fingerprint: each is added to the
//! fingerprint's JSON only when present.

use toml::Spanned;

use super::locator::{section, Locator};
use super::raw::RawMapping;
use super::types::{Counter, DropKind, KeyedTable, Mapping, Members, Messages, RawContract, Shape};
use super::validate::{check_identifier, check_predicate};

/// One column the contract drops.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DropColumn {
    /// Its table, as the mapping names it (maybe `schema.table`).
    pub table: String,
    /// The column.
    pub column: String,
}

/// What the contract drops, resolved from `[contract]` (or, without it, from `[counter]
/// column`, as before issue 12).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum ContractTargets {
    /// Columns, in the mapping's order; without `[contract]`: the counter column.
    Columns(Vec<DropColumn>),
    /// The counter table, whole.
    Table(String),
    /// Nothing to drop.
    Nothing,
}

/// Which of the mapping's row names a predicate or expression uses (issue 12).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RowRefs {
    /// It reads the conversation row (`conv.`).
    pub conv: bool,
    /// It reads the user row (`usr.`).
    pub usr: bool,
}

impl RowRefs {
    /// The row names `text` uses (an absent text uses none).
    pub fn of(text: Option<&str>) -> RowRefs {
        let names = text.map(crate::sql_text::qualifiers).unwrap_or_default();
        RowRefs {
            conv: names.iter().any(|n| n == "conv"),
            usr: names.iter().any(|n| n == "usr"),
        }
    }

    /// Either's use.
    pub fn or(self, other: RowRefs) -> RowRefs {
        RowRefs {
            conv: self.conv || other.conv,
            usr: self.usr || other.usr,
        }
    }
}

impl Counter {
    /// The stored counter column when the mapping names one (`[counter] column`); None with
    /// `value` (an expression).
    pub fn stored_column(&self) -> Option<&str> {
        (!self.column.is_empty()).then_some(self.column.as_str())
    }

    /// The counter's value as SQL over its row: `value` as written, else `this.<column>`
    /// with the column quoted by `quote`.
    pub fn value_sql(&self, quote: impl Fn(&str) -> String) -> String {
        match &self.value {
            Some(v) => v.clone(),
            None => format!("this.{}", quote(&self.column)),
        }
    }
}

impl Mapping {
    /// What the contract drops ([`ContractTargets`]).
    pub fn contract_targets(&self) -> ContractTargets {
        match &self.contract {
            // Each counter's column (issue 22: several counters, one table).
            None => ContractTargets::Columns(
                self.counters
                    .iter()
                    .map(|c| DropColumn {
                        table: c
                            .table
                            .clone()
                            .unwrap_or_else(|| self.messages.table.clone()),
                        column: c.column.clone(),
                    })
                    .collect(),
            ),
            Some(c) => match c.drop {
                DropKind::Nothing => ContractTargets::Nothing,
                DropKind::Table => ContractTargets::Table(c.table.clone().unwrap_or_default()),
                DropKind::Columns => ContractTargets::Columns(
                    c.columns.iter().filter_map(|s| split_column(s)).collect(),
                ),
            },
        }
    }

    /// Whether the counter is read through the issue-12 form (`value`, `rows` or `combine`),
    /// rather than one column read as it is.
    pub fn counter_is_expression(&self) -> bool {
        self.counter.value.is_some()
            || self.counter.rows.is_some()
            || self.counter.combine.is_some()
    }
}

/// `table.column` or `schema.table.column` split at the last dot.
fn split_column(s: &str) -> Option<DropColumn> {
    let (table, column) = s.rsplit_once('.')?;
    Some(DropColumn {
        table: table.to_string(),
        column: column.to_string(),
    })
}

/// Reads and checks the issue-12 sections and keys (after [`super::validate`]):
/// `[conversations]`, `[users]`, `[contract]`, `[counter] value/rows/combine`, and the row
/// names every predicate uses.
///
/// Errors (exit 2, `file:line:col:`): an invalid identifier, `value` with `column` or without
/// `[contract]`, a contract target that is not on a mapped table, a predicate reading `conv.`
/// or `usr.` without the section that maps that row.
pub(super) fn parse(
    loc: &Locator<'_>,
    raw: &RawMapping,
    messages: &Messages,
    members: Option<&Members>,
    counter: &Counter,
) -> anyhow::Result<(Option<KeyedTable>, Option<KeyedTable>, Option<RawContract>)> {
    let ck = RowChecks { loc };
    let keyed =
        |t: &Option<Spanned<toml::Table>>, name: &str| -> anyhow::Result<Option<KeyedTable>> {
            match t {
                None => Ok(None),
                Some(t) => {
                    let k: KeyedTable = section(loc, t, name)?;
                    ck.keyed(t, name, &k)?;
                    Ok(Some(k))
                }
            }
        };
    let conversations = keyed(&raw.conversations, "conversations")?;
    let users = keyed(&raw.users, "users")?;
    let contract: Option<RawContract> = match &raw.contract {
        None => None,
        Some(t) => Some(section(loc, t, "contract")?),
    };
    ck.counter(&raw.counter, counter, contract.is_some())?;
    if counter.shape == Shape::ReadFlags {
        let with_span = raw.contract.as_ref().zip(contract.as_ref());
        ck.read_flags_counter(&raw.counter, counter, with_span)?;
    }
    if let (Some(t), Some(c)) = (&raw.contract, &contract) {
        ck.contract(
            t,
            c,
            messages,
            members,
            counter,
            conversations.as_ref(),
            users.as_ref(),
        )?;
    }
    let has = RowRefs {
        conv: conversations.is_some(),
        usr: users.is_some(),
    };
    ck.row_names(
        &raw.messages,
        "messages.countable",
        messages.countable.as_deref(),
        has,
        false,
    )?;
    ck.row_names(
        &raw.messages,
        "messages.legacy_countable",
        messages.legacy_countable.as_deref(),
        has,
        false,
    )?;
    if let (Some(t), Some(mb)) = (&raw.members, members) {
        ck.row_names(t, "members.active", mb.active.as_deref(), has, true)?;
    }
    let per_member = counter.shape == Shape::PerMember;
    ck.row_names(
        &raw.counter,
        "counter.value",
        counter.value.as_deref(),
        has,
        per_member,
    )?;
    ck.row_names(
        &raw.counter,
        "counter.rows",
        counter.rows.as_deref(),
        has,
        per_member,
    )?;
    Ok((conversations, users, contract))
}

/// The checks of the issue-12 keys, pointing at the key's value (exit 2).
pub(super) struct RowChecks<'a> {
    pub(super) loc: &'a Locator<'a>,
}

impl RowChecks<'_> {
    fn at_key(&self, t: &Spanned<toml::Table>, key: &str, msg: &str) -> anyhow::Error {
        self.loc
            .at(self.loc.value_span(t, key).or(Some(t.span())), msg)
    }

    /// `[conversations]` / `[users]`: table and key are identifiers.
    pub(super) fn keyed(
        &self,
        t: &Spanned<toml::Table>,
        name: &str,
        k: &KeyedTable,
    ) -> anyhow::Result<()> {
        check_identifier(&k.table, true).map_err(|why| {
            self.at_key(t, "table", &format!("{name}.table = {:?}: {why}", k.table))
        })?;
        check_identifier(&k.key, false)
            .map_err(|why| self.at_key(t, "key", &format!("{name}.key = {:?}: {why}", k.key)))
    }

    /// A predicate or expression's row names: `conv.` needs `[conversations]`, `usr.` needs
    /// `[users]` and a row with a user key (`user_row`).
    pub(super) fn row_names(
        &self,
        t: &Spanned<toml::Table>,
        key: &str,
        text: Option<&str>,
        has: RowRefs,
        user_row: bool,
    ) -> anyhow::Result<()> {
        let refs = RowRefs::of(text);
        if refs.conv && !has.conv {
            return Err(self.at_key(
                t,
                key.rsplit('.').next().unwrap_or(key),
                &format!("{key} reads `conv.`, the conversation row: add a [conversations] section (table, key)"),
            ));
        }
        if refs.usr && !user_row {
            return Err(self.at_key(
                t,
                key.rsplit('.').next().unwrap_or(key),
                &format!("{key} reads `usr.`, but its row has no user key: `usr` is the user row of the members, counter and evidence rows"),
            ));
        }
        if refs.usr && !has.usr {
            return Err(self.at_key(
                t,
                key.rsplit('.').next().unwrap_or(key),
                &format!("{key} reads `usr.`, the user row: add a [users] section (table, key)"),
            ));
        }
        Ok(())
    }

    /// `[counter] value`, `rows`, `combine` against `column` and the shape.
    pub(super) fn counter(
        &self,
        c: &Spanned<toml::Table>,
        counter: &Counter,
        has_contract: bool,
    ) -> anyhow::Result<()> {
        if counter.shape == Shape::ReadFlags {
            // The value is the number of unread flags (validate.rs checked its keys).
            if let Some(p) = &counter.rows {
                check_predicate(p)
                    .map_err(|why| self.at_key(c, "rows", &format!("counter.rows: {why}")))?;
            }
            return Ok(());
        }
        let has_column = !counter.column.is_empty();
        match (&counter.value, has_column) {
            (Some(_), true) => {
                return Err(self.at_key(
                    c,
                    "value",
                    "counter.value and counter.column exclude each other: `column` names a stored counter (read and dropped as it is), `value` an expression (add a [contract] section for what to drop)",
                ))
            }
            (None, false) => {
                return Err(self.loc.at(
                    Some(c.span()),
                    "[counter]: missing field `column` (or `value`, an SQL expression over the counter row)",
                ))
            }
            _ => {}
        }
        if counter.value.is_some() && !has_contract {
            return Err(self.at_key(
                c,
                "value",
                "counter.value needs a [contract] section: tidemark cannot guess what to drop (drop = \"columns\" with columns = [\"table.column\", …], \"table\", or \"nothing\")",
            ));
        }
        for (key, text) in [("value", &counter.value), ("rows", &counter.rows)] {
            if let Some(p) = text {
                check_predicate(p)
                    .map_err(|why| self.at_key(c, key, &format!("counter.{key}: {why}")))?;
            }
        }
        if counter.shape == Shape::PerMessage
            && (counter.value.is_some() || counter.rows.is_some() || counter.combine.is_some())
        {
            let key = ["value", "rows", "combine"]
                .into_iter()
                .find(|k| self.loc.value_span(c, k).is_some())
                .unwrap_or("value");
            return Err(self.at_key(
                c,
                key,
                &format!("counter.{key}: only a per_member counter takes value, rows or combine; a per_message counter is its column on the messages table"),
            ));
        }
        Ok(())
    }

    /// Shape `read_flags` (semantics.md "Shape C"): `read` and `rows` see the flag row `this`
    /// alone (no `conv.` or `usr.`), and the contract must be `drop = "nothing"`: no counter
    /// is stored, and the flags carry other bits than "read".
    pub(super) fn read_flags_counter(
        &self,
        c: &Spanned<toml::Table>,
        counter: &Counter,
        contract: Option<(&Spanned<toml::Table>, &RawContract)>,
    ) -> anyhow::Result<()> {
        for (key, text) in [("read", &counter.read), ("rows", &counter.rows)] {
            let refs = RowRefs::of(text.as_deref());
            if refs.conv || refs.usr {
                return Err(self.at_key(c, key, &format!("counter.{key}: a predicate over the flag row `this` alone (shape \"read_flags\" joins no `conv` or `usr` row)")));
            }
        }
        match contract {
            Some((_, rc)) if rc.drop == DropKind::Nothing => Ok(()),
            Some((t, _)) => Err(self.at_key(t, "drop", "contract.drop: shape \"read_flags\" stores no counter and its flags carry other bits: write drop = \"nothing\" (the contract records the gate's decision)")),
            None => Err(self.loc.at(Some(c.span()), "shape \"read_flags\" needs a [contract] section with drop = \"nothing\": no counter is stored, and the flags carry other bits (the contract records the gate's decision)")),
        }
    }

    /// `[contract]`: the targets exist in the mapping and are identifiers.
    #[allow(clippy::too_many_arguments)] // each section the targets may name
    pub(super) fn contract(
        &self,
        t: &Spanned<toml::Table>,
        c: &RawContract,
        messages: &Messages,
        members: Option<&Members>,
        counter: &Counter,
        conversations: Option<&KeyedTable>,
        users: Option<&KeyedTable>,
    ) -> anyhow::Result<()> {
        let counter_table = counter.table.as_deref().unwrap_or(&messages.table);
        match c.drop {
            DropKind::Columns => {
                if c.table.is_some() {
                    return Err(self.at_key(t, "table", "contract.table: only with drop = \"table\"; drop = \"columns\" lists `columns`"));
                }
                if c.columns.is_empty() {
                    return Err(self.at_key(t, "drop", "contract: drop = \"columns\" needs columns = [\"table.column\", …] (each on a mapped table)"));
                }
                let mapped: Vec<&str> = [
                    Some(counter_table),
                    Some(messages.table.as_str()),
                    members.map(|m| m.table.as_str()),
                    conversations.map(|k| k.table.as_str()),
                ]
                .into_iter()
                .flatten()
                .collect();
                for (i, col) in c.columns.iter().enumerate() {
                    let Some(dc) = split_column(col) else {
                        return Err(self.at_key(t, "columns", &format!("contract.columns = {col:?}: write table.column (the table as the mapping names it)")));
                    };
                    check_identifier(&dc.table, true)
                        .and_then(|_| check_identifier(&dc.column, false))
                        .map_err(|why| {
                            self.at_key(t, "columns", &format!("contract.columns = {col:?}: {why}"))
                        })?;
                    if users.is_some_and(|u| u.table == dc.table)
                        && !mapped.contains(&dc.table.as_str())
                    {
                        return Err(self.at_key(t, "columns", &format!("contract.columns = {col:?}: a column of the [users] table is not dropped by tidemark (its archive is keyed by conversation); drop it yourself after the contract")));
                    }
                    if !mapped.contains(&dc.table.as_str()) {
                        return Err(self.at_key(t, "columns", &format!("contract.columns = {col:?}: {:?} is not a mapped table (the counter table, the messages, members or [conversations] table)", dc.table)));
                    }
                    if c.columns[..i].contains(col) {
                        return Err(self.at_key(
                            t,
                            "columns",
                            &format!("contract.columns = {col:?} is listed twice"),
                        ));
                    }
                    if [&messages.id, &messages.conversation].contains(&&dc.column)
                        && dc.table == messages.table
                    {
                        return Err(self.at_key(t, "columns", &format!("contract.columns = {col:?}: a key the mapping reads cannot be dropped")));
                    }
                }
            }
            DropKind::Table => {
                if !c.columns.is_empty() {
                    return Err(self.at_key(
                        t,
                        "columns",
                        "contract.columns: only with drop = \"columns\"",
                    ));
                }
                let Some(table) = &c.table else {
                    return Err(self.at_key(t, "drop", &format!("contract: drop = \"table\" needs table = {counter_table:?} (the counter table)")));
                };
                if table != counter_table || counter.shape == Shape::PerMessage {
                    return Err(self.at_key(t, "table", &format!("contract.table = {table:?}: only the per_member counter table ({counter_table:?}) can be dropped whole")));
                }
                if members.is_some_and(|m| &m.table == table) {
                    return Err(self.at_key(t, "table", &format!("contract.table = {table:?} is the members table, which the watermarks still need: drop columns instead")));
                }
            }
            DropKind::Nothing => {
                if !c.columns.is_empty() || c.table.is_some() {
                    let key = if c.table.is_some() {
                        "table"
                    } else {
                        "columns"
                    };
                    return Err(self.at_key(
                        t,
                        key,
                        &format!("contract.{key}: drop = \"nothing\" takes no targets"),
                    ));
                }
            }
        }
        Ok(())
    }
}
