//! The page's text: its numbers where the tests read them, nothing loaded from elsewhere, and
//! every value escaped (a conversation key, a user key, a gate reason).

use std::collections::BTreeMap;

use super::{page, Page};
use crate::gate::{Reason, StatementUse, Verdict};
use crate::mapping::Mapping;
use crate::stages::audit::{AuditSummary, ConversationDrift, DriftBucket, Example};
use crate::stages::status::Status;

const HOSTILE_CONV: &str = "<script>alert(1)</script>";
const HOSTILE_USER: &str = "\"><img src=x onerror=alert(2)>";

fn mapping() -> Mapping {
    Mapping::parse(
        &crate::legacy_schema::mapping_toml(crate::mapping::Shape::PerMember, false),
        "tidemark.toml",
    )
    .unwrap()
}

fn summary(conv: &str, user: &str) -> AuditSummary {
    AuditSummary {
        rows_checked: 120,
        drifting_rows: 7,
        sum_abs_drift: 19,
        max_abs_drift: 9,
        by_class: BTreeMap::from([("cleared".to_string(), 5), ("null_counter".to_string(), 2)]),
        examples: BTreeMap::from([(
            "cleared".to_string(),
            vec![Example {
                conversation: conv.to_string(),
                subject: user.to_string(),
                stored: Some(0),
                recomputed: 3,
            }],
        )]),
        abs_drift_buckets: vec![
            DriftBucket {
                from: 1,
                to: 1,
                rows: 1,
            },
            DriftBucket {
                from: 9,
                to: 16,
                rows: 4,
            },
        ],
        top_conversations: vec![ConversationDrift {
            conversation: conv.to_string(),
            drifting_rows: 6,
            sum_abs_drift: 18,
        }],
        complete: true,
        crossed: vec![format!("drifting rows 7 > --max-drift-rows 0 ({conv})")],
        ..Default::default()
    }
}

fn status(reason: &str) -> Status {
    Status {
        migrations: vec!["V1__ledger".into()],
        watermarks: Some(3),
        last_backfill: None,
        backfill_alive: false,
        audits: Vec::new(),
        trend: Vec::new(),
        latest: None,
        changes: None,
        contract_done: None,
        gate: Some(Verdict {
            open: false,
            reasons: vec![Reason::UsageUnknown {
                reason: reason.to_string(),
            }],
            relied_on: Vec::new(),
            newest_clean: None,
            statements: StatementUse::Unavailable {
                reason: reason.to_string(),
            },
            notes: Vec::new(),
        }),
        missing_contract_columns: Vec::new(),
    }
}

fn render(conv: &str, user: &str) -> String {
    let m = mapping();
    let s = summary(conv, user);
    let st = status(conv);
    let mut out = Vec::new();
    page(
        &mut out,
        &Page {
            command: "audit",
            database: "sqlite:x.db".into(),
            mapping: &m,
            audit: Some((Some(4), &s)),
            status: Ok(&st),
            generated_ms: 0,
        },
    )
    .unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn the_numbers_sit_where_the_tests_read_them() {
    let html = render("17", "u1");
    for want in [
        r#"data-v="rows_checked">120<"#,
        r#"data-v="drifting_rows">7<"#,
        r#"data-v="sum_abs_drift">19<"#,
        r#"data-v="max_abs_drift">9<"#,
        r#"data-v="class.cleared">5<"#,
        r#"data-v="class.undercount">0<"#,
        r#"data-v="bucket.1-1">1<"#,
        r#"data-v="bucket.2-2">0<"#,
        r#"data-v="bucket.3-4">0<"#,
        r#"data-v="bucket.9-16">4<"#,
        r#"data-v="null_counters">2<"#,
        r#"data-v="top.1.conversation">17<"#,
        r#"data-v="top.1.drifting_rows">6<"#,
        r#"data-v="gate">closed<"#,
        r#"data-v="verdict">failed<"#,
    ] {
        assert!(html.contains(want), "{want} in\n{html}");
    }
    assert!(!html.contains("bucket.17-32"), "no bucket past the largest");
}

#[test]
fn nothing_is_loaded_from_elsewhere() {
    let html = render("17", "u1");
    let lower = html.to_lowercase();
    for banned in [
        "<script", "src=", "href=", "@import", "url(", "http:", "https:",
    ] {
        assert!(!lower.contains(banned), "{banned} in the page");
    }
    assert!(html.contains("Content-Security-Policy"));
}

#[test]
fn hostile_keys_and_reasons_are_escaped() {
    let html = render(HOSTILE_CONV, HOSTILE_USER);
    let lower = html.to_lowercase();
    assert!(!lower.contains("<script"), "{html}");
    assert!(!lower.contains("<img"), "{html}");
    assert!(html.contains("&lt;script&gt;alert(1)&lt;"), "{html}");
    assert!(
        html.contains("&quot;&gt;&lt;img src=x onerror=alert(2)&gt;"),
        "{html}"
    );
    // The same tags as with harmless keys: no element or attribute came from a value.
    let tags = |h: &str| h.matches('<').count();
    assert_eq!(tags(&html), tags(&render("17", "u1")));
}
