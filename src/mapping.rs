//! The mapping file (`tidemark.toml`): which legacy tables and columns hold the messages, the
//! members, the stored counter and the read evidence (`shared/spec/interface.md`, "The mapping
//! file").
//!
//! Every identifier is validated here and quoted later by the dialect; predicates
//! (`countable`, `legacy_countable`, `active`) are SQL the DBA writes and owns, checked only for
//! statement separators and comments. A file that does not parse, has an unknown key or an
//! invalid identifier is reported as `file:line:col: what is wrong` (exit 2).

use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::ops::Range;
use std::path::Path;
use toml::Spanned;

use crate::error::input_error;

/// A parsed and validated mapping.
#[derive(Debug, Clone)]
pub struct Mapping {
    /// The messages table: positions, conversations, senders.
    pub messages: Messages,
    /// Membership (optional): active flag and join positions.
    pub members: Option<Members>,
    /// The legacy counter that the contract stage drops.
    pub counter: Counter,
    /// Read evidence, best first.
    pub evidence: Vec<Evidence>,
    /// The watermark table that `expand` creates.
    pub watermarks: Watermarks,
    /// SHA-256 (hex) of the normalised mapping: what the ledger keys audits and checkpoints by.
    pub fingerprint: String,
}

/// `[messages]`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Messages {
    /// Table, optionally `schema.table`.
    pub table: String,
    /// The position column: an integer increasing within a conversation.
    pub id: String,
    /// The conversation key column.
    pub conversation: String,
    /// The sender's user key column.
    pub sender: String,
    /// Creation time column, needed by `timestamp` evidence.
    pub created_at: Option<String>,
    /// SQL predicate on a messages row: what counts as unread now (default: every message).
    pub countable: Option<String>,
    /// SQL predicate: what the legacy counter counted (default: every message).
    pub legacy_countable: Option<String>,
}

/// `[members]`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Members {
    /// Table, optionally `schema.table`.
    pub table: String,
    /// User key column.
    pub user: String,
    /// Conversation key column.
    pub conversation: String,
    /// SQL predicate on a members row: the member is still in the conversation.
    pub active: Option<String>,
    /// Column: positions at or below it are not the member's.
    pub join_position: Option<String>,
}

/// The legacy counter's shape (`shared/spec/semantics.md`, "Legacy shapes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// Shape A (seed 000): one counter per (user, conversation).
    PerMember,
    /// Shape B (seed 003): one counter per message, how many members have not read it.
    PerMessage,
}

/// `[counter]`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Counter {
    /// per_member or per_message.
    pub shape: Shape,
    /// Table holding the counter; for per_message, the messages table (the default).
    pub table: Option<String>,
    /// User key column (per_member).
    pub user: Option<String>,
    /// Conversation key column (per_member).
    pub conversation: Option<String>,
    /// The counter column that `contract` drops.
    pub column: String,
}

/// An evidence kind (`shared/spec/semantics.md`, "Backfill").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EvidenceKind {
    /// A read position column or a receipts table (maximum per member).
    Position,
    /// A "last read at" time: the highest position created at or before it.
    Timestamp,
    /// The stored counter itself (per_member only).
    Counter,
    /// Lower bound: the member's own newest message.
    OwnMessage,
}

impl EvidenceKind {
    /// The name recorded as a watermark's provenance (`watermark_source` in the report).
    pub fn as_str(self) -> &'static str {
        match self {
            EvidenceKind::Position => "position",
            EvidenceKind::Timestamp => "timestamp",
            EvidenceKind::Counter => "counter",
            EvidenceKind::OwnMessage => "own_message",
        }
    }
}

/// One `[[evidence]]` entry.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Evidence {
    /// Which kind of evidence.
    pub kind: EvidenceKind,
    /// Table (position and timestamp).
    pub table: Option<String>,
    /// User key column (position and timestamp).
    pub user: Option<String>,
    /// Conversation key column (position and timestamp).
    pub conversation: Option<String>,
    /// Position or time column (position and timestamp).
    pub column: Option<String>,
}

/// `[watermarks]`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Watermarks {
    /// The watermark table's name, optionally `schema.table`.
    pub table: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMapping {
    messages: Spanned<toml::Table>,
    members: Option<Spanned<toml::Table>>,
    counter: Spanned<toml::Table>,
    #[serde(default)]
    evidence: Vec<Spanned<toml::Table>>,
    watermarks: Spanned<toml::Table>,
}

impl Mapping {
    /// Reads and validates a mapping file.
    ///
    /// Errors (exit 2): the file is missing or unreadable, is not TOML, has an unknown or
    /// missing key, an invalid identifier, a predicate with `;` or a comment, or an evidence
    /// list that the shape cannot use. The message starts with `file:line:col:`.
    pub fn load(path: &Path) -> anyhow::Result<Mapping> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            input_error(format!(
                "{}: cannot read the mapping file: {e}",
                path.display()
            ))
        })?;
        Mapping::parse(&text, &path.display().to_string())
    }

    /// Parses mapping text; `origin` names it in messages (a path, or `<demo>`).
    pub fn parse(text: &str, origin: &str) -> anyhow::Result<Mapping> {
        let at = |span: Option<Range<usize>>, msg: &str| {
            let (line, col) = span.map(|s| line_col(text, s.start)).unwrap_or((1, 1));
            input_error(format!("{origin}:{line}:{col}: {msg}"))
        };
        let raw: RawMapping = toml::from_str(text).map_err(|e| at(e.span(), e.message()))?;
        // Each section is parsed again on its own so that an error points into it.
        fn section<T: for<'de> Deserialize<'de>>(
            text: &str,
            table: &Spanned<toml::Table>,
            name: &str,
            at: &dyn Fn(Option<Range<usize>>, &str) -> anyhow::Error,
        ) -> anyhow::Result<T> {
            T::deserialize(toml::Value::Table(table.get_ref().clone())).map_err(|e| {
                // Point at the offending key when the message names one.
                let key = e
                    .message()
                    .split('`')
                    .nth(1)
                    .unwrap_or_default()
                    .to_string();
                let span = (!key.is_empty())
                    .then(|| find_key_span(text, table.span(), &key))
                    .flatten()
                    .unwrap_or(table.span());
                at(Some(span), &format!("[{name}]: {}", e.message()))
            })
        }
        let messages: Messages = section(text, &raw.messages, "messages", &at)?;
        let members: Option<Members> = match &raw.members {
            Some(t) => Some(section(text, t, "members", &at)?),
            None => None,
        };
        let counter: Counter = section(text, &raw.counter, "counter", &at)?;
        let mut evidence = Vec::new();
        for e in &raw.evidence {
            evidence.push(section::<Evidence>(text, e, "[evidence]", &at)?);
        }
        let watermarks: Watermarks = section(text, &raw.watermarks, "watermarks", &at)?;

        // Identifier checks, each pointing at the key's value.
        let key_span = |table: &Spanned<toml::Table>, key: &str| -> Option<Range<usize>> {
            find_value_span(text, table.span(), key)
        };
        let ident = |table: &Spanned<toml::Table>,
                     section_name: &str,
                     key: &str,
                     value: &str,
                     qualified: bool| {
            check_identifier(value, qualified).map_err(|why| {
                at(
                    key_span(table, key).or(Some(table.span())),
                    &format!("{section_name}.{key} = {value:?}: {why}"),
                )
            })
        };
        let pred = |table: &Spanned<toml::Table>, section_name: &str, key: &str, value: &str| {
            check_predicate(value).map_err(|why| {
                at(
                    key_span(table, key).or(Some(table.span())),
                    &format!("{section_name}.{key}: {why}"),
                )
            })
        };

        let m = &raw.messages;
        ident(m, "messages", "table", &messages.table, true)?;
        ident(m, "messages", "id", &messages.id, false)?;
        ident(m, "messages", "conversation", &messages.conversation, false)?;
        ident(m, "messages", "sender", &messages.sender, false)?;
        if let Some(c) = &messages.created_at {
            ident(m, "messages", "created_at", c, false)?;
        }
        if let Some(p) = &messages.countable {
            pred(m, "messages", "countable", p)?;
        }
        if let Some(p) = &messages.legacy_countable {
            pred(m, "messages", "legacy_countable", p)?;
        }
        if let (Some(t), Some(mb)) = (&raw.members, &members) {
            ident(t, "members", "table", &mb.table, true)?;
            ident(t, "members", "user", &mb.user, false)?;
            ident(t, "members", "conversation", &mb.conversation, false)?;
            if let Some(j) = &mb.join_position {
                ident(t, "members", "join_position", j, false)?;
            }
            if let Some(p) = &mb.active {
                pred(t, "members", "active", p)?;
            }
        }
        let c = &raw.counter;
        ident(c, "counter", "column", &counter.column, false)?;
        match counter.shape {
            Shape::PerMember => {
                for (key, value) in [
                    ("table", &counter.table),
                    ("user", &counter.user),
                    ("conversation", &counter.conversation),
                ] {
                    let Some(value) = value else {
                        return Err(at(
                            Some(c.span()),
                            &format!("counter.{key} is required for shape \"per_member\""),
                        ));
                    };
                    ident(c, "counter", key, value, key == "table")?;
                }
            }
            Shape::PerMessage => {
                if let Some(t) = &counter.table {
                    ident(c, "counter", "table", t, true)?;
                    if t != &messages.table {
                        return Err(at(key_span(c, "table"), &format!(
                            "counter.table = {t:?}: a per_message counter lives on the messages table {:?}",
                            messages.table
                        )));
                    }
                }
                for key in ["user", "conversation"] {
                    if key_span(c, key).is_some() {
                        return Err(at(key_span(c, key), &format!(
                            "counter.{key}: a per_message counter is keyed by the message; remove this key"
                        )));
                    }
                }
                if members.is_none() {
                    return Err(at(Some(c.span()), "shape \"per_message\" needs a [members] section: the recomputed value counts the members who have not read each message"));
                }
            }
        }
        for (e, raw_e) in evidence.iter().zip(&raw.evidence) {
            match e.kind {
                EvidenceKind::Position | EvidenceKind::Timestamp => {
                    for (key, value) in [
                        ("table", &e.table),
                        ("user", &e.user),
                        ("conversation", &e.conversation),
                        ("column", &e.column),
                    ] {
                        let Some(value) = value else {
                            return Err(at(
                                Some(raw_e.span()),
                                &format!(
                                    "evidence.{key} is required for kind \"{}\"",
                                    e.kind.as_str()
                                ),
                            ));
                        };
                        ident(raw_e, "evidence", key, value, key == "table")?;
                    }
                    if e.kind == EvidenceKind::Timestamp && messages.created_at.is_none() {
                        return Err(at(
                            Some(raw_e.span()),
                            "evidence kind \"timestamp\" needs messages.created_at",
                        ));
                    }
                }
                EvidenceKind::Counter | EvidenceKind::OwnMessage => {
                    for key in ["table", "user", "conversation", "column"] {
                        if key_span(raw_e, key).is_some() {
                            return Err(at(
                                key_span(raw_e, key),
                                &format!(
                                    "evidence.{key}: kind \"{}\" reads the {} and takes no {key}",
                                    e.kind.as_str(),
                                    if e.kind == EvidenceKind::Counter {
                                        "[counter]"
                                    } else {
                                        "[messages] table"
                                    }
                                ),
                            ));
                        }
                    }
                    if e.kind == EvidenceKind::Counter && counter.shape == Shape::PerMessage {
                        return Err(at(Some(raw_e.span()), "evidence kind \"counter\" needs shape \"per_member\": a per-message counter has no watermark to derive (semantics.md, Backfill)"));
                    }
                }
            }
        }
        let kinds: Vec<_> = evidence.iter().map(|e| e.kind).collect();
        for (i, k) in kinds.iter().enumerate() {
            if matches!(k, EvidenceKind::Counter | EvidenceKind::OwnMessage)
                && kinds[..i].contains(k)
            {
                return Err(at(
                    Some(raw.evidence[i].span()),
                    &format!("evidence kind \"{}\" is listed twice", k.as_str()),
                ));
            }
        }
        if counter.shape == Shape::PerMessage
            && !kinds
                .iter()
                .any(|k| matches!(k, EvidenceKind::Position | EvidenceKind::Timestamp))
        {
            return Err(at(Some(raw.counter.span()), "shape \"per_message\" has no counter to derive watermarks from: add [[evidence]] of kind \"position\" (a last-read column or read receipts) or \"timestamp\""));
        }
        ident(
            &raw.watermarks,
            "watermarks",
            "table",
            &watermarks.table,
            true,
        )?;

        let normalised = serde_json::json!({
            "messages": messages, "members": members, "counter": counter,
            "evidence": evidence, "watermarks": watermarks,
        });
        let fingerprint = hex(&Sha256::digest(normalised.to_string().as_bytes()));
        Ok(Mapping {
            messages,
            members,
            counter,
            evidence,
            watermarks,
            fingerprint,
        })
    }

    /// The table holding the counter (for per_message: the messages table).
    pub fn counter_table(&self) -> &str {
        self.counter
            .table
            .as_deref()
            .unwrap_or(&self.messages.table)
    }
}

/// Lower-case hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An identifier tidemark will quote: ASCII letters, digits, `_` and `$`, not starting with a
/// digit, at most 63 bytes (PostgreSQL's NAMEDATALEN - 1); with `qualified`, one optional
/// `schema.` prefix.
pub fn check_identifier(value: &str, qualified: bool) -> Result<(), String> {
    let parts: Vec<&str> = value.split('.').collect();
    if parts.len() > 2 || (parts.len() == 2 && !qualified) {
        return Err(if qualified {
            "at most one dot (schema.table)".into()
        } else {
            "a column name has no dot".into()
        });
    }
    for part in parts {
        if part.is_empty() {
            return Err("empty name".into());
        }
        if part.len() > 63 {
            return Err("longer than 63 bytes".into());
        }
        if part.starts_with(|c: char| c.is_ascii_digit()) {
            return Err("starts with a digit".into());
        }
        if let Some(bad) = part
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '$'))
        {
            return Err(format!(
                "{bad:?} is not allowed in an identifier (letters, digits, _ and $)"
            ));
        }
    }
    Ok(())
}

/// A predicate is one SQL expression: no `;`, no `--` or `/*` comments, balanced parentheses
/// and quotes, not empty.
pub fn check_predicate(value: &str) -> Result<(), String> {
    if value.trim().is_empty() {
        return Err("empty predicate".into());
    }
    let mut depth = 0i32;
    let mut quote: Option<char> = None;
    let chars: Vec<char> = value.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '\'' | '"' | '`' => quote = Some(c),
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth < 0 {
                        return Err("unbalanced ')'".into());
                    }
                }
                ';' => return Err("';' is not allowed: a predicate is one expression".into()),
                '-' if chars.get(i + 1) == Some(&'-') => {
                    return Err("comments are not allowed".into())
                }
                '/' if chars.get(i + 1) == Some(&'*') => {
                    return Err("comments are not allowed".into())
                }
                _ => {}
            },
        }
    }
    if quote.is_some() {
        return Err("unterminated quote".into());
    }
    if depth != 0 {
        return Err("unbalanced '('".into());
    }
    Ok(())
}

/// 1-based line and column of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rfind('\n')
        .map(|nl| before.len() - nl)
        .unwrap_or(before.len() + 1);
    (line, col)
}

/// The span of a key (the start of its line's key) in the table that starts at `within.start`.
fn find_key_span(text: &str, within: Range<usize>, key: &str) -> Option<Range<usize>> {
    let value = find_value_span(text, within.clone(), key)?;
    let line_start = text[..value.start].rfind('\n').map(|i| i + 1).unwrap_or(0);
    let indent = text[line_start..].len() - text[line_start..].trim_start().len();
    Some(line_start + indent..value.end)
}

/// The span of `key = value`'s value in the table that starts at `within.start` (a line-based
/// search up to the next `[header]`: mapping files are flat key/value tables).
fn find_value_span(text: &str, within: Range<usize>, key: &str) -> Option<Range<usize>> {
    let region = text.get(within.start..)?;
    let mut offset = within.start;
    for (n, line) in region.split_inclusive('\n').enumerate() {
        let trimmed = line.trim_start();
        if n > 0 && trimmed.starts_with('[') {
            break;
        }
        if let Some(rest) = trimmed.strip_prefix(key) {
            let rest_trim = rest.trim_start();
            if rest_trim.starts_with('=') {
                let value_start = line.len() - rest_trim.len() + 1;
                let value = &line[value_start..];
                let lead = value.len() - value.trim_start().len();
                let start = offset + value_start + lead;
                return Some(start..offset + line.trim_end().len());
            }
        }
        offset += line.len();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[messages]
table = "messages"
id = "id"
conversation = "conv_id"
sender = "sender_id"
countable = "is_deleted = 0"

[members]
table = "members"
user = "user_id"
conversation = "conv_id"
active = "active = 1"

[counter]
shape = "per_member"
table = "unread_counters"
user = "user_id"
conversation = "conv_id"
column = "unread_count"

[[evidence]]
kind = "position"
table = "read_receipts"
user = "user_id"
conversation = "conv_id"
column = "message_id"

[[evidence]]
kind = "counter"

[watermarks]
table = "read_watermarks"
"#;

    fn err(text: &str) -> String {
        Mapping::parse(text, "t.toml").unwrap_err().to_string()
    }

    #[test]
    fn parses_the_documented_shape() {
        let m = Mapping::parse(GOOD, "t.toml").unwrap();
        assert_eq!(m.counter.shape, Shape::PerMember);
        assert_eq!(m.evidence.len(), 2);
        assert_eq!(m.evidence[1].kind, EvidenceKind::Counter);
        assert_eq!(m.fingerprint.len(), 64);
        assert_eq!(m.counter_table(), "unread_counters");
    }

    #[test]
    fn fingerprint_ignores_formatting_but_not_content() {
        let a = Mapping::parse(GOOD, "a").unwrap();
        let b = Mapping::parse(
            &GOOD.replace("table = \"messages\"", "table   =   \"messages\"  # c"),
            "b",
        )
        .unwrap();
        let c = Mapping::parse(&GOOD.replace("is_deleted = 0", "is_deleted = 1"), "c").unwrap();
        assert_eq!(a.fingerprint, b.fingerprint);
        assert_ne!(a.fingerprint, c.fingerprint);
    }

    #[test]
    fn unknown_key_is_named_with_its_line() {
        let e = err(&GOOD.replace(
            "sender = \"sender_id\"",
            "sender = \"sender_id\"\nsendr = \"x\"",
        ));
        assert!(e.starts_with("t.toml:7:1: [messages]"), "{e}");
        assert!(e.contains("sendr"), "{e}");
    }

    #[test]
    fn bad_identifier_points_at_its_value() {
        let e = err(&GOOD.replace(
            "conversation = \"conv_id\"\nsender",
            "conversation = \"conv id; DROP\"\nsender",
        ));
        assert!(e.starts_with("t.toml:5:16: messages.conversation"), "{e}");
    }

    #[test]
    fn toml_syntax_error_has_line_and_column() {
        let e = err("[messages]\ntable = \n");
        assert!(e.starts_with("t.toml:2:"), "{e}");
    }

    #[test]
    fn predicates_are_single_expressions() {
        assert!(check_predicate("deleted_at IS NULL AND kind <> 'system'").is_ok());
        assert!(check_predicate("kind <> ';'").is_ok());
        assert!(check_predicate("1=1; DROP TABLE x").is_err());
        assert!(check_predicate("a = 1 -- hi").is_err());
        assert!(check_predicate("(a = 1").is_err());
        let e = err(&GOOD.replace("is_deleted = 0", "is_deleted = 0; DELETE FROM messages"));
        assert!(e.contains("messages.countable"), "{e}");
    }

    #[test]
    fn per_message_needs_position_evidence() {
        let text = GOOD
            .replace("shape = \"per_member\"\ntable = \"unread_counters\"\nuser = \"user_id\"\nconversation = \"conv_id\"\n", "shape = \"per_message\"\n")
            .replace("[[evidence]]\nkind = \"counter\"\n", "");
        assert!(Mapping::parse(&text, "t").is_ok());
        let no_position = text.replace("kind = \"position\"", "kind = \"own_message\"")
            .replace("table = \"read_receipts\"\nuser = \"user_id\"\nconversation = \"conv_id\"\ncolumn = \"message_id\"\n", "");
        assert!(
            err(&no_position).contains("no counter to derive"),
            "{}",
            err(&no_position)
        );
    }

    #[test]
    fn identifiers() {
        assert!(check_identifier("public.messages", true).is_ok());
        assert!(check_identifier("a.b.c", true).is_err());
        assert!(check_identifier("public.messages", false).is_err());
        assert!(check_identifier("1abc", false).is_err());
        assert!(check_identifier("na`me", false).is_err());
    }
}
