//! No file above 700 lines, no function above 150 (issues 20 and 33), in the library and the
//! binary (`src/`, its `tests.rs` files left out as in the import graph) and in the test
//! suites (every `.rs` file under `tests/`): `cargo test --test integration house::lengths`
//! prints each file or function over the limit with its length.

use super::{blank_comments_and_strings, root, rust_files, sources};

/// The most lines a source file may have.
const MAX_FILE_LINES: usize = 700;
/// The most lines a function may have (its signature to its closing brace).
const MAX_FN_LINES: usize = 150;

/// The test suites' files: every `.rs` file under `tests/`, as (path from the repository's
/// root, text).
fn test_files() -> Vec<(String, String)> {
    let root = root();
    let mut files = Vec::new();
    rust_files(&root.join("tests"), &mut files);
    files
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(&root).expect("under root");
            let text = std::fs::read_to_string(&p).expect("read test file");
            (rel.to_string_lossy().replace('\\', "/"), text)
        })
        .collect()
}

/// Every file over [`MAX_FILE_LINES`] and every function over [`MAX_FN_LINES`] among
/// `files` (path, text), one line each: `path: N lines` or `path:LINE: fn NAME: N lines`.
fn too_long<'a>(files: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<String> {
    let mut long = Vec::new();
    for (path, text) in files {
        let lines = text.lines().count();
        if lines > MAX_FILE_LINES {
            long.push(format!("{path}: {lines} lines (at most {MAX_FILE_LINES})"));
        }
        for (name, start, len) in functions(&blank_comments_and_strings(text)) {
            if len > MAX_FN_LINES {
                long.push(format!(
                    "{path}:{start}: fn {name}: {len} lines (at most {MAX_FN_LINES})"
                ));
            }
        }
    }
    long
}

#[test]
fn files_and_functions_are_short() {
    let long = too_long(sources().iter().map(|s| (s.path.as_str(), s.text.as_str())));
    assert!(long.is_empty(), "too long:\n{}", long.join("\n"));
}

#[test]
fn test_files_and_functions_are_short() {
    let files = test_files();
    assert!(
        files.iter().any(|(p, _)| p == "tests/integration/main.rs") && files.len() > 50,
        "only {} test files found under tests/",
        files.len()
    );
    let long = too_long(files.iter().map(|(p, t)| (p.as_str(), t.as_str())));
    assert!(
        long.is_empty(),
        "too long (split a file into modules by topic, a function into helpers):\n{}",
        long.join("\n")
    );
}

/// The check itself finds a file and a function over the limits, counts a function from its
/// `fn` to its closing brace, and does not take braces or `fn ` inside strings and comments
/// for code (a `}` in a string would otherwise end `outer` early and hide it).
#[test]
fn the_length_check_finds_long_files_and_functions() {
    let body = |n: usize| "    let x = 1;\n".repeat(n);
    let long_fn = format!("fn long() {{\n{}}}\n", body(MAX_FN_LINES - 1));
    let short_fn = format!("fn short() {{\n{}}}\n", body(MAX_FN_LINES - 2));
    assert_eq!(
        too_long([("tests/a.rs", long_fn.as_str())]),
        [format!(
            "tests/a.rs:1: fn long: {} lines (at most {MAX_FN_LINES})",
            MAX_FN_LINES + 1
        )]
    );
    assert!(too_long([("tests/b.rs", short_fn.as_str())]).is_empty());
    let tricky = format!(
        "fn outer() {{\n    let s = \"}} fn inner() {{\";\n    // }} {{\n{}}}\n",
        body(MAX_FN_LINES - 3)
    );
    assert_eq!(
        too_long([("tests/c.rs", tricky.as_str())]),
        [format!(
            "tests/c.rs:1: fn outer: {} lines (at most {MAX_FN_LINES})",
            MAX_FN_LINES + 1
        )]
    );
    let big_file = "// a line\n".repeat(MAX_FILE_LINES + 1);
    assert_eq!(
        too_long([("tests/d.rs", big_file.as_str())]),
        [format!(
            "tests/d.rs: {} lines (at most {MAX_FILE_LINES})",
            MAX_FILE_LINES + 1
        )]
    );
}

/// Every function of the code with a body: (name, first line, lines from its `fn` to its
/// closing brace).
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = code.lines().collect();
    let mut out = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        let Some(at) = find_fn(line) else { continue };
        let name: String = line[at + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // The body: from the first `{` at depth 0 after the signature, unless a `;` comes
        // first (a declaration without a body).
        let mut depth = 0i32;
        let mut opened = false;
        let mut end = None;
        'scan: for (k, l) in lines.iter().enumerate().skip(n) {
            let text = if k == n { &l[at..] } else { l };
            for ch in text.chars() {
                match ch {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => {
                        depth -= 1;
                        if opened && depth == 0 {
                            end = Some(k);
                            break 'scan;
                        }
                    }
                    ';' if !opened && depth == 0 => break 'scan,
                    _ => {}
                }
            }
        }
        if let Some(end) = end {
            out.push((name, n + 1, end - n + 1));
        }
    }
    out
}

/// Where `fn NAME` starts on a line, as a declaration (not `Fn(`, not inside a word).
fn find_fn(line: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(p) = line[from..].find("fn ") {
        let at = from + p;
        let before_ok = at == 0 || !line[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_');
        let name_ok = line[at + 3..]
            .chars()
            .next()
            .is_some_and(|c| c.is_alphabetic() || c == '_');
        if before_ok && name_ok {
            return Some(at);
        }
        from = at + 3;
    }
    None
}
