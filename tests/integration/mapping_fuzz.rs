//! Fuzzing the mapping parser (issue 13, "Fuzzing"), with proptest: on arbitrary text and on
//! arbitrary mutations of valid mappings, `Mapping::parse` and `Mapping::check_predicates`
//! never panic, and every error they return names a position (`origin:line:col:`) and, where a
//! key is at fault, the key.
//!
//! Cases: `PROPTEST_CASES` (default 256 here: each case is a parse, no database).

use proptest::prelude::*;
use tidemark::dialect::Dialect;
use tidemark::mapping::Mapping;

use crate::scenario::{mapping_toml, SHAPE_PER_MEMBER, SHAPE_PER_MESSAGE};

/// Pieces of TOML and SQL that make mutations likely to reach past the TOML parser.
const PIECES: &[&str] = &[
    "[",
    "]",
    "[[evidence]]",
    "[messages]",
    "[members]",
    "[counter]",
    "[watermarks]",
    "=",
    "\"",
    "'",
    "\"\"\"",
    "\n",
    " ",
    "#",
    "\\",
    "kind",
    "table",
    "id",
    "column",
    "shape",
    "countable",
    "active",
    "legacy_countable",
    "join_position",
    "per_member",
    "per_message",
    "position",
    "timestamp",
    "counter",
    "own_message",
    "5",
    "-1",
    "true",
    "{ a = 1 }",
    "[1, 2]",
    "(",
    ")",
    ";",
    "--",
    "/*",
    "AND",
    "OR",
    "NOT",
    "IS NULL",
    "é",
    "\u{1F600}",
    "\t",
    "\r\n",
    "\u{0}",
    "a.b.c",
    "x y",
    "`",
    "$1",
    "?",
    "((((((((((((((((((((((((((((((((((((((((((((((((((((((((",
];

/// One edit of a text: at a byte offset (moved back to a char boundary), delete, insert a
/// piece, or replace a run with a piece; or duplicate / drop / swap lines.
#[derive(Debug, Clone)]
enum Edit {
    Delete(usize, usize),
    Insert(usize, usize),
    Replace(usize, usize, usize),
    DupLine(usize),
    DropLine(usize),
    SwapLines(usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 1usize..12).prop_map(|(a, n)| Edit::Delete(a, n)),
        (any::<usize>(), 0..PIECES.len()).prop_map(|(a, p)| Edit::Insert(a, p)),
        (any::<usize>(), 1usize..20, 0..PIECES.len()).prop_map(|(a, n, p)| Edit::Replace(a, n, p)),
        any::<usize>().prop_map(Edit::DupLine),
        any::<usize>().prop_map(Edit::DropLine),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::SwapLines(a, b)),
    ]
}

/// The largest char boundary of `text` at or below `at % (len + 1)`.
fn boundary(text: &str, at: usize) -> usize {
    let mut i = at % (text.len() + 1);
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn apply(text: &str, e: &Edit) -> String {
    let mut lines: Vec<&str> = text.split('\n').collect();
    let n = lines.len();
    match *e {
        Edit::Delete(a, len) => {
            let a = boundary(text, a);
            let b = boundary(text, (a + len).min(text.len()));
            format!("{}{}", &text[..a], &text[b.max(a)..])
        }
        Edit::Insert(a, p) => {
            let a = boundary(text, a);
            format!("{}{}{}", &text[..a], PIECES[p], &text[a..])
        }
        Edit::Replace(a, len, p) => {
            let a = boundary(text, a);
            let b = boundary(text, (a + len).min(text.len())).max(a);
            format!("{}{}{}", &text[..a], PIECES[p], &text[b..])
        }
        Edit::DupLine(i) => {
            let l = lines[i % n];
            lines.insert(i % n, l);
            lines.join("\n")
        }
        Edit::DropLine(i) => {
            lines.remove(i % n);
            lines.join("\n")
        }
        Edit::SwapLines(i, j) => {
            lines.swap(i % n, j % n);
            lines.join("\n")
        }
    }
}

/// Parses `text`, then checks its predicates on every dialect; every error must start with
/// `t.toml:LINE:COL: ` (LINE within the text), and a predicate error must name its key.
fn parse_everything(text: &str) -> Result<(), TestCaseError> {
    let lines = text.split('\n').count();
    let check = |e: &anyhow::Error| -> Result<(), TestCaseError> {
        let msg = e.to_string();
        let rest = msg.strip_prefix("t.toml:");
        let pos: Vec<&str> = rest.unwrap_or_default().splitn(3, ':').collect();
        prop_assert!(
            rest.is_some() && pos.len() == 3 && pos[2].starts_with(' '),
            "error without a position: {msg}"
        );
        let line: usize = pos[0]
            .parse()
            .map_err(|_| TestCaseError::fail(msg.clone()))?;
        let col: usize = pos[1]
            .parse()
            .map_err(|_| TestCaseError::fail(msg.clone()))?;
        prop_assert!(
            line >= 1 && line <= lines && col >= 1,
            "position {line}:{col} outside the text: {msg}"
        );
        Ok(())
    };
    match Mapping::parse(text, "t.toml") {
        Err(e) => check(&e)?,
        Ok(m) => {
            for d in Dialect::ALL {
                if let Err(e) = m.check_predicates(d.sql_parser_dialect(), d.name()) {
                    check(&e)?;
                    let msg = e.to_string();
                    prop_assert!(
                        [
                            "messages.countable",
                            "messages.legacy_countable",
                            "members.active"
                        ]
                        .iter()
                        .any(|k| msg.contains(k)),
                        "a predicate error names no key: {msg}"
                    );
                }
            }
        }
    }
    Ok(())
}

fn config(default: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        parse_everything(&text)?;
    }

    #[test]
    fn arbitrary_toml_like_text_never_panics(
        pieces in prop::collection::vec(0..PIECES.len(), 0..60)
    ) {
        let text: String = pieces.iter().map(|&p| PIECES[p]).collect();
        parse_everything(&text)?;
    }

    #[test]
    fn mutated_valid_mappings_never_panic(
        per_message in any::<bool>(),
        own in any::<bool>(),
        edits in prop::collection::vec(edit(), 1..6),
    ) {
        let shape = if per_message { SHAPE_PER_MESSAGE } else { SHAPE_PER_MEMBER };
        let mut text = mapping_toml(shape, own);
        for e in &edits {
            text = apply(&text, e);
        }
        parse_everything(&text)?;
    }
}

#[test]
fn the_valid_mappings_parse() {
    for shape in [SHAPE_PER_MEMBER, SHAPE_PER_MESSAGE] {
        let m = Mapping::parse(&mapping_toml(shape, true), "t.toml").unwrap();
        for d in Dialect::ALL {
            m.check_predicates(d.sql_parser_dialect(), d.name())
                .unwrap();
        }
    }
}
