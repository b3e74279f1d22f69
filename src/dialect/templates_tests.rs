//! Tests of the template loader: every template renders for every dialect that has it, over a
//! matrix of mappings (per_member with and without `[members]`, per_message) and variables
//! (with and without a cap, …). The templates are taken from `TEMPLATES`; only the variables
//! the templates read from the caller (beyond [`SqlContext`]) are listed here.

use std::collections::BTreeSet;

use super::*;
use crate::dialect::Dialect;
use crate::mapping::{Mapping, Shape};

/// Templates that exist for some engines only, on purpose: (name, dialect without it, why).
/// A name missing for a dialect and not listed here fails the test.
const ENGINE_ONLY: &[(&str, &str, &str)] = &[(
    "contract_statements.sql",
    "sqlite",
    "SQLite keeps no statement statistics: contract reads none there",
)];

const MESSAGES: &str = r#"
[messages]
table = "chat.messages"
id = "id"
conversation = "conv_id"
sender = "sender_id"
created_at = "created_at"
countable = "deleted_at IS NULL"
legacy_countable = "kind <> 'system'"
"#;

const MEMBERS: &str = r#"
[members]
table = "chat.members"
user = "user_id"
conversation = "conv_id"
active = "left_at IS NULL"
join_position = "joined_after_id"
"#;

const POSITION_TIMESTAMP: &str = r#"
[[evidence]]
kind = "position"
table = "chat.read_receipts"
user = "user_id"
conversation = "conv_id"
column = "message_id"

[[evidence]]
kind = "timestamp"
table = "chat.read_times"
user = "user_id"
conversation = "conv_id"
column = "read_at"
"#;

const WATERMARKS: &str = r#"
[watermarks]
table = "chat.read_watermarks"
"#;

/// Representative mappings: per_member with and without `[members]` (the second with no
/// optional predicate or column at all), and per_message.
fn mappings() -> Vec<(&'static str, Mapping)> {
    let per_member = format!(
        "{MESSAGES}{MEMBERS}
[counter]
shape = \"per_member\"
table = \"chat.unread_counters\"
user = \"user_id\"
conversation = \"conv_id\"
column = \"unread_count\"
{POSITION_TIMESTAMP}
[[evidence]]
kind = \"counter\"

[[evidence]]
kind = \"own_message\"
{WATERMARKS}"
    );
    let bare_per_member = format!(
        "
[messages]
table = \"messages\"
id = \"id\"
conversation = \"conv_id\"
sender = \"sender_id\"

[counter]
shape = \"per_member\"
table = \"unread_counters\"
user = \"user_id\"
conversation = \"conv_id\"
column = \"unread_count\"

[[evidence]]
kind = \"counter\"

[[evidence]]
kind = \"own_message\"
{WATERMARKS}"
    );
    let per_message = format!(
        "{MESSAGES}{MEMBERS}
[counter]
shape = \"per_message\"
column = \"unread_by\"
{POSITION_TIMESTAMP}
[[evidence]]
kind = \"own_message\"
{WATERMARKS}"
    );
    // Issue 12: predicates that read `this`, `conv` and `usr`, a counter given as an
    // expression over two tables, summed over several rows, and a contract of its own.
    let rows_form = format!(
        "
[messages]
table = \"chat.messages\"
id = \"id\"
conversation = \"conv_id\"
sender = \"sender_id\"
created_at = \"created_at\"
countable = \"this.id <= conv.last_id\"

[conversations]
table = \"chat.conversations\"
key = \"conv_id\"

[users]
table = \"chat.users\"
key = \"user_id\"

[members]
table = \"chat.members\"
user = \"user_id\"
conversation = \"conv_id\"
active = \"NOT EXISTS (SELECT 1 FROM chat.history h WHERE h.conv_id = this.conv_id AND h.seq > this.seq) AND usr.deleted = 0\"

[counter]
shape = \"per_member\"
table = \"chat.members\"
user = \"user_id\"
conversation = \"conv_id\"
value = \"conv.total - this.seen + usr.bonus\"
rows = \"this.thread_id IS NULL\"
combine = \"sum\"

[contract]
drop = \"columns\"
columns = [\"chat.conversations.total\", \"chat.members.seen\"]
{POSITION_TIMESTAMP}
[[evidence]]
kind = \"counter\"
{WATERMARKS}"
    );
    // The evidence forms of issue 12: a filter (reading `conv`), a lookup, a timestamp keyed
    // by the user alone, and a join position from a join time.
    let evidence_forms = format!(
        "{MESSAGES}
[conversations]
table = \"chat.conversations\"
key = \"conv_id\"

[members]
table = \"chat.members\"
user = \"user_id\"
conversation = \"conv_id\"
join_time = \"joined_at\"

[counter]
shape = \"per_member\"
table = \"chat.unread_counters\"
user = \"user_id\"
conversation = \"conv_id\"
column = \"unread_count\"

[[evidence]]
kind = \"position\"
table = \"chat.receipts\"
user = \"user_id\"
conversation = \"conv_id\"
column = \"event_id\"
filter = \"this.kind IN ('read', 'read.private') AND conv.archived = 0\"
lookup = {{ table = \"chat.events\", key = \"event_id\", position = \"pos\", conversation = \"conv_id\" }}

[[evidence]]
kind = \"timestamp\"
table = \"chat.users\"
user = \"id\"
column = \"marked_all_read_at\"
filter = \"this.deleted = 0\"

[[evidence]]
kind = \"counter\"
{WATERMARKS}"
    );
    let per_message_join_time = format!(
        "{MESSAGES}
[members]
table = \"chat.members\"
user = \"user_id\"
conversation = \"conv_id\"
join_time = \"joined_at\"

[counter]
shape = \"per_message\"
column = \"unread_by\"
{POSITION_TIMESTAMP}
{WATERMARKS}"
    );
    // A mention counter with its own predicate (issue 22): the audit's mention stream.
    let mention = format!(
        "{MESSAGES}{MEMBERS}
[counter]
name = \"mention_root\"
shape = \"per_member\"
table = \"chat.unread_counters\"
user = \"user_id\"
conversation = \"conv_id\"
column = \"mention_count\"
countable = \"this.root_id = 0\"
mentions = {{ table = \"chat.mentions\", message = \"post_id\", user = \"user_id\", key = \"post_key\" }}

[[evidence]]
kind = \"own_message\"
{WATERMARKS}"
    );
    // Issue 22: read flags per message, as the counter (shape C) and as evidence, with a
    // position evidence beside it under policy "highest".
    let read_flags = format!(
        "{MESSAGES}{MEMBERS}
[counter]
shape = \"read_flags\"
table = \"chat.user_messages\"
user = \"user_id\"
message = \"message_id\"
read = \"(this.flags & 1) <> 0\"
rows = \"this.historical = 0\"

[contract]
drop = \"nothing\"

[[evidence]]
kind = \"position\"
table = \"chat.receipts\"
user = \"user_id\"
conversation = \"conv_id\"
column = \"message_id\"

[[evidence]]
kind = \"read_flags\"
table = \"chat.user_messages\"
user = \"user_id\"
message = \"message_id\"
read = \"(this.flags & 1) <> 0\"
filter = \"this.historical = 0\"

[backfill]
policy = \"highest\"
{WATERMARKS}"
    );
    [
        ("per_member, mention counter", mention),
        ("read_flags", read_flags),
        ("per_member, evidence forms", evidence_forms),
        ("per_message, join_time", per_message_join_time),
        ("issue 12 rows and expressions", rows_form),
        ("per_member with [members]", per_member),
        ("per_member without [members]", bare_per_member),
        ("per_message", per_message),
    ]
    .into_iter()
    .map(|(what, text)| {
        let mapping = Mapping::parse(&text, "test.toml")
            .unwrap_or_else(|e| panic!("test mapping {what}: {e:#}"));
        (what, mapping)
    })
    .collect()
}

/// A range filter with every part present (`full`) or none; with `keyed`, a batch of three
/// keys (or of none) instead (issue 25).
fn range(dialect: Dialect, first: usize, full: bool, keyed: bool) -> RangeParams {
    if keyed {
        return RangeParams {
            keys: Some(if full {
                (first..first + 3).map(|n| dialect.placeholder(n)).collect()
            } else {
                Vec::new()
            }),
            ..Default::default()
        };
    }
    if !full {
        return RangeParams::default();
    }
    RangeParams {
        lo: Some(dialect.placeholder(first)),
        hi: Some(dialect.placeholder(first + 1)),
        from: Some(dialect.placeholder(first + 2)),
        to: Some(dialect.placeholder(first + 3)),
        sample: Some("((ABS({col}) % 1000003) * 7919) % 10000 < 500".into()),
        quiet: Some("NOT EXISTS (SELECT 1 FROM t WHERE t.c = {col})".into()),
        keys: None,
    }
}

/// The variables the stages pass besides the mapping's (see their `render` calls), in
/// every variant a template branches on. A template that reads a new variable fails here
/// until a representative value is added.
fn extras(dialect: Dialect, keyed: bool) -> Vec<(String, minijinja::Value)> {
    let mut out = Vec::new();
    for cap in [None, Some(99)] {
        for (full, count_only) in [(false, false), (true, false), (true, true)] {
            for unit in ["subjects", "counters", "messages"] {
                for side in ["source", "archive"] {
                    let what = format!(
                        "cap {cap:?}, {} range, count_only {count_only}, unit {unit}, side {side}",
                        if full { "full" } else { "empty" }
                    );
                    let value = minijinja::context! {
                        cap => cap,
                        range => range(dialect, 1, full, keyed),
                        range2 => range(dialect, 5, full, keyed),
                        range3 => range(dialect, 9, full, keyed),
                        range_wm => range(dialect, 13, full, keyed),
                        range_mem => range(dialect, 17, full, keyed),
                        range_fl => range(dialect, 21, full, keyed),
                        range_fm => range(dialect, 25, full, keyed),
                        count_only => count_only,
                        unit => unit,
                        limit => 1000,
                        rows => 2,
                        p => (1..=6).map(|n| dialect.placeholder(n)).collect::<Vec<_>>(),
                        param => dialect.placeholder(1),
                        side => side,
                        // The backfill: the evidence policy, the plan's source.
                        policy => if side == "source" { "first" } else { "highest" },
                        source => "tm_plan",
                        // The watermark write: the backfill's, or the application's.
                        from_plan => side == "source",
                        subject_col => "user_id",
                        key_conv => dialect.quote("conv_id"),
                        key_subject => (side == "source").then(|| dialect.quote("user_id")),
                        archive_of => (side == "archive").then_some(["'chat.members'", "'seen'"]),
                        exact_type => dialect.exact_decimal(),
                        text_type => dialect.text_type(),
                        // The preflight's zero-row queries (crate::schema::sections).
                        select => "this.id",
                        t => dialect.quote("chat.messages"),
                        j => crate::dialect::Joins::default(),
                        conv_col => dialect.quote("conv_id"),
                        user_col => dialect.quote("user_id"),
                        conds => [Some("this.deleted = 0"), None],
                        // The preflight's check of the counter's values.
                        grouped => side == "archive",
                        sub_col => if side == "source" { dialect.quote("user_id") } else { String::new() },
                        value => "this.unread_count",
                        keep => (side == "source").then_some("this.thread_id IS NULL"),
                        not_int64 => dialect.not_int64(),
                        wide_sum => dialect.wide_sum(),
                        // `tidemark sql app` (crate::app_sql): named binds, the sequence table.
                        bind => minijinja::context! {
                            conv => dialect.placeholder(1),
                            user => dialect.placeholder(2),
                            message => dialect.placeholder(3),
                            conversations => vec![dialect.placeholder(1), dialect.placeholder(3)],
                            messages => vec![dialect.placeholder(2), dialect.placeholder(3)],
                        },
                        seq_table => dialect.quote("chat.read_watermarks_seq"),
                        seq_index => dialect.quote("read_watermarks_seq_conv"),
                        seq_msg_index => dialect.quote("messages_conv_seq"),
                        // The evidence measured on the data (evidence_share.sql: the counter's
                        // branch; the entries' in the backfill tests) and inspect's measures.
                        e => None::<()>,
                        sample => 100,
                        conversations => 10,
                        mode => match (unit, side) {
                            ("subjects", _) => "position",
                            ("counters", _) => "range",
                            (_, "source") => "time",
                            _ => "order",
                        },
                        mt => dialect.quote("posts"),
                        mc => dialect.quote("topic_id"),
                        mp => dialect.quote("post_number"),
                        mt_created => dialect.quote("created_at"),
                        et => dialect.quote("topic_users"),
                        ec => dialect.quote("topic_id"),
                        ev => dialect.quote("last_read_post_number"),
                    };
                    out.push((what, value));
                }
            }
        }
    }
    out
}

/// The names a dialect renders: every common template, and its own folder's.
fn names_for(dialect: Dialect) -> BTreeSet<&'static str> {
    TEMPLATES
        .iter()
        .filter_map(|(name, _)| match name.split_once('/') {
            None => Some(*name),
            Some((folder, rest)) => (folder == dialect.name()).then_some(rest),
        })
        .collect()
}

/// The source `render` picks for `name` on `dialect`.
fn source_of(dialect: Dialect, name: &str) -> &'static str {
    let own = format!("{}/{name}", dialect.name());
    TEMPLATES
        .iter()
        .find(|(n, _)| *n == own)
        .or_else(|| TEMPLATES.iter().find(|(n, _)| *n == name))
        .map(|(_, source)| *source)
        .expect("a name from TEMPLATES")
}

/// Whether a template calls minijinja's `range()` function (`range(rows)`), which the
/// stages' `range` variable (a batch's [`RangeParams`]) would hide: the stages never pass
/// that variable to such a template, and neither does this test.
fn calls_builtin_range(source: &str) -> bool {
    source.match_indices("range(").any(|(i, _)| {
        !source[..i]
            .chars()
            .next_back()
            .is_some_and(|c| c == '.' || c == '_' || c.is_alphanumeric())
    })
}

/// `vars` without the variable `key`.
fn without(vars: &minijinja::Value, key: &str) -> minijinja::Value {
    let kept: std::collections::BTreeMap<String, minijinja::Value> = vars
        .try_iter()
        .expect("a map")
        .filter_map(|k| {
            let name = k.as_str()?.to_string();
            (name != key).then(|| (name, vars.get_item(&k).expect("a value")))
        })
        .collect();
    minijinja::Value::from_serialize(&kept)
}

/// Whether template `name` is for mappings of `shape`: one named `…_per_member.sql` or
/// `…_per_message.sql` is for that shape only (the stages pick it by the shape), every
/// other for both.
fn for_shape(name: &str, shape: Shape) -> bool {
    let stem = name.trim_end_matches(".sql");
    match shape {
        Shape::PerMember | Shape::ReadFlags => !stem.ends_with("_per_message"),
        Shape::PerMessage => !stem.ends_with("_per_member"),
    }
}

#[test]
fn every_template_renders_for_every_dialect() {
    let mappings = mappings();
    let mut failures = Vec::new();
    for (dialect, keyed) in Dialect::ALL.iter().flat_map(|d| [(*d, false), (*d, true)]) {
        let extras = extras(dialect, keyed);
        for name in names_for(dialect) {
            for (what, mapping) in &mappings {
                if !for_shape(name, mapping.counter.shape) {
                    continue;
                }
                let ctx = context(mapping, dialect, keyed);
                let builtin_range = calls_builtin_range(source_of(dialect, name));
                for (vars, extra) in &extras {
                    let extra = if builtin_range {
                        without(extra, "range")
                    } else {
                        extra.clone()
                    };
                    match render(name, &ctx, extra) {
                        Ok(sql) if sql.contains("{{") || sql.contains("{%") => {
                            failures.push(format!(
                                "{}/{name} ({what}; {vars}; keyed {keyed}): template syntax left in {sql}",
                                dialect.name()
                            ))
                        }
                        Ok(_) => {}
                        Err(e) => failures.push(format!(
                            "{}/{name} ({what}; {vars}; keyed {keyed}): {e:#}",
                            dialect.name()
                        )),
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} renderings failed, the first:\n{}",
        failures.len(),
        failures
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A case-insensitive collation of each engine (not exact: compared in the byte-wise one).
fn case_insensitive(dialect: Dialect) -> crate::dialect::Collation {
    let (name, sql_name) = match dialect {
        Dialect::Postgres => ("und-ci", "\"public\".\"und-ci\""),
        Dialect::Mysql => ("utf8mb4_general_ci", "utf8mb4_general_ci"),
        Dialect::Sqlite => ("NOCASE", "NOCASE"),
    };
    crate::dialect::Collation {
        name: name.into(),
        detail: String::new(),
        exact: false,
        charset: if dialect == Dialect::Mysql {
            "utf8mb4".into()
        } else {
            String::new()
        },
        sql_name: sql_name.into(),
    }
}

/// The context of `mapping` on `dialect`; with `keyed`, as for a database whose key columns'
/// collations differ (every key column in a case-insensitive collation but the messages').
fn context(mapping: &Mapping, dialect: Dialect, keyed: bool) -> SqlContext {
    let ctx = SqlContext::new(mapping, dialect);
    if !keyed {
        return ctx;
    }
    let exact = crate::dialect::Collation {
        exact: true,
        ..case_insensitive(dialect)
    };
    let messages = mapping.messages.table.clone();
    ctx.with_key_compare(mapping, true, |table, _| {
        if table == messages {
            dialect.key_compare(&exact)
        } else {
            dialect.key_compare(&case_insensitive(dialect))
        }
    })
}

/// Issue 25: with the key columns' collations alike nothing changes; when they differ every
/// table is read by equality with the batch's keys (collated where the engine keeps the index
/// so), and keys are passed on in the byte-wise collation.
#[test]
fn keyed_statements_compare_keys_bytewise() {
    let (_, mapping) = mappings()
        .into_iter()
        .find(|(what, _)| *what == "per_member with [members]")
        .unwrap();
    let vars = |dialect: Dialect, keyed: bool| {
        minijinja::context! {
            cap => None::<i64>, count_only => false,
            range => range(dialect, 1, true, keyed), range2 => range(dialect, 4, true, keyed),
            range3 => range(dialect, 7, true, keyed), range_wm => range(dialect, 10, true, keyed),
            range_mem => range(dialect, 13, true, keyed),
        }
    };
    for dialect in Dialect::ALL {
        let plain = render(
            "audit_per_member.sql",
            &context(&mapping, dialect, false),
            vars(dialect, false),
        )
        .unwrap();
        assert!(!plain.contains("COLLATE"), "{plain}");
        // No key list (`IN (` a bind); the provenance's `IN ('position', …)` is no key list.
        let key_list = ["IN ($", "IN (?", "IN (CONVERT("]
            .iter()
            .any(|k| plain.contains(k));
        assert!(!key_list, "{plain}");
    }
    let pg = render(
        "audit_per_member.sql",
        &context(&mapping, Dialect::Postgres, true),
        vars(Dialect::Postgres, true),
    )
    .unwrap();
    // The messages (exact) looked up by their own collation, keeping their index; the
    // case-insensitive members compared in "C" on their side.
    assert!(
        pg.contains("this.\"conv_id\" IN ($4 COLLATE \"public\".\"und-ci\", $5 COLLATE"),
        "{pg}"
    );
    assert!(
        pg.contains("this.\"conv_id\" COLLATE \"C\" IN ($13, $14, $15)"),
        "{pg}"
    );
    assert!(
        pg.contains("SELECT this.\"conv_id\" COLLATE \"C\" AS conv"),
        "{pg}"
    );
    assert!(!pg.contains(" > $"), "no range: {pg}");
    let my = render(
        "audit_per_member.sql",
        &context(&mapping, Dialect::Mysql, true),
        vars(Dialect::Mysql, true),
    )
    .unwrap();
    assert!(
        my.contains("this.`conv_id` IN (CONVERT(? USING utf8mb4) COLLATE utf8mb4_bin, "),
        "{my}"
    );
    assert!(
        my.contains("this.`conv_id` COLLATE utf8mb4_bin AS conv"),
        "{my}"
    );
}

#[test]
fn every_template_exists_for_every_dialect() {
    let folders: BTreeSet<&str> = TEMPLATES
        .iter()
        .filter_map(|(name, _)| name.split_once('/').map(|(folder, _)| folder))
        .collect();
    for folder in &folders {
        let parts_of = format!("{folder}.sql");
        assert!(
            Dialect::ALL.iter().any(|d| d.name() == *folder)
                || TEMPLATES.iter().any(|(n, _)| *n == parts_of),
            "sql/{folder}/ is no dialect's folder, nor the parts of a template sql/common/{folder}.sql"
        );
    }
    let every: BTreeSet<&str> = Dialect::ALL.iter().flat_map(|d| names_for(*d)).collect();
    for dialect in Dialect::ALL {
        let own = names_for(dialect);
        for name in every.difference(&own) {
            assert!(
                ENGINE_ONLY
                    .iter()
                    .any(|(n, d, _)| n == name && *d == dialect.name()),
                "sql/{name} has no version {} can render: add sql/{}/{name} (or sql/common/{name}), \
                 or list it in ENGINE_ONLY with the reason",
                dialect.name(),
                dialect.name()
            );
        }
    }
}

#[test]
fn migrations_have_the_same_versions_on_every_dialect() {
    let names = |d: Dialect| d.migrations().iter().map(|(n, _)| *n).collect::<Vec<_>>();
    for dialect in Dialect::ALL {
        assert_eq!(
            names(dialect),
            names(Dialect::Postgres),
            "{}",
            dialect.name()
        );
    }
}

/// Issue 30: the flags the templates test instead of spellings say what the mapping says:
/// each entry's `is` holds exactly its kind, `ranked` and `holds` follow semantics.md
/// "Backfill" (a counter and an own message are never compared by value; a position is never
/// held), `kinds` is the union of the entries', `shape_is` the shape and `highest` the policy.
#[test]
fn context_flags_match_the_mapping() {
    use crate::mapping::{EvidenceKind, EvidencePolicy};
    let mut policies = BTreeSet::new();
    for (what, mapping) in mappings() {
        let ctx = SqlContext::new(&mapping, Dialect::Postgres);
        policies.insert(ctx.highest);
        assert_eq!(
            ctx.highest,
            mapping.policy == EvidencePolicy::Highest,
            "{what}"
        );
        let s = ctx.shape_is;
        assert_eq!(
            [s.per_member, s.per_message, s.read_flags],
            [
                mapping.counter.shape == Shape::PerMember,
                mapping.counter.shape == Shape::PerMessage,
                mapping.counter.shape == Shape::ReadFlags,
            ],
            "{what}"
        );
        let mut listed = BTreeSet::new();
        for (e, m) in ctx.evidence.iter().zip(&mapping.evidence) {
            let kind = m.kind();
            listed.insert(kind.as_str());
            let is = [
                (e.is.position, EvidenceKind::Position),
                (e.is.timestamp, EvidenceKind::Timestamp),
                (e.is.counter, EvidenceKind::Counter),
                (e.is.own_message, EvidenceKind::OwnMessage),
                (e.is.read_flags, EvidenceKind::ReadFlags),
            ];
            let set: Vec<&str> = is
                .iter()
                .filter(|(f, _)| *f)
                .map(|(_, k)| k.as_str())
                .collect();
            assert_eq!(set, vec![kind.as_str()], "{what}");
            assert_eq!(e.kind, kind.as_str(), "{what}");
            let ranked = !matches!(kind, EvidenceKind::Counter | EvidenceKind::OwnMessage);
            assert_eq!(e.ranked, ranked, "{what}: {}", e.kind);
            assert_eq!(
                e.holds,
                kind != EvidenceKind::Position,
                "{what}: {}",
                e.kind
            );
        }
        let k = ctx.kinds;
        let union: BTreeSet<&str> = [
            (k.position, "position"),
            (k.timestamp, "timestamp"),
            (k.counter, "counter"),
            (k.own_message, "own_message"),
            (k.read_flags, "read_flags"),
        ]
        .into_iter()
        .filter(|(f, _)| *f)
        .map(|(_, n)| n)
        .collect();
        assert_eq!(union, listed, "{what}");
    }
    assert_eq!(policies.len(), 2, "the mappings cover both policies");
}
