//! Tests of `[[counter]]` several times (issue 22): names, the one table, `countable`,
//! `mentions`, the fingerprint of one counter unchanged, the views per counter.

use super::*;

const HEAD: &str = r#"
[messages]
table = "posts"
id = "seq"
conversation = "channel_id"
sender = "user_id"
countable = "this.deleted = 0"

[members]
table = "channel_members"
user = "user_id"
conversation = "channel_id"
"#;

const TAIL: &str = r#"
[[evidence]]
kind = "counter"

[watermarks]
table = "read_watermarks"
"#;

const MSG: &str = r#"
[[counter]]
name = "msg"
shape = "per_member"
table = "channel_members"
user = "user_id"
conversation = "channel_id"
column = "msg_unread"
"#;

const ROOT: &str = r#"
[[counter]]
name = "msg_root"
shape = "per_member"
table = "channel_members"
user = "user_id"
conversation = "channel_id"
column = "root_unread"
countable = "this.root_id = 0"
"#;

const MENTION: &str = r#"
[[counter]]
name = "mention"
shape = "per_member"
table = "channel_members"
user = "user_id"
conversation = "channel_id"
column = "mention_count"
mentions = { table = "mentions", message = "post_seq", user = "user_id" }
"#;

fn parse(counters: &[&str]) -> anyhow::Result<Mapping> {
    Mapping::parse(&format!("{HEAD}{}{TAIL}", counters.concat()), "t.toml")
}

fn err(counters: &[&str]) -> String {
    parse(counters).unwrap_err().to_string()
}

#[test]
fn several_counters_each_with_its_view() {
    let m = parse(&[MSG, ROOT, MENTION]).unwrap();
    assert!(m.several_counters());
    assert_eq!(m.counters.len(), 3);
    assert_eq!(m.counter_name(), "msg");
    let views = m.per_counter();
    assert_eq!(
        views.iter().map(|v| v.counter_name()).collect::<Vec<_>>(),
        ["msg", "msg_root", "mention"]
    );
    assert_eq!(
        views[1].messages.countable.as_deref(),
        Some("(this.deleted = 0) AND (this.root_id = 0)")
    );
    assert_eq!(
        views[1].messages.legacy_countable.as_deref(),
        Some("this.root_id = 0")
    );
    assert_eq!(
        views[0].messages.countable.as_deref(),
        Some("this.deleted = 0")
    );
    assert!(views[2].counter.mentions.is_some());
    // A view's counter keys point at its own entry (line 28: `column` of the second).
    assert!(
        views[1]
            .located("counter.column")
            .starts_with("t.toml:28:10"),
        "{}",
        views[1].located("counter.column")
    );
    assert_eq!(views[1].fingerprint, m.fingerprint);
    assert_eq!(
        m.contract_targets(),
        ContractTargets::Columns(
            ["msg_unread", "root_unread", "mention_count"]
                .iter()
                .map(|c| DropColumn {
                    table: "channel_members".into(),
                    column: c.to_string()
                })
                .collect()
        )
    );
}

#[test]
fn one_counter_as_an_array_keeps_the_table_form() {
    let one = parse(&[MSG]).unwrap();
    let table = Mapping::parse(
        &format!("{HEAD}{}{TAIL}", MSG.replace("[[counter]]", "[counter]")),
        "t.toml",
    )
    .unwrap();
    assert!(!one.several_counters());
    assert_eq!(one.fingerprint, table.fingerprint);
    let unnamed = Mapping::parse(
        &format!(
            "{HEAD}{}{TAIL}",
            MSG.replace("[[counter]]", "[counter]")
                .replace("name = \"msg\"\n", "")
        ),
        "t.toml",
    )
    .unwrap();
    assert_ne!(unnamed.fingerprint, table.fingerprint);
    assert_eq!(unnamed.counter_name(), "");
}

#[test]
fn the_rules_of_several_counters() {
    let e = err(&[MSG, &ROOT.replace("name = \"msg_root\"\n", "")]);
    assert!(e.contains("missing field `name`"), "{e}");
    let e = err(&[MSG, &ROOT.replace("msg_root", "msg")]);
    assert!(e.contains("is given to two counters"), "{e}");
    let e = err(&[
        MSG,
        &ROOT.replace("table = \"channel_members\"", "table = \"other\""),
    ]);
    assert!(
        e.contains("every counter lives on the first counter's table"),
        "{e}"
    );
    let e = err(&[
        MSG,
        &ROOT.replace("this.root_id = 0", "this.root_id = 0; DROP TABLE x"),
    ]);
    assert!(e.contains("counter.countable"), "{e}");
    let e = err(&[MSG, &ROOT.replace("this.root_id = 0", "usr.bot = 0")]);
    assert!(e.contains("counter.countable reads `usr.`"), "{e}");
    let e = err(&[MENTION, MSG]);
    assert!(e.contains("a mention counter here"), "{e}");
    // A mention counter beside messages only some readers count (issue 29 row 16): accepted,
    // a mention counts for a reader only where the message does.
    let text = format!("{HEAD}{MSG}{MENTION}{TAIL}").replacen(
        "countable = \"this.deleted = 0\"\n",
        "countable = \"this.deleted = 0\"\nrecipient = \"this.invitee\"\n",
        1,
    );
    let m = Mapping::parse(&text, "t.toml").expect("mentions beside recipient");
    assert!(m.counters[1].mentions.is_some());
    let e = err(&[MSG, &MENTION.replace("post_seq", "post seq")]);
    assert!(e.contains("counter.mentions.message"), "{e}");
    let e = err(&[
        MSG,
        &ROOT.replace("column = \"root_unread\"", "colum = \"root_unread\""),
    ]);
    assert!(e.starts_with("t.toml:28:1: [[counter]]"), "{e}");
    // A mention counter may stand alone without counter evidence.
    let alone = Mapping::parse(
        &format!(
            "{HEAD}{MENTION}{}",
            TAIL.replace("kind = \"counter\"", "kind = \"own_message\"")
        ),
        "t.toml",
    )
    .unwrap();
    assert!(alone.counter.mentions.is_some());
}
