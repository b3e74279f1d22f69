//! `tidemark sql app`: the statements the application should switch to for the dual-write
//! period and after, rendered for one mapping and dialect from the `sql/**/app_*.sql`
//! templates, each with the hazard it prevents (in words) and the order of
//! its bind parameters.
//!
//! The templates name their parameters (`{{ bind.conv }}`, `{{ bind.user }}`, …); this module
//! numbers them: `$1`, `$2` … on PostgreSQL (a name used twice keeps its number), `?` in the
//! order of appearance elsewhere (a name used twice is bound twice, as [`AppStatement::binds`]
//! lists).

use anyhow::Result;
use serde::Serialize;

use crate::dialect::{render, Dialect, SqlContext};
use crate::mapping::Mapping;

/// Start and end of a named parameter in a rendered template (replaced before printing).
const MARK: char = '\u{1}';

/// One statement for the application.
#[derive(Debug, Clone, Serialize)]
pub struct AppStatement {
    /// A short name (`mark_read`, `unread_count`, …).
    pub name: &'static str,
    /// When the application runs it.
    pub when: &'static str,
    /// The hazard it prevents, in words: the fault it keeps out (duplicate delivery, a clear
    /// racing a new message, a lost update, members who left still counted, …).
    pub prevents: &'static str,
    /// With several counters (`[[counter]]`, issue 32): the counter (`name`) an unread count
    /// computes, since each counts its own messages (its `countable`; a mention counter only
    /// the messages that mention the member). None for a statement of the whole mapping, and
    /// for every statement of a mapping of one counter (JSON: the key is then left out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counter: Option<String>,
    /// The parameters to bind, in order (on PostgreSQL: the value of `$1`, `$2`, …).
    pub binds: Vec<String>,
    /// The SQL, with the dialect's placeholders.
    pub sql: String,
}

/// The statements computed per counter when a mapping has several (an unread count is
/// one counter's: its own `countable`, its mentions).
const PER_COUNTER: &[&str] = &["unread_count", "unread_count_page"];

/// What each template is: (name, template, when, prevents).
const STATEMENTS: &[(&str, &str, &str, &str)] = &[
    (
        "mark_read",
        "upsert_watermarks.sql",
        "when a client reports the position read up to (from the dual-write period on, instead of clearing or decrementing the counter)",
        "a \"mark all read\" that erases a message arriving meanwhile: it carries the position read, so that message stays unread; and a late or repeated request from another device moving the watermark back: GREATEST/MAX keeps the higher of the stored and the reported position",
    ),
    (
        "send_message_own_watermark",
        "upsert_watermarks.sql",
        "in the transaction that inserts a message, with the new message's position as `message` and its sender as `user`",
        "a member's own messages counted as unread to them: advancing the sender's watermark keeps them out of every count",
    ),
    (
        "unread_count",
        "app_unread_member.sql",
        "to show one member's unread badge in one conversation (show 100 as \"99+\")",
        "a badge that drifts with duplicated or lost events (counted from the watermark, it cannot), and a badge that reads a whole backlog: LIMIT 100 inside the count stops reading at 100 rows however many are unread",
    ),
    (
        "unread_count_page",
        "app_unread_page.sql",
        "to show the badges of a page of conversations in one round trip (page_position is the conversation's place in the page)",
        "a page of badges that reads every backlog: each count stops at 100 rows, so a page costs at most 100 rows per conversation",
    ),
    (
        "message_unread_page",
        "app_message_unread.sql",
        "to show, for a page of messages, how many members have not read each one",
        "a stored per-message counter that goes stale when members join or leave and races on decrement: computed from the watermarks of the members active now, in one grouped query for the page (no N+1)",
    ),
    (
        "sequence_schema",
        "app_seq_schema.sql",
        "optional, once (an expand step of your own), in this order: the messages' seq column, its fill (seq = id, so every existing watermark keeps its meaning), the sequence table started at each conversation's highest id, the indexes; then switch the application's inserts to sequence_next and map seq as the messages' position (`[messages] id = \"seq\"`). A message inserted by code not yet switched has no seq: switch every insert right after this, and map seq only once no row has a NULL seq",
        "a message hidden forever: an auto-increment id is allocated at insert but visible at commit, so a reader's watermark can pass a message that commits later",
    ),
    (
        "sequence_new_conversation",
        "app_seq_new.sql",
        "with the sequence: when a conversation is created",
        "messages of one conversation numbered out of commit order: every conversation gets the row whose lock orders its messages",
    ),
    (
        "sequence_next",
        "app_seq_next.sql",
        "with the sequence: in the transaction that inserts a message, before the INSERT (the message's seq is the number read), then COMMIT",
        "a position that commits after a larger one: the number is taken under the conversation's row lock held until commit, so a smaller number always commits first and sequence order equals commit order",
    ),
];

/// The named parameters the templates use; `conversations` and `messages` are lists of
/// `page` names (`conversation_1`, …, `message_1`, …).
fn binds(page: usize) -> minijinja::Value {
    let mark = |name: &str| format!("{MARK}{name}{MARK}");
    minijinja::context! {
        conv => mark("conversation"),
        user => mark("user"),
        message => mark("message"),
        conversations => (1..=page).map(|i| mark(&format!("conversation_{i}"))).collect::<Vec<_>>(),
        messages => (1..=page).map(|i| mark(&format!("message_{i}"))).collect::<Vec<_>>(),
    }
}

/// The name of the sequence table: the watermark table's, with `_seq` (same schema).
pub fn seq_table(mapping: &Mapping) -> String {
    format!("{}_seq", mapping.watermarks.table)
}

/// Replaces the named parameters of `sql` with the dialect's placeholders; returns the SQL and
/// the names in bind order.
fn number(sql: &str, dialect: Dialect) -> (String, Vec<String>) {
    let numbered = dialect.placeholder(1) != dialect.placeholder(2);
    let mut out = String::with_capacity(sql.len());
    let mut order: Vec<String> = Vec::new();
    let mut parts = sql.split(MARK);
    out.push_str(parts.next().unwrap_or_default());
    while let (Some(name), Some(rest)) = (parts.next(), parts.next()) {
        let n = if numbered {
            match order.iter().position(|o| o == name) {
                Some(i) => i + 1,
                None => {
                    order.push(name.to_string());
                    order.len()
                }
            }
        } else {
            order.push(name.to_string());
            order.len()
        };
        out.push_str(&dialect.placeholder(n));
        out.push_str(rest);
    }
    (out, order)
}

/// The application's statements for `mapping` on `dialect`, a page of `page` conversations
/// (or messages) in the page queries. A template of several statements gives one
/// [`AppStatement`] per statement (same name). With several counters, each unread count
/// ([`PER_COUNTER`]) comes once per counter, in the file's order, each through the counter's
/// view of the mapping ([`Mapping::per_counter`]: its `countable`, its mentions), with
/// [`AppStatement::counter`] naming it.
///
/// Errors: a template that fails to render (a bug in tidemark, exit 3).
pub fn statements(mapping: &Mapping, dialect: Dialect, page: usize) -> Result<Vec<AppStatement>> {
    let views: Vec<(Option<String>, SqlContext)> = if mapping.several_counters() {
        mapping
            .per_counter()
            .iter()
            .map(|v| {
                (
                    Some(v.counter_name().to_string()),
                    SqlContext::new(v, dialect),
                )
            })
            .collect()
    } else {
        vec![(None, SqlContext::new(mapping, dialect))]
    };
    let ctx = SqlContext::new(mapping, dialect);
    let seq = seq_table(mapping);
    let seq_index = format!("{}_conv", seq.rsplit('.').next().unwrap_or(&seq));
    let msg_table = &mapping.messages.table;
    let seq_msg_index = format!(
        "{}_conv_seq",
        msg_table.rsplit('.').next().unwrap_or(msg_table)
    );
    let extra = minijinja::context! {
        bind => binds(page.max(1)),
        from_plan => false,
        seq_table => dialect.quote(&seq),
        seq_index => dialect.quote(&seq_index),
        seq_msg_index => dialect.quote(&seq_msg_index),
    };
    let mut out = Vec::new();
    let whole = [(None, ctx)];
    for (name, template, when, prevents) in STATEMENTS {
        let contexts = if PER_COUNTER.contains(name) {
            &views[..]
        } else {
            &whole[..]
        };
        for (counter, ctx) in contexts {
            let sql = render(template, ctx, extra.clone())?;
            for part in sql.split("\n;\n") {
                let (sql, binds) = number(part.trim(), dialect);
                out.push(AppStatement {
                    name,
                    when,
                    prevents,
                    counter: counter.clone(),
                    binds,
                    sql,
                });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbering_per_dialect() {
        let sql = format!("a = {MARK}x{MARK} AND b = {MARK}y{MARK} OR a = {MARK}x{MARK}");
        let (pg, order) = number(&sql, Dialect::Postgres);
        assert_eq!(pg, "a = $1 AND b = $2 OR a = $1");
        assert_eq!(order, ["x", "y"]);
        let (my, order) = number(&sql, Dialect::Mysql);
        assert_eq!(my, "a = ? AND b = ? OR a = ?");
        assert_eq!(order, ["x", "y", "x"]);
    }
}
