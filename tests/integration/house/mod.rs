//! The shape of the source tree, checked (issue 20): no import circle between files, no engine
//! branch outside the engine folder, no file above 700 lines, no function above 150 in `src/`
//! and in `tests/` (`lengths`), no statement template (`sql/`) above 200 lines or with a line
//! over 120 characters (`templates`), and the book's "Where things are" (`docs/src/house.md`)
//! naming only files that exist.
//!
//! The import graph is read from the text of `src/**/*.rs` (comments, strings and `#[cfg(test)]`
//! modules left out; test files are not part of it): every `crate::…`, `super::…` and
//! `self::…` path, and every path that starts with a child module's name, is an arrow from
//! its file to the file of the longest module prefix it names (`crate::stages::contract::X`
//! is an arrow to `src/stages/contract/mod.rs`, `crate::db::tx::begin_write` to
//! `src/db/tx.rs`). A `mod x;` declaration is not an arrow. A circle is a strongly connected
//! set of two files or more: `cargo test --test integration house::` prints each with the
//! arrows that tie it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

mod book;
mod lengths;
mod templates;

/// One source file of the library or the binary.
struct Source {
    /// Its path from the repository's root (`src/db/tx.rs`).
    path: String,
    /// Its module path (`["db", "tx"]`; empty for `lib.rs`).
    module: Vec<String>,
    /// The code with comments, strings and test modules blanked out.
    code: String,
    /// The text as written.
    text: String,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Whether a file is a test file (not part of the house): `tests.rs`, `*_tests.rs`.
fn is_test_file(path: &Path) -> bool {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    name == "tests.rs" || name.ends_with("_tests.rs")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The library's and the binary's files (test files left out).
fn sources() -> Vec<Source> {
    let root = root();
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    files
        .into_iter()
        .filter(|p| !is_test_file(p))
        .map(|p| {
            let rel = p.strip_prefix(&root).expect("under root");
            let path = rel.to_string_lossy().replace('\\', "/");
            let text = std::fs::read_to_string(&p).expect("read source");
            let inner = path.trim_start_matches("src/").trim_end_matches(".rs");
            let mut module: Vec<String> = inner.split('/').map(str::to_string).collect();
            if module
                .last()
                .is_some_and(|m| m == "mod" || m == "lib" || m == "main")
            {
                module.pop();
            }
            let code = strip_test_modules(&blank_comments_and_strings(&text));
            Source {
                path,
                module,
                code,
                text,
            }
        })
        .collect()
}

/// The text with comments and string/char literals replaced by spaces (newlines kept, so that
/// line numbers stay).
fn blank_comments_and_strings(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_char_before(&b, i)
        {
            // A raw string r"…" or r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            for &ch in &b[i..j.min(b.len())] {
                out.push(blank(ch));
            }
            i = j;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < b.len() {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\'') or a lifetime ('a).
            let lit_len = if next == Some('\\') {
                b[i + 2..].iter().position(|&ch| ch == '\'').map(|p| p + 3)
            } else if b.get(i + 2) == Some(&'\'') {
                Some(3)
            } else {
                None
            };
            match lit_len {
                Some(n) => {
                    for _ in 0..n {
                        out.push(' ');
                    }
                    i += n;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_char_before(b: &[char], i: usize) -> bool {
    i > 0 && (b[i - 1].is_alphanumeric() || b[i - 1] == '_')
}

/// The code without `#[cfg(test)]` items (a test module, a test-only function).
fn strip_test_modules(code: &str) -> String {
    let mut out = code.to_string();
    while let Some(at) = out.find("#[cfg(test)]") {
        let rest = &out[at..];
        // The item ends at its matching closing brace, or at a `;` before any brace
        // (`#[cfg(test)] mod tests;`).
        let open = rest.find('{');
        let semi = rest.find(';');
        let end = match (open, semi) {
            (Some(o), Some(s)) if s < o => at + s + 1,
            (Some(o), _) => {
                let mut depth = 0;
                let mut end = out.len();
                for (k, ch) in rest[o..].char_indices() {
                    match ch {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = at + o + k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (None, Some(s)) => at + s + 1,
            (None, None) => out.len(),
        };
        let blanked: String = out[at..end]
            .chars()
            .map(|c| if c == '\n' { '\n' } else { ' ' })
            .collect();
        out.replace_range(at..end, &blanked);
    }
    out
}

/// The paths a file's code names: each a list of segments, `crate`/`super`/`self` first where
/// written. `use` groups (`use a::{b, c::{d}}`) are expanded.
fn paths(code: &str) -> Vec<Vec<String>> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if (c.is_alphabetic() || c == '_') && !ident_char_before(&chars, i) {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            if word == "use" {
                // A use declaration, up to its `;`.
                let end = chars[i..]
                    .iter()
                    .position(|&ch| ch == ';')
                    .map_or(chars.len(), |p| i + p);
                let tree: String = chars[i..end].iter().collect();
                expand_use(&tree, &mut Vec::new(), &mut out);
                i = end;
                continue;
            }
            // A path: word(::word)*
            let mut segs = vec![word];
            loop {
                let mut j = i;
                while j < chars.len() && chars[j].is_whitespace() {
                    j += 1;
                }
                if chars.get(j) == Some(&':') && chars.get(j + 1) == Some(&':') {
                    j += 2;
                    while j < chars.len() && chars[j].is_whitespace() {
                        j += 1;
                    }
                    let s = j;
                    while j < chars.len() && (chars[j].is_alphanumeric() || chars[j] == '_') {
                        j += 1;
                    }
                    if j == s {
                        break;
                    }
                    segs.push(chars[s..j].iter().collect());
                    i = j;
                } else {
                    break;
                }
            }
            if segs.len() > 1 {
                out.push(segs);
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Expands a use tree (`crate::a::{b, c::d as e, f::*}`) into paths, each prefixed by `prefix`.
fn expand_use(tree: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    if tree.is_empty() {
        return;
    }
    // Split off the leading path before any group.
    match tree.find('{') {
        Some(open) => {
            let head = &tree[..open];
            let close = tree.rfind('}').unwrap_or(tree.len());
            let inner = &tree[open + 1..close];
            let head_segs: Vec<String> = head
                .split("::")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
            let depth = prefix.len();
            prefix.extend(head_segs);
            let mut level = 0;
            let mut part = String::new();
            for ch in inner.chars() {
                match ch {
                    '{' => {
                        level += 1;
                        part.push(ch);
                    }
                    '}' => {
                        level -= 1;
                        part.push(ch);
                    }
                    ',' if level == 0 => {
                        expand_use(&part, prefix, out);
                        part.clear();
                    }
                    _ => part.push(ch),
                }
            }
            expand_use(&part, prefix, out);
            prefix.truncate(depth);
        }
        None => {
            let path = tree.split(" as ").next().unwrap_or_default();
            let mut segs = prefix.clone();
            segs.extend(
                path.split("::")
                    .map(str::trim)
                    .filter(|s| !s.is_empty() && *s != "*" && *s != "self")
                    .map(str::to_string),
            );
            if !segs.is_empty() {
                out.push(segs);
            }
        }
    }
}

/// The module path of a file's imports, resolved to a file of the house (the longest module
/// prefix that is a file), if the path names one.
fn resolve(
    from: &Source,
    segs: &[String],
    modules: &BTreeMap<Vec<String>, String>,
) -> Option<String> {
    let mut abs: Vec<String> = match segs[0].as_str() {
        "crate" | "tidemark" => Vec::new(),
        "super" => {
            let mut m = from.module.clone();
            let mut k = 0;
            while segs.get(k).is_some_and(|s| s == "super") {
                m.pop();
                k += 1;
            }
            m.extend(segs[k..].iter().cloned());
            return longest(&m, modules);
        }
        "self" => from.module.clone(),
        // A child module's name (`batches::run`), or anything else (std, sqlx…).
        first => {
            let mut child = from.module.clone();
            child.push(first.to_string());
            if !modules.contains_key(&child) {
                return None;
            }
            from.module.clone()
        }
    };
    let skip = usize::from(matches!(segs[0].as_str(), "crate" | "tidemark" | "self"));
    abs.extend(segs[skip..].iter().cloned());
    longest(&abs, modules)
}

fn longest(abs: &[String], modules: &BTreeMap<Vec<String>, String>) -> Option<String> {
    (0..=abs.len())
        .rev()
        .find_map(|n| modules.get(&abs[..n]).cloned())
}

/// The import graph: file -> (file -> the names it takes from it).
fn graph(sources: &[Source]) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut modules: BTreeMap<Vec<String>, String> = BTreeMap::new();
    for s in sources {
        if s.path != "src/main.rs" {
            modules.insert(s.module.clone(), s.path.clone());
        }
    }
    let mut g: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for s in sources {
        let entry = g.entry(s.path.clone()).or_default();
        for segs in paths(&s.code) {
            let Some(to) = resolve(s, &segs, &modules) else {
                continue;
            };
            if to != s.path {
                entry
                    .entry(to)
                    .or_default()
                    .insert(segs.last().cloned().unwrap_or_default());
            }
        }
    }
    g
}

/// The strongly connected sets of two files or more (Tarjan).
fn circles(g: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>) -> Vec<Vec<String>> {
    struct State<'a> {
        g: &'a BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(st: &mut State<'a>, v: &'a str) {
        st.index.insert(v, st.next);
        st.low.insert(v, st.next);
        st.next += 1;
        st.stack.push(v);
        st.on_stack.insert(v);
        if let Some(edges) = st.g.get(v) {
            for w in edges.keys() {
                let w = w.as_str();
                if !st.index.contains_key(w) {
                    visit(st, w);
                    let lw = st.low[w];
                    let lv = st.low[v];
                    st.low.insert(v, lv.min(lw));
                } else if st.on_stack.contains(w) {
                    let iw = st.index[w];
                    let lv = st.low[v];
                    st.low.insert(v, lv.min(iw));
                }
            }
        }
        if st.low[v] == st.index[v] {
            let mut set = Vec::new();
            while let Some(w) = st.stack.pop() {
                st.on_stack.remove(w);
                set.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if set.len() > 1 {
                set.sort();
                st.out.push(set);
            }
        }
    }
    let mut st = State {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in g.keys() {
        if !st.index.contains_key(v.as_str()) {
            visit(&mut st, v);
        }
    }
    st.out
}

/// The circles in words, with the arrows inside each.
fn describe_circles(
    g: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
    found: &[Vec<String>],
) -> String {
    let mut text = String::new();
    for (n, set) in found.iter().enumerate() {
        text.push_str(&format!(
            "circle {}: {} files: {}\n",
            n + 1,
            set.len(),
            set.join(", ")
        ));
        for a in set {
            for (b, names) in &g[a] {
                if set.contains(b) {
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    text.push_str(&format!("  {a} -> {b}: {}\n", names.join(", ")));
                }
            }
        }
    }
    text
}

#[test]
fn no_import_circles() {
    let sources = sources();
    let g = graph(&sources);
    let found = circles(&g);
    let arrows: usize = g.values().map(BTreeMap::len).sum();
    eprintln!(
        "house: {} files, {arrows} arrows, {} circle(s)",
        g.len(),
        found.len()
    );
    assert!(
        found.is_empty(),
        "files that import each other in a loop:\n{}",
        describe_circles(&g, &found)
    );
}

/// The checker itself finds a circle where there is one, and only there.
#[test]
fn the_circle_check_finds_a_circle() {
    let src = |path: &str, module: &[&str], text: &str| Source {
        path: path.into(),
        module: module.iter().map(|s| s.to_string()).collect(),
        code: strip_test_modules(&blank_comments_and_strings(text)),
        text: text.into(),
    };
    let files = [
        src("src/lib.rs", &[], "pub mod a; pub mod b; pub mod c;"),
        src(
            "src/a/mod.rs",
            &["a"],
            "mod inner; pub use inner::X; use crate::b::Y; // crate::c::Z",
        ),
        src("src/a/inner.rs", &["a", "inner"], "pub struct X;"),
        src(
            "src/b.rs",
            &["b"],
            "pub struct Y; fn f() { let s = \"crate::c::Z\"; crate::a::X; }",
        ),
        src(
            "src/c.rs",
            &["c"],
            "pub struct Z;\n#[cfg(test)]\nmod tests { use crate::a::X; }",
        ),
    ];
    let g = graph(&files);
    assert_eq!(
        circles(&g),
        vec![vec!["src/a/mod.rs".to_string(), "src/b.rs".to_string()]]
    );
    assert!(g["src/a/mod.rs"].contains_key("src/a/inner.rs"));
    // Comments, strings and test modules are no arrows.
    assert!(g["src/c.rs"].is_empty());
    assert!(!g["src/a/mod.rs"].contains_key("src/c.rs"));
    assert!(!g["src/b.rs"].contains_key("src/c.rs"));
}

#[test]
fn use_trees_expand() {
    let mut out = Vec::new();
    expand_use(
        " super::{archive::checksum, Keys as K, plan::{self, Step}}",
        &mut Vec::new(),
        &mut out,
    );
    let joined: Vec<String> = out.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        joined,
        [
            "super::archive::checksum",
            "super::Keys",
            "super::plan",
            "super::plan::Step"
        ]
    );
}

/// The engine folder: the only place that may branch on which engine it is.
const ENGINE_FOLDER: &str = "src/dialect/";

#[test]
fn no_engine_branch_outside_the_engine_folder() {
    let needles = [
        "Dialect::Postgres",
        "Dialect::Mysql",
        "Dialect::Sqlite",
        "name() ==",
        "name() !=",
        "== \"sqlite\"",
        "== \"mysql\"",
        "== \"postgres\"",
        "is_galera",
        "\"postgres\" =>",
        "\"mysql\" =>",
        "\"mariadb\" =>",
        "\"sqlite\" =>",
    ];
    let mut found = Vec::new();
    for s in sources() {
        if s.path.starts_with(ENGINE_FOLDER) {
            continue;
        }
        // Strings count here: `name() == "sqlite"` compares with one.
        let code = strip_test_modules(&s.text);
        for (n, line) in code.lines().enumerate() {
            let trimmed = line.trim_start();
            if trimmed.starts_with("//") {
                continue;
            }
            for needle in needles {
                if line.contains(needle) {
                    found.push(format!("{}:{}: {}", s.path, n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "engine branches outside {ENGINE_FOLDER}:\n{}",
        found.join("\n")
    );
}
