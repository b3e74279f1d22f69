//! The Grafana dashboard in the repository (`contrib/grafana/tidemark.json`, issue 24) reads
//! only metrics tidemark writes: every metric its queries name (panels and variables) is one
//! that `audit --metrics-file` wrote on a real database, and every metric written has a
//! panel.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::common::{on_every_backend, Backend};
use crate::json_output::Fixture;

on_every_backend!(the_dashboard_reads_only_metrics_tidemark_writes);

/// PromQL's functions and aggregations a dashboard query may call.
const FUNCTIONS: &[&str] = &[
    "abs",
    "avg",
    "avg_over_time",
    "ceil",
    "changes",
    "clamp_min",
    "count",
    "delta",
    "floor",
    "increase",
    "label_values",
    "last_over_time",
    "max",
    "max_over_time",
    "min",
    "min_over_time",
    "rate",
    "resets",
    "round",
    "sort",
    "sort_desc",
    "sum",
    "time",
    "topk",
    "vector",
];

/// PromQL's keywords (not metric names).
const KEYWORDS: &[&str] = &[
    "and",
    "bool",
    "by",
    "group_left",
    "group_right",
    "ignoring",
    "offset",
    "on",
    "or",
    "unless",
    "without",
];

/// Every query of the dashboard: the panels' target expressions and the variables' queries.
fn queries(dashboard: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        let targets = panel["targets"].as_array().expect("each panel has targets");
        assert!(!targets.is_empty(), "{}", panel["title"]);
        for t in targets {
            out.push(t["expr"].as_str().expect("a PromQL expr").to_string());
        }
    }
    for var in dashboard["templating"]["list"].as_array().unwrap() {
        if var["type"] == "query" {
            out.push(var["query"]["query"].as_str().unwrap().to_string());
            out.push(var["definition"].as_str().unwrap().to_string());
        }
    }
    out
}

/// The metric names a PromQL expression reads: its identifiers less label matchers (`{…}`),
/// ranges (`[…]`), strings, grouping label lists (`by (…)`), function names and keywords; a
/// `label_values(metric, label)` names its first argument only.
fn metrics_of(expr: &str) -> BTreeSet<String> {
    let mut text = String::new();
    let mut depth_brace = 0;
    let mut depth_bracket = 0;
    let mut in_string = false;
    for c in expr.chars() {
        match c {
            '"' if depth_brace == 0 => in_string = !in_string,
            _ if in_string => {}
            '{' => depth_brace += 1,
            '}' => depth_brace -= 1,
            '[' => depth_bracket += 1,
            ']' => depth_bracket -= 1,
            _ if depth_brace > 0 || depth_bracket > 0 => {}
            c => text.push(c),
        }
    }
    let text = match text.split_once("label_values(") {
        Some((head, tail)) => format!("{head}({}", tail.split(',').next().unwrap()),
        None => text,
    };
    let chars: Vec<char> = text.chars().collect();
    let mut out = BTreeSet::new();
    let mut i = 0;
    let mut skip_group = false;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = chars[i..].iter().find(|c| !c.is_whitespace());
            if skip_group {
                continue;
            }
            if KEYWORDS.contains(&word.as_str()) {
                // `by (label, …)`: the list names labels.
                skip_group = matches!(word.as_str(), "by" | "without" | "on" | "ignoring");
                continue;
            }
            let rest: String = chars[i..].iter().collect();
            let modifier = ["by", "without"]
                .iter()
                .any(|m| rest.trim_start().starts_with(m));
            if next == Some(&'(') || (modifier && FUNCTIONS.contains(&word.as_str())) {
                // A call, or an aggregation with its grouping first (`max by (l) (…)`).
                assert!(
                    FUNCTIONS.contains(&word.as_str()),
                    "unknown function {word} in {expr}"
                );
                continue;
            }
            out.insert(word);
        } else if c.is_ascii_digit() {
            // A number (or a duration's digits).
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else {
            if c == ')' {
                skip_group = false;
            }
            i += 1;
        }
    }
    out
}

#[test]
fn the_parser_finds_metrics_and_nothing_else() {
    let got = metrics_of(
        r#"sort_desc(max by (mapping) (tidemark_a{mapping=~"$mapping", class="x"} > 0)) / on(mapping) tidemark_b[5m] + time() - 1e3"#,
    );
    assert_eq!(
        got,
        BTreeSet::from(["tidemark_a".to_string(), "tidemark_b".to_string()])
    );
    assert_eq!(
        metrics_of("label_values(tidemark_c, mapping)"),
        BTreeSet::from(["tidemark_c".to_string()])
    );
}

async fn the_dashboard_reads_only_metrics_tidemark_writes(backend: Backend) {
    let Some(fx) = Fixture::create(backend, "grafana", &[]).await else {
        return;
    };
    fx.run(&["expand"], &[]).expect_code(0);
    fx.run(&["backfill"], &["-q"]).expect_code(0);
    fx.run(&["audit"], &["-q", "--metrics-file", "tidemark.prom"])
        .expect_code(1);
    let prom = std::fs::read_to_string(fx.dir.path().join("tidemark.prom")).unwrap();
    let written: BTreeSet<String> = prom
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect();
    assert!(
        written.contains("tidemark_audit_backfill_finished") && written.len() >= 11,
        "{written:?}"
    );

    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/contrib/grafana/tidemark.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut named = BTreeSet::new();
    for q in queries(&dashboard) {
        let metrics = metrics_of(&q);
        assert!(!metrics.is_empty(), "a query that names no metric: {q}");
        for m in &metrics {
            assert!(
                written.contains(m),
                "the dashboard's query {q:?} names {m}, which tidemark does not write (it writes {written:?})"
            );
        }
        named.extend(metrics);
    }
    let unused: Vec<&String> = written.difference(&named).collect();
    assert!(unused.is_empty(), "metrics no panel shows: {unused:?}");
    fx.db.cleanup().await;
}
