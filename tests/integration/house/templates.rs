//! The statement templates (`sql/**/*.sql`) stay readable (issue 30, "SQL a DBA can read"): no
//! template over 200 lines, no line over 120 characters.

use super::root;

/// The most characters a line of a statement template (`sql/**/*.sql`) may have (issue 30).
const MAX_SQL_LINE_CHARS: usize = 120;
/// The most lines a statement template may have (issue 30: one readable file per form or part).
const MAX_SQL_FILE_LINES: usize = 200;

/// Every statement template under `sql/` (issue 30, "SQL a DBA can read"): no line over
/// [`MAX_SQL_LINE_CHARS`] characters, no file over [`MAX_SQL_FILE_LINES`] lines.
#[test]
fn sql_templates_are_short() {
    let mut files = Vec::new();
    let mut stack = vec![root().join("sql")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read sql/") {
            let p = entry.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "sql") {
                files.push(p);
            }
        }
    }
    files.sort();
    assert!(
        files.len() > 40,
        "only {} templates under sql/",
        files.len()
    );
    let mut long = Vec::new();
    for p in &files {
        let rel = p
            .strip_prefix(root())
            .expect("under root")
            .display()
            .to_string();
        let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("reading {rel}: {e}"));
        let lines = text.lines().count();
        if lines > MAX_SQL_FILE_LINES {
            long.push(format!(
                "{rel}: {lines} lines (at most {MAX_SQL_FILE_LINES})"
            ));
        }
        for (i, line) in text.lines().enumerate() {
            let chars = line.chars().count();
            if chars > MAX_SQL_LINE_CHARS {
                long.push(format!(
                    "{rel}:{}: {chars} characters (at most {MAX_SQL_LINE_CHARS})",
                    i + 1
                ));
            }
        }
    }
    assert!(long.is_empty(), "too long:\n{}", long.join("\n"));
}
