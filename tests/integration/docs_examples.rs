//! The command examples of README.md and the book (`docs/src/`) run, so the docs never lie
//! (issue 32). Every fenced block marked `console` is an example that runs on SQLite:
//!
//! ```text
//! $ tidemark audit            a command: only `tidemark …`, words split as a shell would
//! ? 1                         optional, right after: the exit code (default 0)
//! drifting rows               every other line: output that must appear, in this order
//! ...                         a line of three dots stands for anything (skipped)
//! ```
//!
//! Each file's blocks run in order, in a fresh folder of their own holding `chat.db`: the
//! generator's legacy chat database (`tidemark::generate`, 2 000 members, seed 42), with
//! `DATABASE_URL=sqlite:chat.db`, so a file's examples start where a DBA starts (no mapping,
//! nothing expanded) and each example sees what the ones before it did. Output is stdout then
//! stderr; an expected line matches a line of it that contains it (trimmed). Pipes,
//! redirections and other programs are refused: write those in ```sh blocks, which are shown,
//! not run. `TIDEMARK_DOCS_SHOW=1` prints every example's output (to write the expected lines).

use std::path::{Path, PathBuf};

use crate::common::bin;
use tidemark::db::Dsn;
use tidemark::generate::{generate, GenerateOptions};

/// One `$ tidemark …` line of a console block with what it must do.
#[derive(Debug)]
struct Example {
    /// Where it is written: `file:line`.
    at: String,
    /// The arguments after `tidemark`.
    args: Vec<String>,
    /// The exit code it must end with.
    code: i32,
    /// Lines the output must contain, in order.
    expect: Vec<String>,
}

/// The repository's root.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every Markdown file under `docs/src/`, sorted.
fn doc_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("docs/src") {
            let path = entry.expect("a docs entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut files = vec![root().join("README.md")];
    walk(&root().join("docs/src"), &mut files);
    files.sort();
    files
}

/// A command line split into words: spaces separate, single and double quotes group (no
/// escapes inside single quotes, `\"` and `\\` inside double ones). Err for what a shell would
/// do more with: a pipe, a redirection, a variable, a command separator.
fn words(line: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => {
                if in_word {
                    out.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    word.push(q);
                }
            }
            '"' => {
                in_word = true;
                while let Some(q) = chars.next() {
                    match q {
                        '"' => break,
                        '\\' => word.extend(chars.next()),
                        '$' => return Err("a variable inside double quotes".into()),
                        _ => word.push(q),
                    }
                }
            }
            '|' | '>' | '<' | ';' | '&' | '$' | '`' | '#' => {
                return Err(format!("`{c}`: write shell pipelines in a ```sh block"))
            }
            _ => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        out.push(word);
    }
    Ok(out)
}

/// The examples of one file's ```console blocks, in order.
fn examples(file: &Path) -> Vec<Example> {
    let text = std::fs::read_to_string(file).expect("a docs file");
    let name = file
        .strip_prefix(root())
        .unwrap_or(file)
        .display()
        .to_string();
    let mut out: Vec<Example> = Vec::new();
    let mut in_console = false;
    let mut in_other = false;
    for (n, line) in text.lines().enumerate() {
        let at = format!("{name}:{}", n + 1);
        let fence = line.trim_start();
        if fence.starts_with("```") {
            if in_console || in_other {
                in_console = false;
                in_other = false;
            } else if fence.trim_start_matches('`').trim() == "console" {
                in_console = true;
            } else {
                in_other = true;
            }
            continue;
        }
        if !in_console {
            continue;
        }
        if let Some(cmd) = line.strip_prefix("$ ") {
            let mut args = words(cmd).unwrap_or_else(|e| panic!("{at}: {e}"));
            assert_eq!(
                args.first().map(String::as_str),
                Some("tidemark"),
                "{at}: a console example runs `tidemark` only"
            );
            args.remove(0);
            out.push(Example {
                at,
                args,
                code: 0,
                expect: Vec::new(),
            });
            continue;
        }
        let last = out
            .last_mut()
            .unwrap_or_else(|| panic!("{at}: output before any `$ tidemark` line"));
        if let Some(code) = line.strip_prefix("? ") {
            last.code = code
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("{at}: `? N` wants an exit code"));
        } else if !line.trim().is_empty() && line.trim() != "..." {
            last.expect.push(line.trim().to_string());
        }
    }
    out
}

/// The first expected line of `example` that `output`'s lines do not contain in order; None
/// when every one is there.
fn missing_line<'a>(example: &'a Example, output: &str) -> Option<&'a str> {
    let mut lines = output.lines();
    example
        .expect
        .iter()
        .find(|want| !lines.any(|l| l.contains(want.as_str())))
        .map(String::as_str)
}

/// A fresh folder with the generator's legacy database as `chat.db`.
async fn fresh_folder() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let url = format!("sqlite:{}?mode=rwc", dir.path().join("chat.db").display());
    let dsn = Dsn::parse(&url).expect("the SQLite URL parses");
    let mut conn = dsn.connect().await.expect("creating chat.db");
    let options = GenerateOptions {
        members: 2000,
        seed: 42,
    };
    generate(&mut conn, dsn.dialect, &options)
        .await
        .expect("generating the legacy database");
    drop(conn);
    dir
}

#[test]
fn the_parser_reads_what_the_docs_write() {
    assert_eq!(
        words(r#"tidemark audit --tolerance "0.5" 'a b'"#).unwrap(),
        ["tidemark", "audit", "--tolerance", "0.5", "a b"]
    );
    assert!(words("tidemark audit | jq .").is_err());
    assert!(words("tidemark audit --database \"$DATABASE_URL\"").is_err());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("x.md");
    std::fs::write(
        &file,
        "```console\n$ tidemark status\n? 1\nwatermarks\n...\nlast\n```\n```sh\n$ tidemark x | y\n```\n",
    )
    .unwrap();
    let found = examples(&file);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].args, ["status"]);
    assert_eq!(found[0].code, 1);
    assert_eq!(found[0].expect, ["watermarks", "last"]);
    let example = &found[0];
    assert_eq!(
        missing_line(example, "a\nwatermarks: 3\nb\nlast audit"),
        None
    );
    assert_eq!(
        missing_line(example, "last\nwatermarks"),
        Some("last"),
        "out of order must fail"
    );
    assert_eq!(missing_line(example, "watermarks"), Some("last"));
}

#[tokio::test]
async fn console_examples_run_sqlite() {
    let mut ran = 0;
    let mut files_with_examples = Vec::new();
    for file in doc_files() {
        let examples = examples(&file);
        if examples.is_empty() {
            continue;
        }
        files_with_examples.push(file.strip_prefix(root()).unwrap().display().to_string());
        let dir = fresh_folder().await;
        for example in &examples {
            let args: Vec<&str> = example.args.iter().map(String::as_str).collect();
            let run = bin::run_env(dir.path(), &args, &[("DATABASE_URL", "sqlite:chat.db")]);
            let output = format!("{}{}", run.stdout, run.stderr);
            if std::env::var_os("TIDEMARK_DOCS_SHOW").is_some() {
                eprintln!(
                    "{}: $ tidemark {}\n{output}? {:?}",
                    example.at,
                    args.join(" "),
                    run.code
                );
            }
            assert_eq!(
                run.code,
                Some(example.code),
                "{}: `tidemark {}` exit code\n--- output\n{output}",
                example.at,
                example.args.join(" ")
            );
            if let Some(want) = missing_line(example, &output) {
                panic!(
                    "{}: `tidemark {}` did not print, in order, the line {want:?}\n--- output\n{output}",
                    example.at,
                    example.args.join(" ")
                );
            }
            ran += 1;
        }
    }
    eprintln!("{ran} examples ran, from {files_with_examples:?}");
    assert!(
        files_with_examples.iter().any(|f| f == "README.md"),
        "README.md's runbook has no console example: {files_with_examples:?}"
    );
    assert!(ran >= 10, "only {ran} console examples ran");
}
