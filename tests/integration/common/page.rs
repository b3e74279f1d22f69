//! Reading the HTML page of `audit --html` / `status --html` (the numbers each element marked
//! `data-v="KEY"` shows) and loading it in headless Chromium from Debian's packages
//! (`apt-get install chromium`; `.ci/run` installs it). Without Chromium the browser tests
//! skip with a note, except with `CI` set: then they fail.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The text of every element marked `data-v="KEY"` (entities decoded), by key; a key marked
/// more than once keeps each text in page order.
///
/// # Panics
///
/// When a marked element holds another element (the test would read the wrong text).
pub fn marked(html: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut rest = html;
    while let Some(at) = rest.find("data-v=\"") {
        rest = &rest[at + "data-v=\"".len()..];
        let end = rest.find('"').expect("a closing quote");
        let key = decode(&rest[..end]);
        let open = rest.find('>').expect("the end of the tag");
        let text_end = rest[open + 1..].find('<').expect("the element's end");
        let text = &rest[open + 1..open + 1 + text_end];
        assert!(
            rest[open + 1 + text_end..].starts_with("</"),
            "element {key} holds another element"
        );
        out.entry(key).or_default().push(decode(text));
        rest = &rest[open + 1..];
    }
    out
}

/// The one text marked `key`.
///
/// # Panics
///
/// When `key` is not marked exactly once.
#[track_caller]
pub fn one<'a>(marks: &'a BTreeMap<String, Vec<String>>, key: &str) -> &'a str {
    match marks.get(key).map(Vec::as_slice) {
        Some([v]) => v,
        other => panic!("{key}: marked {other:?}"),
    }
}

/// HTML text with its character references decoded (the named ones a page or Chromium's
/// serialisation writes, and numeric ones).
pub fn decode(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let Some(end) = rest.find(';') else { break };
        let entity = &rest[1..end];
        let ch = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            "nbsp" => Some('\u{a0}'),
            e if e.starts_with("#x") || e.starts_with("#X") => u32::from_str_radix(&e[2..], 16)
                .ok()
                .and_then(char::from_u32),
            e if e.starts_with('#') => e[1..].parse().ok().and_then(char::from_u32),
            _ => None,
        };
        match ch {
            Some(c) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The Chromium binary of Debian's package, or None (with a note) when it is not installed.
///
/// # Panics
///
/// When it is not installed and `CI` is set.
pub fn chromium() -> Option<PathBuf> {
    for name in ["chromium", "chromium-browser"] {
        if let Ok(out) = Command::new("which").arg(name).output() {
            if out.status.success() {
                let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
                if !path.is_empty() {
                    return Some(PathBuf::from(path));
                }
            }
        }
    }
    if std::env::var_os("CI").is_some() {
        panic!(
            "chromium is not installed and CI is set: `apt-get install -y chromium` (.ci/run does)"
        );
    }
    eprintln!(
        "skipping the browser check: chromium is not installed (apt-get install -y chromium)"
    );
    None
}

/// What Chromium made of a page.
pub struct Loaded {
    /// The DOM after loading, serialised (`--dump-dom`).
    pub dom: String,
    /// The page's console messages (Chromium's `CONSOLE` log lines: a script error, a
    /// resource the page's Content-Security-Policy refused, …): empty for a clean page.
    pub console: Vec<String>,
}

/// The common switches: headless, as root in a container (no sandbox, no GPU, no /dev/shm),
/// the console logged to stderr.
fn browser(chromium: &Path) -> Command {
    let mut cmd = Command::new(chromium);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--hide-scrollbars",
        "--enable-logging=stderr",
        "--v=0",
    ]);
    cmd
}

/// Loads `page` (a file) in headless Chromium and returns its DOM and console messages.
///
/// # Panics
///
/// When Chromium cannot be run or fails.
pub fn load(chromium: &Path, page: &Path) -> Loaded {
    let out = browser(chromium)
        .arg("--dump-dom")
        .arg(url(page))
        .output()
        .expect("running chromium");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "chromium failed: {stderr}");
    Loaded {
        dom: String::from_utf8_lossy(&out.stdout).into_owned(),
        console: stderr
            .lines()
            .filter(|l| l.contains(":CONSOLE"))
            .map(str::to_string)
            .collect(),
    }
}

/// Writes a PNG screenshot of `page` (1240 pixels wide, `height` high) to `png`.
///
/// # Panics
///
/// When Chromium fails or writes no PNG.
pub fn screenshot(chromium: &Path, page: &Path, png: &Path, height: u32) {
    let out = browser(chromium)
        .arg(format!("--window-size=1240,{height}"))
        .arg(format!("--screenshot={}", png.display()))
        .arg(url(page))
        .output()
        .expect("running chromium");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(png).expect("the screenshot");
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 10_000,
        "a PNG screenshot ({} bytes)",
        bytes.len()
    );
}

/// A file's `file://` URL.
fn url(page: &Path) -> String {
    format!(
        "file://{}",
        page.canonicalize().expect("the page exists").display()
    )
}
