//! The shared scenarios (`tests/data/scenarios.json`, a byte copy of
//! `shared/spec/scenarios.json`): tiny legacy chat databases with known, injected drift and the
//! watermarks and drift report that tidemark must produce for each.
//!
//! The `scenarios` suite loads every scenario into a fresh database on every backend and checks
//! the backfill and the audit against `expected`; other suites load one scenario as a fixture.
//!
//! Every scenario uses the legacy schema and mapping of `tidemark::legacy_schema` (re-exported
//! here, so `scenario::schema_sql()` and `scenario::mapping_toml(..)` read as before).

use anyhow::{bail, Context, Result};
use serde::Deserialize;

pub use tidemark::legacy_schema::{quote_literal, schema_sql, WATERMARK_TABLE};

/// The scenarios file, embedded: an exact byte copy of `shared/spec/scenarios.json` (the
/// `scenarios` suite checks the copy whenever the shared spec is present).
pub const SCENARIOS_JSON: &str = include_str!("../data/scenarios.json");

/// The most rows one generated `INSERT` statement carries.
pub const ROWS_PER_INSERT: usize = 500;

/// The whole scenarios file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    /// Prose describing the format.
    #[serde(default)]
    #[allow(dead_code, reason = "part of the file's format; no test reads it")]
    pub format: String,
    /// Every scenario, in file order.
    pub scenarios: Vec<Scenario>,
}

/// One scenario: a legacy database and what tidemark must make of it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Unique id, such as `S1a-duplicate-delivery-never-read`.
    pub id: String,
    /// The seed article section the scenario comes from.
    #[serde(default)]
    #[allow(dead_code, reason = "part of the file's format; no test reads it")]
    pub seed: String,
    /// The legacy counter shape: `per_member` or `per_message`.
    pub shape: String,
    /// The messages, single rows or id ranges (see [`Scenario::expanded_messages`]).
    #[serde(default)]
    pub messages: Vec<MessageSpec>,
    /// Membership rows.
    #[serde(default)]
    pub members: Vec<MemberSpec>,
    /// Stored per-member counters (shape `per_member`).
    #[serde(default)]
    pub counters: Vec<CounterSpec>,
    /// Read evidence known before the backfill.
    #[serde(default)]
    pub evidence: EvidenceSpec,
    /// Watermark rows the application wrote before the backfill.
    #[serde(default)]
    pub existing_watermarks: Vec<WatermarkSpec>,
    /// Audit and backfill options.
    #[serde(default)]
    pub options: ScenarioOptions,
    /// What tidemark must produce.
    pub expected: Expected,
}

/// A `messages` entry: one message, or a range of ids sharing a sender.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum MessageSpec {
    /// Ids `id_from..=id_to` of one conversation, all by one sender, all countable.
    Range(MessageRange),
    /// One message.
    Single(Message),
}

/// A range of messages: ids `id_from..=id_to` inclusive, all by `sender`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageRange {
    /// Conversation id.
    pub conv: i64,
    /// First id (inclusive).
    pub id_from: i64,
    /// Last id (inclusive).
    pub id_to: i64,
    /// Sender's user name; `None` (JSON null): an account that no longer exists.
    pub sender: Option<String>,
}

/// One message row.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Message {
    /// Conversation id.
    pub conv: i64,
    /// Message id: the position within the conversation.
    pub id: i64,
    /// Sender's user name; `None` (JSON null) is an account that no longer exists: never the
    /// member's own (scenario S12).
    pub sender: Option<String>,
    /// Deleted (not countable under the scenarios' mapping).
    #[serde(default)]
    pub deleted: bool,
    /// A system message (not countable under the scenarios' mapping).
    #[serde(default)]
    pub system: bool,
    /// The stored per-message unread count (shape `per_message`); `None` is SQL NULL.
    #[serde(default)]
    pub unread: Option<i64>,
}

/// A membership row.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberSpec {
    /// Conversation id.
    pub conv: i64,
    /// User name.
    pub user: String,
    /// Still in the conversation (default `true`).
    #[serde(default = "default_true")]
    pub active: bool,
    /// Positions at or below this are not the member's (joined later); `None` is unknown.
    #[serde(default)]
    pub join_position: Option<i64>,
}

fn default_true() -> bool {
    true
}

/// A stored per-member counter.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CounterSpec {
    /// Conversation id.
    pub conv: i64,
    /// User name.
    pub user: String,
    /// The stored value; `None` is SQL NULL.
    pub unread: Option<i64>,
}

/// Read evidence available before the backfill.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceSpec {
    /// Read positions (receipts): several rows for one member mean the highest counts.
    #[serde(default)]
    pub position: Vec<WatermarkSpec>,
}

/// A (conversation, user, position) triple: a read receipt or an existing watermark.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatermarkSpec {
    /// Conversation id.
    pub conv: i64,
    /// User name.
    pub user: String,
    /// The read position.
    pub last_read_id: i64,
}

/// Scenario options.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioOptions {
    /// Audit with `--cap N`.
    #[serde(default)]
    pub cap: Option<i64>,
    /// Add the `own_message` evidence (lower bound) to the mapping.
    #[serde(default)]
    pub own_message_lower_bound: bool,
}

/// What tidemark must produce.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expected {
    /// Watermarks the backfill must leave (a subset: other rows may exist).
    #[serde(default)]
    pub watermarks: Vec<ExpectedWatermark>,
    /// Exactly the drifting rows of the audit report.
    #[serde(default)]
    pub audit: Vec<ExpectedAuditRow>,
}

/// A watermark the backfill must leave, with its provenance.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedWatermark {
    /// User name.
    pub user: String,
    /// Conversation id.
    pub conv: i64,
    /// The watermark.
    pub last_read_id: i64,
    /// Which evidence wrote it (`position`, `counter`, …).
    pub source: String,
}

/// A drifting row of the audit report: a member row (`user`) for shape `per_member`, a message
/// (`message_id`) for shape `per_message`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedAuditRow {
    /// User name (shape `per_member`).
    #[serde(default)]
    pub user: Option<String>,
    /// Message id (shape `per_message`).
    #[serde(default)]
    pub message_id: Option<i64>,
    /// Conversation id.
    pub conv: i64,
    /// The stored counter; `None` is SQL NULL.
    pub stored: Option<i64>,
    /// The recomputed unread.
    pub recomputed: i64,
    /// stored - recomputed (after clamping under a cap); `None` when stored is NULL.
    pub drift: Option<i64>,
    /// The drift class (semantics.md, "Drift classes").
    pub class: String,
}

impl Scenario {
    /// The messages with every range expanded into single rows, in file order.
    pub fn expanded_messages(&self) -> Vec<Message> {
        let mut out = Vec::new();
        for spec in &self.messages {
            match spec {
                MessageSpec::Single(m) => out.push(m.clone()),
                MessageSpec::Range(r) => out.extend((r.id_from..=r.id_to).map(|id| Message {
                    conv: r.conv,
                    id,
                    sender: r.sender.clone(),
                    deleted: false,
                    system: false,
                    unread: None,
                })),
            }
        }
        out
    }

    /// Whether the scenario has shape `per_message`.
    pub fn is_per_message(&self) -> bool {
        self.shape == SHAPE_PER_MESSAGE
    }

    /// The mapping file for this scenario ([`mapping_toml`] with its shape and options).
    pub fn mapping_toml(&self) -> String {
        mapping_toml(&self.shape, self.options.own_message_lower_bound)
    }

    /// Checks what serde cannot: a known shape, ranges that are not empty, audit rows keyed by
    /// the shape's key, and no duplicate primary keys.
    pub fn validate(&self) -> Result<()> {
        let per_message = match self.shape.as_str() {
            SHAPE_PER_MEMBER => false,
            SHAPE_PER_MESSAGE => true,
            other => bail!("scenario {}: unknown shape {other:?}", self.id),
        };
        for spec in &self.messages {
            if let MessageSpec::Range(r) = spec {
                if r.id_to < r.id_from {
                    bail!(
                        "scenario {}: empty message range {}..{}",
                        self.id,
                        r.id_from,
                        r.id_to
                    );
                }
            }
        }
        let mut keys = std::collections::BTreeSet::new();
        for m in self.expanded_messages() {
            if !keys.insert((m.conv, m.id)) {
                bail!(
                    "scenario {}: message ({}, {}) appears twice",
                    self.id,
                    m.conv,
                    m.id
                );
            }
        }
        let mut members = std::collections::BTreeSet::new();
        for m in &self.members {
            if !members.insert((m.conv, m.user.clone())) {
                bail!(
                    "scenario {}: member ({}, {}) appears twice",
                    self.id,
                    m.conv,
                    m.user
                );
            }
        }
        let mut counters = std::collections::BTreeSet::new();
        for c in &self.counters {
            if !counters.insert((c.conv, c.user.clone())) {
                bail!(
                    "scenario {}: counter ({}, {}) appears twice",
                    self.id,
                    c.conv,
                    c.user
                );
            }
        }
        for row in &self.expected.audit {
            let ok = if per_message {
                row.message_id.is_some() && row.user.is_none()
            } else {
                row.user.is_some() && row.message_id.is_none()
            };
            if !ok {
                bail!(
                    "scenario {}: an expected audit row of shape {} must have {} only: {row:?}",
                    self.id,
                    self.shape,
                    if per_message { "message_id" } else { "user" }
                );
            }
        }
        Ok(())
    }
}

/// Parses [`SCENARIOS_JSON`] and validates every scenario (ids are unique, shapes known).
///
/// Errors: the embedded file does not match the types above, or a scenario fails
/// [`Scenario::validate`].
pub fn load_all() -> Result<Vec<Scenario>> {
    let file: ScenarioFile =
        serde_json::from_str(SCENARIOS_JSON).context("parsing tests/data/scenarios.json")?;
    let mut ids = std::collections::BTreeSet::new();
    for s in &file.scenarios {
        if !ids.insert(s.id.as_str()) {
            bail!("scenario id {:?} appears twice", s.id);
        }
        s.validate()?;
    }
    Ok(file.scenarios)
}

/// Creates the legacy schema ([`schema_sql`]) on `conn` and loads the scenario `id` into it
/// (conversations not shifted); returns the scenario.
///
/// # Panics
///
/// When no scenario has that id, or a statement fails.
pub async fn load_one(conn: &mut sqlx::AnyConnection, id: &str) -> Scenario {
    crate::common::exec_all(conn, &schema_sql()).await;
    let scenario = load_all()
        .unwrap()
        .into_iter()
        .find(|s| s.id == id)
        .unwrap_or_else(|| panic!("no scenario {id}"));
    crate::common::exec_all(conn, &data_sql(&scenario, 0)).await;
    scenario
}

fn opt(value: Option<i64>) -> String {
    value.map_or_else(|| "NULL".to_string(), |v| v.to_string())
}

/// `INSERT INTO <table> (<columns>) VALUES (...), (...)` statements of at most
/// [`ROWS_PER_INSERT`] rows each (none for no rows).
fn inserts(table: &str, columns: &str, rows: Vec<String>) -> Vec<String> {
    rows.chunks(ROWS_PER_INSERT)
        .map(|chunk| {
            format!(
                "INSERT INTO {table} ({columns}) VALUES {}",
                chunk.join(", ")
            )
        })
        .collect()
}

/// The scenario's rows as multi-row `INSERT` statements (at most [`ROWS_PER_INSERT`] rows
/// each) for the tables of [`schema_sql`], with every conversation id shifted by `conv_offset`
/// so that several scenarios can share one database.
///
/// Message ranges are expanded; a message's `unread` goes to `messages.unread_count` (shape
/// `per_message`; otherwise that column stays NULL); `created_at` is left NULL; counters go to
/// `unread_counters` and `evidence.position` rows to `read_receipts`.
pub fn data_sql(scenario: &Scenario, conv_offset: i64) -> Vec<String> {
    let mut out = Vec::new();
    let messages = scenario
        .expanded_messages()
        .iter()
        .map(|m| {
            format!(
                "({}, {}, {}, {}, {}, NULL, {})",
                m.conv + conv_offset,
                m.id,
                m.sender
                    .as_deref()
                    .map_or_else(|| "NULL".to_string(), quote_literal),
                i32::from(m.deleted),
                i32::from(m.system),
                opt(m.unread)
            )
        })
        .collect();
    out.extend(inserts(
        "messages",
        "conv_id, id, sender_id, is_deleted, is_system, created_at, unread_count",
        messages,
    ));
    let members = scenario
        .members
        .iter()
        .map(|m| {
            format!(
                "({}, {}, {}, {})",
                m.conv + conv_offset,
                quote_literal(&m.user),
                i32::from(m.active),
                opt(m.join_position)
            )
        })
        .collect();
    out.extend(inserts(
        "members",
        "conv_id, user_id, active, join_position",
        members,
    ));
    let counters = scenario
        .counters
        .iter()
        .map(|c| {
            format!(
                "({}, {}, {})",
                c.conv + conv_offset,
                quote_literal(&c.user),
                opt(c.unread)
            )
        })
        .collect();
    out.extend(inserts(
        "unread_counters",
        "conv_id, user_id, unread_count",
        counters,
    ));
    let receipts = scenario
        .evidence
        .position
        .iter()
        .map(|r| {
            format!(
                "({}, {}, {})",
                r.conv + conv_offset,
                quote_literal(&r.user),
                r.last_read_id
            )
        })
        .collect();
    out.extend(inserts(
        "read_receipts",
        "conv_id, user_id, message_id",
        receipts,
    ));
    out
}

/// The scenario's `existing_watermarks` as `INSERT` statements into `watermark_table`
/// (columns `user_id, conversation_id, last_read_id, source`, source `'application'`), with
/// conversation ids shifted by `conv_offset`. The table is created by tidemark's expand stage,
/// so run these after it. `watermark_table` is used verbatim: pass a plain or already-quoted
/// name.
pub fn existing_watermarks_sql(
    scenario: &Scenario,
    conv_offset: i64,
    watermark_table: &str,
) -> Vec<String> {
    let rows = scenario
        .existing_watermarks
        .iter()
        .map(|w| {
            format!(
                "({}, {}, {}, 'application')",
                quote_literal(&w.user),
                w.conv + conv_offset,
                w.last_read_id
            )
        })
        .collect();
    inserts(
        watermark_table,
        "user_id, conversation_id, last_read_id, source",
        rows,
    )
}

/// The shape `per_member` as the scenarios (and the mapping file) spell it.
pub const SHAPE_PER_MEMBER: &str = "per_member";
/// The shape `per_message` as the scenarios (and the mapping file) spell it.
pub const SHAPE_PER_MESSAGE: &str = "per_message";

/// The mapping of the scenarios' schema for a shape spelled as the scenarios spell it
/// ([`tidemark::legacy_schema::mapping_toml`]).
///
/// # Panics
///
/// On another shape name (a scenario file that does not validate).
pub fn mapping_toml(shape: &str, own_message_lower_bound: bool) -> String {
    let shape: tidemark::mapping::Shape =
        serde_json::from_value(serde_json::Value::String(shape.to_string()))
            .unwrap_or_else(|e| panic!("shape {shape:?}: {e}"));
    tidemark::legacy_schema::mapping_toml(shape, own_message_lower_bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_all_reads_every_scenario() {
        let all = load_all().unwrap();
        let raw: serde_json::Value = serde_json::from_str(SCENARIOS_JSON).unwrap();
        let count = raw["scenarios"].as_array().unwrap().len();
        assert_eq!(all.len(), count);
        assert!(count >= 17, "{count}");
        assert!(all.iter().any(|s| s.is_per_message()));
    }

    #[test]
    fn ranges_expand_inclusively() {
        let all = load_all().unwrap();
        for id in [
            "S6a-capped-count-hides-drift-above-cap",
            "S6b-uncapped-count-shows-it",
        ] {
            let s = all.iter().find(|s| s.id == id).unwrap();
            let messages = s.expanded_messages();
            assert_eq!(messages.len(), 5000, "{id}");
            assert_eq!(messages.first().unwrap().id, 1);
            assert_eq!(messages.last().unwrap().id, 5000);
            // 5000 messages in 10 statements, then members and counters.
            let sql = data_sql(s, 0);
            let message_inserts = sql
                .iter()
                .filter(|q| q.starts_with("INSERT INTO messages "))
                .count();
            assert_eq!(message_inserts, 10);
            for q in &sql {
                assert!(q.matches("), (").count() < ROWS_PER_INSERT, "{}", &q[..80]);
            }
        }
        let s9 = all
            .iter()
            .find(|s| s.id == "S9-deleted-messages-counted")
            .unwrap();
        let m = s9.expanded_messages();
        assert_eq!(m.len(), 6);
        assert_eq!(m.iter().filter(|m| m.deleted).count(), 2);
    }

    #[test]
    fn data_sql_quotes_and_offsets() {
        let json = r#"{
            "id": "q", "shape": "per_message",
            "messages": [{"conv": 1, "id": 7, "sender": "o'brien", "deleted": true, "unread": 3},
                         {"conv": 1, "id_from": 8, "id_to": 9, "sender": "x"}],
            "members": [{"conv": 1, "user": "o'brien", "active": false, "join_position": 4}],
            "counters": [{"conv": 1, "user": "''", "unread": null}],
            "evidence": {"position": [{"conv": 1, "user": "a'b'c", "last_read_id": 2}]},
            "existing_watermarks": [{"conv": 1, "user": "o'brien", "last_read_id": 5}],
            "expected": {"audit": [{"message_id": 7, "conv": 1, "stored": 3, "recomputed": 0, "drift": 3, "class": "overcount"}]}
        }"#;
        let s: Scenario = serde_json::from_str(json).unwrap();
        s.validate().unwrap();
        let sql = data_sql(&s, 100);
        assert_eq!(
            sql,
            vec![
                "INSERT INTO messages (conv_id, id, sender_id, is_deleted, is_system, created_at, unread_count) \
                 VALUES (101, 7, 'o''brien', 1, 0, NULL, 3), (101, 8, 'x', 0, 0, NULL, NULL), (101, 9, 'x', 0, 0, NULL, NULL)",
                "INSERT INTO members (conv_id, user_id, active, join_position) VALUES (101, 'o''brien', 0, 4)",
                "INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES (101, '''''', NULL)",
                "INSERT INTO read_receipts (conv_id, user_id, message_id) VALUES (101, 'a''b''c', 2)",
            ]
        );
        assert_eq!(
            existing_watermarks_sql(&s, 100, "read_watermarks"),
            vec![
                "INSERT INTO read_watermarks (user_id, conversation_id, last_read_id, source) \
                  VALUES ('o''brien', 101, 5, 'application')"
            ]
        );
        assert_eq!(quote_literal("it's"), "'it''s'");
    }

    #[test]
    fn empty_tables_produce_no_statements() {
        let s: Scenario = serde_json::from_str(
            r#"{"id": "e", "shape": "per_member", "messages": [], "expected": {"audit": []}}"#,
        )
        .unwrap();
        assert!(data_sql(&s, 0).is_empty());
        assert!(existing_watermarks_sql(&s, 0, "w").is_empty());
    }

    #[test]
    fn validate_rejects_bad_scenarios() {
        let bad_shape: Scenario =
            serde_json::from_str(r#"{"id": "b", "shape": "per_day", "expected": {}}"#).unwrap();
        assert!(bad_shape.validate().is_err());
        let wrong_key: Scenario = serde_json::from_str(
            r#"{"id": "b", "shape": "per_member", "expected": {"audit": [{"message_id": 1, "conv": 1, "stored": 1, "recomputed": 0, "drift": 1, "class": "overcount"}]}}"#,
        )
        .unwrap();
        assert!(wrong_key.validate().is_err());
        assert!(serde_json::from_str::<Scenario>(
            r#"{"id": "b", "shape": "per_member", "typo": 1, "expected": {}}"#
        )
        .is_err());
    }

    #[test]
    fn mapping_parses_for_every_scenario() {
        for s in load_all().unwrap() {
            tidemark::mapping::Mapping::parse(&s.mapping_toml(), &s.id)
                .unwrap_or_else(|e| panic!("{}: {e:#}", s.id));
        }
    }
}
