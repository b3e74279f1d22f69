//! The book's "Where things are" (`docs/src/house.md`) and the README's chapter links name
//! only files that exist.

use std::collections::BTreeSet;

use super::root;

/// The paths named in backticks in the book's chapter "Where things are" (`docs/src/house.md`,
/// written from the repository's root, e.g. `src/db/tx.rs`, `sql/common/`), each checked to
/// exist; and the chapter names every folder of `src/`. The README's "Where to read on" names
/// book chapters: each must exist too.
#[test]
fn readme_names_files_that_exist() {
    let section =
        std::fs::read_to_string(root().join("docs/src/house.md")).expect("docs/src/house.md");
    let section = section.as_str();
    let mut missing = Vec::new();
    let mut named = BTreeSet::new();
    for (k, quoted) in section.split('`').enumerate() {
        let q = quoted.trim();
        let is_path = [".rs", ".sql", "/", ".md", ".toml", ".json"]
            .iter()
            .any(|end| q.ends_with(end))
            && !q.contains(' ')
            && !q.contains('<')
            && !q.contains('*');
        if k % 2 == 0 || !is_path {
            continue;
        }
        named.insert(q.trim_end_matches('/').to_string());
        if !root().join(q).exists() {
            missing.push(q.to_string());
        }
    }
    assert!(
        named.len() > 40,
        "only {} paths read from docs/src/house.md",
        named.len()
    );
    assert!(
        missing.is_empty(),
        "docs/src/house.md (\"Where things are\") names paths that do not exist (write them from the repository's root): {missing:?}"
    );
    let mut folders = Vec::new();
    let mut stack = vec![root().join("src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src") {
            let p = entry.expect("entry").path();
            if p.is_dir() {
                let rel = p.strip_prefix(root()).expect("under root");
                folders.push(rel.to_string_lossy().replace('\\', "/"));
                stack.push(p);
            }
        }
    }
    let unnamed: Vec<&String> = folders.iter().filter(|f| !named.contains(*f)).collect();
    assert!(
        unnamed.is_empty(),
        "docs/src/house.md (\"Where things are\") does not name these folders: {unnamed:?}"
    );
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let chapters: Vec<&str> = readme
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|q| q.starts_with("docs/src/") && q.ends_with(".md"))
        .collect();
    assert!(
        chapters.len() > 10,
        "README.md names {} chapters",
        chapters.len()
    );
    let gone: Vec<&&str> = chapters
        .iter()
        .filter(|c| !root().join(c).exists())
        .collect();
    assert!(
        gone.is_empty(),
        "README.md names chapters that do not exist: {gone:?}"
    );
}
