//! `tidemark plan` and `tidemark sql app` for every counter of a mapping with several (issue
//! 32: both showed the first counter only), and the evidence shares in `plan --format json`,
//! on the Mattermost fixture (`tests/fixtures/mattermost/`, its mapping from
//! `contrib/mappings/mattermost/`) on every backend. The expected values are the fixture's
//! `expected.md`, worked out by hand: each member's recomputed unread per counter after the
//! backfill, and what the backfill's evidence holds.

use std::path::Path;

use crate::app_sql::{int, parse, App, V};
use crate::common::bin;
use crate::common::{exec_all, known_mapping, on_every_backend, statements, Backend, TestDb};

on_every_backend!(every_counter);

/// The counters of the Mattermost mapping, in the file's order.
const COUNTERS: [&str; 4] = ["msg", "msg_root", "mention", "mention_root"];

/// expected.md, "Recomputed after the watermark": per member, the unread of each counter
/// (msg, msg_root, mention, mention_root).
const RECOMPUTED: [(&str, [i64; 4]); 4] = [
    ("ann", [2, 1, 1, 0]),
    ("bob", [1, 0, 1, 0]),
    ("cat", [4, 2, 2, 2]),
    ("dan", [2, 1, 1, 1]),
];

/// `tidemark ARGS --database URL --mapping <Mattermost>` in `dir`, which must exit 0; its stdout.
fn tidemark(dir: &Path, url: &str, args: &[&str]) -> String {
    let mapping = known_mapping("mattermost");
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--database", url, "--mapping", mapping.to_str().unwrap()]);
    let run = bin::run(dir, &all);
    run.expect_code(0);
    run.stdout
}

async fn every_counter(backend: Backend) {
    let Some(db) = TestDb::create(backend, "every_counter").await else {
        return;
    };
    let mut conn = db.connect().await;
    let schema = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mattermost/schema.sql");
    exec_all(
        &mut conn,
        &statements(&std::fs::read_to_string(schema).unwrap()),
    )
    .await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();

    // plan, before expand: the audit's statements of every counter; the evidence shares.
    let text = tidemark(dir, &db.url, &["plan"]);
    let audit = text
        .split("== 3. audit")
        .nth(1)
        .and_then(|rest| rest.split("== 4. contract").next())
        .expect("an audit part");
    let whats: Vec<&str> = audit
        .lines()
        .filter_map(|l| l.strip_prefix("  -- counter "))
        .map(|l| l.split(':').next().unwrap())
        .collect();
    // The first counter's four statements (rows checked with what picks the form, the members
    // without a watermark, once per batch, and its drifting rows in the one-pass and in the
    // index-probe form), three for the other unread counter, two for each mention counter (the
    // probe form does not count mentions: one form only).
    let want: Vec<&str> = [
        "msg",
        "msg",
        "msg",
        "msg",
        "msg_root",
        "msg_root",
        "msg_root",
        "mention",
        "mention",
        "mention_root",
        "mention_root",
    ]
    .to_vec();
    assert_eq!(whats, want, "plan's audit part:\n{audit}");
    // A mention counter's statements read the mentions table; the unread counters' do not.
    let drifting = |name: &str| -> &str {
        audit
            .split(&format!("  -- counter {name}: the drifting rows"))
            .nth(1)
            .unwrap_or_else(|| panic!("no drifting-rows statement for {name}:\n{audit}"))
            .split("  -- ")
            .next()
            .unwrap()
    };
    assert!(drifting("mention_root").contains("mentions"));
    assert!(!drifting("msg_root").contains("mentions"));

    let json: serde_json::Value =
        serde_json::from_str(&tidemark(dir, &db.url, &["plan", "--format", "json"])).unwrap();
    let audit = &json["stages"][2];
    assert_eq!(audit["stage"], "audit");
    let whats: Vec<String> = audit["statements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            s["what"]
                .as_str()
                .unwrap()
                .split(':')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    let want: Vec<String> = want.iter().map(|c| format!("counter {c}")).collect();
    assert_eq!(whats, want);
    // expected.md: lastviewedat is set for ann, bob and cat (T+3000, T+5500, T+1000), all at or
    // after the channel's first post (T+1000); msg (7 - msgcount) is 4, 1, 4, 2 for the four
    // members, each between 0 and the channel's 7 posts.
    let shares: Vec<(u64, String, u64, u64)> = json["evidence_shares"]
        .as_array()
        .expect("evidence_shares in plan --format json")
        .iter()
        .map(|s| {
            (
                s["entry"].as_u64().unwrap(),
                s["kind"].as_str().unwrap().to_string(),
                s["measured"].as_u64().unwrap(),
                s["fits"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shares,
        [
            (1, "timestamp".to_string(), 3, 3),
            (2, "counter".to_string(), 4, 4)
        ]
    );
    assert_eq!(json["evidence_shares"][0]["share"].as_f64(), Some(1.0));

    // sql app: each counter's unread count, run as printed after the backfill, gives
    // expected.md's recomputed unread of every member.
    tidemark(dir, &db.url, &["expand"]);
    tidemark(dir, &db.url, &["backfill", "-q"]);
    let app = App {
        statements: parse(&tidemark(dir, &db.url, &["sql", "app"])),
    };
    for (i, counter) in COUNTERS.iter().enumerate() {
        let name = format!("unread_count (counter {counter})");
        for (user, unread) in RECOMPUTED {
            let values = [
                ("conversation", V::Text("town".into())),
                ("user", V::Text(user.into())),
            ];
            let rows = app.run(&mut conn, &name, &values).await;
            let got = int(&rows[0], 0);
            assert_eq!(got, unread[i], "{}: {name} of {user}", backend.name());
        }
    }
    // The JSON names each counter's statements; a mapping-wide one has no `counter`.
    let json: serde_json::Value =
        serde_json::from_str(&tidemark(dir, &db.url, &["sql", "app", "--format", "json"])).unwrap();
    let named: Vec<(String, Option<String>)> = json["statements"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["name"] == "unread_count" || s["name"] == "mark_read")
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_string(),
                s["counter"].as_str().map(str::to_string),
            )
        })
        .collect();
    let mut want = vec![("mark_read".to_string(), None)];
    want.extend(
        COUNTERS
            .iter()
            .map(|c| ("unread_count".to_string(), Some(c.to_string()))),
    );
    assert_eq!(named, want);
    drop(conn);
    db.cleanup().await;
}
