//! `audit --html` and `status --html` (issue 24): the page shows the numbers of the JSON
//! summary (each class, the |drift| distribution, the conversations with the most drift, the
//! trend of the ledger's audits, the gate), those numbers are the report's (recounted here
//! from the CSV, independently of tidemark), a conversation or user key can inject no markup,
//! and headless Chromium loads the demo's page with no console message and the same numbers.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::common::page::{self, marked, one};
use crate::common::{bin, csv, exec_all, on_every_backend, Backend, TestDb};
use crate::json_output::Fixture;
use crate::scenario;

on_every_backend!(the_page_shows_the_json_numbers, hostile_keys_are_escaped);

/// The JSON object a run printed.
#[track_caller]
fn json(run: &bin::Run) -> Value {
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", run.stdout, run.stderr))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn n(v: &Value) -> String {
    v.as_i64()
        .map(|x| x.to_string())
        .or_else(|| v.as_u64().map(|x| x.to_string()))
        .unwrap_or_else(|| panic!("a number: {v}"))
}

/// Checks that the page's marked numbers equal the audit summary `audit` (as `audit --format
/// json` prints it) and the trend and gate of `status` (`status --format json`).
pub fn check_page(marks: &BTreeMap<String, Vec<String>>, audit: &Value, status: &Value) {
    for key in [
        "rows_checked",
        "drifting_rows",
        "sum_abs_drift",
        "max_abs_drift",
        "members_without_watermark",
        "batches",
    ] {
        assert_eq!(one(marks, key), n(&audit[key]), "{key}");
    }
    let verdict = if !audit["complete"].as_bool().unwrap() {
        "incomplete"
    } else if audit["passed"].as_bool().unwrap() {
        "passed"
    } else {
        "failed"
    };
    assert_eq!(one(marks, "verdict"), verdict);
    let classes = audit["by_class"].as_object().unwrap();
    assert_eq!(classes.len(), 9, "every class listed");
    for (class, rows) in classes {
        assert_eq!(one(marks, &format!("class.{class}")), n(rows), "{class}");
    }
    // The distribution: every bucket of the summary, the empty ones between at 0.
    let buckets = audit["abs_drift_buckets"].as_array().unwrap();
    let shown: Vec<(&String, &str)> = marks
        .iter()
        .filter(|(k, _)| k.starts_with("bucket."))
        .map(|(k, v)| (k, v[0].as_str()))
        .collect();
    let mut in_buckets = 0;
    for (key, rows) in &shown {
        let want = buckets
            .iter()
            .find(|b| format!("bucket.{}-{}", n(&b["from"]), n(&b["to"])) == **key)
            .map_or("0".to_string(), |b| n(&b["rows"]));
        assert_eq!(*rows, want, "{key}");
        in_buckets += rows.parse::<u64>().unwrap();
    }
    assert_eq!(
        shown.len(),
        buckets.last().map_or(0, |b| {
            b["to"].as_u64().unwrap().trailing_zeros() as usize + 1
        }),
        "a bucket per power of two up to the largest: {shown:?}"
    );
    let nulls = audit["by_class"]["null_counter"].as_u64().unwrap();
    assert_eq!(
        in_buckets + nulls,
        audit["drifting_rows"].as_u64().unwrap(),
        "the distribution holds every drifting row but the NULL counters"
    );
    let top = audit["top_conversations"].as_array().unwrap();
    for (i, c) in top.iter().enumerate() {
        let rank = i + 1;
        assert_eq!(
            one(marks, &format!("top.{rank}.conversation")),
            c["conversation"].as_str().unwrap()
        );
        assert_eq!(
            one(marks, &format!("top.{rank}.drifting_rows")),
            n(&c["drifting_rows"])
        );
        assert_eq!(
            one(marks, &format!("top.{rank}.sum_abs_drift")),
            n(&c["sum_abs_drift"])
        );
    }
    assert!(!marks.contains_key(&format!("top.{}.conversation", top.len() + 1)));
    // The trend: the finished audits of the mapping in force, as `status` lists them.
    let trend: Vec<&Value> = status["audits"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["status"] == "done" && a["same_mapping"] == true)
        .collect();
    assert_eq!(
        marks.keys().filter(|k| k.starts_with("trend.")).count(),
        trend.len()
    );
    for a in trend {
        assert_eq!(
            one(marks, &format!("trend.{}", n(&a["id"]))),
            n(&a["drifting_rows"])
        );
    }
    let gate = &status["gate"];
    let open = gate["open"].as_bool().unwrap();
    assert_eq!(one(marks, "gate"), if open { "open" } else { "closed" });
    let reasons: Vec<&str> = gate["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["message"].as_str().unwrap())
        .collect();
    let shown: Vec<&str> = marks
        .get("gate.reason")
        .map(|v| v.iter().map(String::as_str).collect())
        .unwrap_or_default();
    assert_eq!(shown, reasons);
}

/// A |drift| bucket: from, to, rows.
type Bucket = (u64, u64, u64);
/// A conversation's key, drifting rows and sum of |drift|.
type TopConversation = (String, u64, i64);

/// The summary's distribution and most drifting conversations recounted from the CSV report
/// (integer conversation keys: ties go to the smaller key, the batches' order).
fn recount(report: &Path) -> (Vec<Bucket>, Vec<TopConversation>) {
    let file = csv::read(report);
    let col = |name: &str| file.columns.iter().position(|c| c == name).unwrap();
    let (conv, drift) = (col("conversation_id"), col("drift"));
    let mut buckets: BTreeMap<u64, u64> = BTreeMap::new();
    let mut by_conv: BTreeMap<i64, (u64, i64)> = BTreeMap::new();
    for row in &file.rows {
        let abs = if row[drift].is_empty() {
            0
        } else {
            let d: i64 = row[drift].parse().unwrap();
            let abs = d.unsigned_abs();
            // The bucket: the smallest power of two at or above |drift|.
            let mut to = 1u64;
            while to < abs {
                to *= 2;
            }
            *buckets.entry(to).or_default() += 1;
            abs as i64
        };
        let e = by_conv.entry(row[conv].parse().unwrap()).or_default();
        e.0 += 1;
        e.1 += abs;
    }
    let mut top: Vec<(String, u64, i64)> = by_conv
        .into_iter()
        .map(|(c, (rows, sum))| (c.to_string(), rows, sum))
        .collect();
    top.sort_by_key(|t| std::cmp::Reverse((t.1, t.2)));
    top.truncate(10);
    let buckets = buckets
        .into_iter()
        .map(|(to, rows)| (to / 2 + 1, to, rows))
        .collect();
    (buckets, top)
}

async fn the_page_shows_the_json_numbers(backend: Backend) {
    let Some(fx) = Fixture::create(backend, "html_numbers", &[]).await else {
        return;
    };
    let d = fx.dir.path();
    fx.run(&["expand"], &[]).expect_code(0);
    fx.run(&["backfill"], &["-q"]).expect_code(0);
    fx.run(&["audit"], &["-q", "--report", "first.csv"])
        .expect_code(1);
    let run = fx.run(
        &["audit"],
        &["-q", "--format", "json", "--html", "audit.html"],
    );
    run.expect_code(1);
    let audit = json(&run);
    assert!(audit["drifting_rows"].as_u64().unwrap() > 10, "{audit}");

    // The summary's new numbers are the report's, recounted.
    let (buckets, top) = recount(&d.join("tidemark-drift.csv"));
    let got_buckets: Vec<(u64, u64, u64)> = audit["abs_drift_buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["from"].as_u64().unwrap(),
                b["to"].as_u64().unwrap(),
                b["rows"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got_buckets, buckets);
    let got_top: Vec<(String, u64, i64)> = audit["top_conversations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["conversation"].as_str().unwrap().to_string(),
                c["drifting_rows"].as_u64().unwrap(),
                c["sum_abs_drift"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got_top, top);

    let status_run = fx.run(&["status"], &["--format", "json", "--html", "status.html"]);
    status_run.expect_code(0);
    let status = json(&status_run);
    check_page(&marked(&read(&d.join("audit.html"))), &audit, &status);
    // status --html shows the newest audit as the ledger recorded it: the same numbers.
    check_page(&marked(&read(&d.join("status.html"))), &audit, &status);
    let marks = marked(&read(&d.join("audit.html")));
    assert_eq!(marks.keys().filter(|k| k.starts_with("trend.")).count(), 2);

    // A new page is private (it names users), as a new report is.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(d.join("audit.html"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    // A folder that does not exist is named before the audit runs (exit 3), and a
    // directory in the page's place is refused (exit 2).
    let bad = fx.run(&["audit"], &["-q", "--html", "nowhere/page.html"]);
    bad.expect_code(3);
    assert!(bad.stderr.contains("nowhere"), "{}", bad.stderr);
    fx.run(&["status"], &["--html", "."]).expect_code(2);
    fx.db.cleanup().await;
}

const HOSTILE_CONV: &str = "<script>alert(1)</script>";
const HOSTILE_USERS: [&str; 2] = ["\"><img src=x onerror=alert(2)>", "</td><b>bold</b>"];

async fn hostile_keys_are_escaped(backend: Backend) {
    let Some(db) = TestDb::create(backend, "html_hostile").await else {
        return;
    };
    // The scenario schema with text conversation keys.
    let schema: Vec<String> = scenario::schema_sql()
        .iter()
        .map(|s| s.replace("conv_id BIGINT NOT NULL", "conv_id VARCHAR(64) NOT NULL"))
        .collect();
    let conv = scenario::quote_literal(HOSTILE_CONV);
    let mut data = schema;
    data.push(format!(
        "INSERT INTO messages (conv_id, id, sender_id, is_deleted, is_system, created_at, unread_count) VALUES ({conv}, 1, 's', 0, 0, NULL, NULL), ({conv}, 2, 's', 0, 0, NULL, NULL), ({conv}, 3, 's', 0, 0, NULL, NULL)"
    ));
    // Each hostile user has read nothing (receipt 0): one stores 0 (cleared), one 9 (exceeds
    // the history).
    for (user, stored) in HOSTILE_USERS.iter().zip([0, 9]) {
        let u = scenario::quote_literal(user);
        data.push(format!(
            "INSERT INTO members (conv_id, user_id, active, join_position) VALUES ({conv}, {u}, 1, NULL)"
        ));
        data.push(format!(
            "INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES ({conv}, {u}, {stored})"
        ));
        data.push(format!(
            "INSERT INTO read_receipts (conv_id, user_id, message_id) VALUES ({conv}, {u}, 0)"
        ));
    }
    let mut conn = db.connect().await;
    exec_all(&mut conn, &data).await;
    drop(conn);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("tidemark.toml"),
        scenario::mapping_toml("per_member", false),
    )
    .unwrap();
    let run = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--database", &db.url, "--mapping", "tidemark.toml"]);
        bin::run(d, &all)
    };
    run(&["expand"]).expect_code(0);
    run(&["backfill", "-q"]).expect_code(0);
    let audit_run = run(&["audit", "-q", "--format", "json", "--html", "page.html"]);
    audit_run.expect_code(1);
    let audit = json(&audit_run);
    assert_eq!(audit["by_class"]["cleared"], 1, "{audit}");
    assert_eq!(audit["by_class"]["exceeds_history"], 1, "{audit}");
    assert_eq!(audit["top_conversations"][0]["conversation"], HOSTILE_CONV);
    let html = read(&d.join("page.html"));
    let lower = html.to_lowercase();
    for markup in ["<script", "<img", "<b>", "</td><b"] {
        assert!(
            !lower.contains(markup),
            "{markup} reached the page:\n{html}"
        );
    }
    let marks = marked(&html);
    assert_eq!(one(&marks, "top.1.conversation"), HOSTILE_CONV);
    assert!(
        html.contains("&lt;script&gt;alert(1)&lt;"),
        "the key shown as text"
    );
    if let Some(chromium) = page::chromium() {
        let loaded = page::load(&chromium, &d.join("page.html"));
        assert!(loaded.console.is_empty(), "{:?}", loaded.console);
        let dom = loaded.dom.to_lowercase();
        assert!(
            !dom.contains("<script") && !dom.contains("<img") && !dom.contains("<b>"),
            "{dom}"
        );
        assert_eq!(
            one(&marked(&loaded.dom), "top.1.conversation"),
            HOSTILE_CONV
        );
    }
    db.cleanup().await;
}

/// The demo's database audited, its page and `status`'s loaded in headless Chromium: no console
/// message (no script error, nothing the page's policy had to refuse), no script element, and
/// the numbers of the DOM equal the JSON summary's. A screenshot is written; with
/// `TIDEMARK_SCREENSHOT=PATH` it is kept there.
#[test]
fn the_demo_page_in_chromium() {
    let Some(chromium) = page::chromium() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    bin::run(d, &["demo", "--quiet", "--scale", "600", "--seed", "7"]).expect_code(0);
    let db = [
        "--database",
        "sqlite:tidemark-demo.db",
        "--mapping",
        "tidemark-demo.toml",
    ];
    let mut args = vec!["audit", "-q", "--format", "json", "--html", "audit.html"];
    args.extend(db);
    let audit_run = bin::run(d, &args);
    audit_run.expect_code(1);
    let audit = json(&audit_run);
    let mut args = vec!["status", "--format", "json", "--html", "status.html"];
    args.extend(db);
    let status_run = bin::run(d, &args);
    status_run.expect_code(0);
    let status = json(&status_run);
    for name in ["audit.html", "status.html"] {
        let loaded = page::load(&chromium, &d.join(name));
        assert!(loaded.console.is_empty(), "{name}: {:?}", loaded.console);
        assert!(
            loaded.dom.contains("Drift classes"),
            "{name}: {}",
            loaded.dom
        );
        assert!(!loaded.dom.to_lowercase().contains("<script"), "{name}");
        check_page(&marked(&loaded.dom), &audit, &status);
    }
    let png = d.join("audit.png");
    page::screenshot(&chromium, &d.join("audit.html"), &png, 2300);
    if let Some(keep) = std::env::var_os("TIDEMARK_SCREENSHOT") {
        std::fs::copy(&png, keep).unwrap();
    }
}
