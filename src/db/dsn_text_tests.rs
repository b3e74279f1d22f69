//! Tests of `dsn_text` (issue 25, row 9): the issue's URLs, password parameters, texts that are
//! no URL, and a property over passwords of every URL-special character.

use super::*;
use proptest::prelude::*;

/// What the driver reads from `url`: (user, password decoded, host, port, path, query).
fn driver_reads(url: &str) -> (String, Option<String>, String, Option<u16>, String, String) {
    let u = url::Url::parse(url).unwrap_or_else(|e| panic!("the driver's URL parses: {e}"));
    (
        decode(u.username()),
        u.password().map(decode),
        u.host_str().unwrap_or_default().to_string(),
        u.port(),
        u.path().to_string(),
        u.query().unwrap_or_default().to_string(),
    )
}

fn scrubbed(t: &DsnText, text: &str) -> String {
    let mut out = text.to_string();
    for (secret, instead) in &t.masks {
        out = out.replace(secret, instead);
    }
    out
}

#[test]
fn the_issues_urls() {
    for (url, user, password, shown) in [
        (
            "postgres://postgres:2024#Spring@127.0.0.1:5432/db",
            "postgres",
            "2024#Spring",
            "postgres://postgres:***@127.0.0.1:5432/db",
        ),
        (
            "postgres://postgres:#S3cretPW@127.0.0.1:5432/db",
            "postgres",
            "#S3cretPW",
            "postgres://postgres:***@127.0.0.1:5432/db",
        ),
        (
            "mysql://u:12?Spring@127.0.0.1:3306/db",
            "u",
            "12?Spring",
            "mysql://u:***@127.0.0.1:3306/db",
        ),
        (
            "mysql://u:a/b@c@127.0.0.1:3306/db",
            "u",
            "a/b@c",
            "mysql://u:***@127.0.0.1:3306/db",
        ),
        (
            "postgres://u:p%zz w@127.0.0.1:5432/db",
            "u",
            "p%zz w",
            "postgres://u:***@127.0.0.1:5432/db",
        ),
        (
            "postgres://alice@corp:pw@127.0.0.1:5432/db",
            "alice@corp",
            "pw",
            "postgres://alice@corp:***@127.0.0.1:5432/db",
        ),
    ] {
        let t = read(url).unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_eq!(t.shown, shown, "{url}");
        let (u, p, host, _, path, _) = driver_reads(&t.driver);
        assert_eq!(
            (u.as_str(), p.as_deref(), host.as_str(), path.as_str()),
            (user, Some(password), "127.0.0.1", "/db"),
            "{url} as {}",
            t.driver
        );
        let error = format!("cannot connect to {url}: password {password} was refused");
        let s = scrubbed(&t, &error);
        assert!(!s.contains(password), "{s}");
        assert!(s.contains(shown), "{s}");
    }
}

#[test]
fn password_parameters_are_masked() {
    let t = read("postgres://u@h/db?sslmode=verify-full&sslpassword=K3yPass&application_name=x")
        .unwrap();
    assert_eq!(
        t.shown,
        "postgres://u@h/db?sslmode=verify-full&sslpassword=***&application_name=x"
    );
    assert_eq!(
        t.driver,
        "postgres://u@h/db?sslmode=verify-full&sslpassword=K3yPass&application_name=x"
    );
    assert!(!scrubbed(&t, "bad key password K3yPass").contains("K3yPass"));
    let t = read("mysql://u@h/db?Password=a%23b&pass=cc&pwd=dd").unwrap();
    assert_eq!(t.shown, "mysql://u@h/db?Password=***&pass=***&pwd=***");
    assert!(!scrubbed(&t, "a#b").contains("a#b"));
}

#[test]
fn an_at_in_a_parameter_keeps_a_valid_url() {
    // Azure's user@server as a parameter: the URL parses, the driver gets it as written.
    let url = "postgres://h:5432/db?user=alice@corp&sslmode=require";
    let t = read(url).unwrap();
    assert_eq!(t.driver, url);
    assert!(!t.shown.contains("alice@corp&sslmode") || t.shown == url);
}

#[test]
fn a_text_that_is_no_url_is_refused_without_its_text() {
    for text in [
        "postgres://u:S3cretPw#frag",
        "postgres://u:S3cretPw/host/db",
        "postgres://u:pw@h:99999999/db",
        "postgres://u:pw@h/db#S3cretPw",
    ] {
        let e = read(text)
            .err()
            .unwrap_or_else(|| panic!("{text} was read"));
        assert!(!e.contains("S3cretPw") && !e.contains("pw@"), "{text}: {e}");
    }
    assert_eq!(
        read("sqlite:demo.db?mode=rwc").unwrap().shown,
        "sqlite:demo.db?mode=rwc"
    );
}

/// Every URL-special character (RFC 3986 delimiters, `%`, and what a URL must encode).
const SPECIAL: &str = ":/?#[]@!$&'()*+,;=% \"<>\\^`{|}";

fn password() -> impl Strategy<Value = (String, String)> {
    let specials = || {
        proptest::collection::vec(
            proptest::sample::select(SPECIAL.chars().collect::<Vec<_>>()),
            0..6,
        )
        .prop_map(|v| v.into_iter().collect::<String>())
    };
    (
        specials(),
        "[A-Za-z0-9]{8}",
        specials(),
        "[A-Za-z0-9%#?@/: é]{0,6}",
    )
        .prop_map(|(a, core, b, tail)| {
            let core = format!("Q{core}");
            (format!("{a}{core}{b}{tail}"), core)
        })
}

proptest! {
    /// A password of any characters, written as is or percent-encoded: the driver reads it
    /// (an existing `%XX` is an escape), the host, port, database and parameters stay what
    /// they are, the printed URL is exactly the URL with `***`, and scrubbing masks it.
    #[test]
    fn any_password_is_read_and_never_shown((pw, core) in password(), scheme in "postgres|mysql") {
        let encoded: String = pw.bytes().map(|b| format!("%{b:02X}")).collect();
        for written in [pw.clone(), encoded] {
            let url = format!("{scheme}://tm_user:{written}@db.example:5432/chat?sslmode=require");
            let t = read(&url).map_err(|e| TestCaseError::fail(format!("{url}: {e}")))?;
            prop_assert_eq!(
                &t.shown,
                &format!("{scheme}://tm_user:***@db.example:5432/chat?sslmode=require")
            );
            let (user, password, host, port, path, query) = driver_reads(&t.driver);
            prop_assert_eq!(user, "tm_user");
            prop_assert_eq!(password, Some(decode(&written)));
            prop_assert_eq!((host.as_str(), port, path.as_str(), query.as_str()),
                ("db.example", Some(5432), "/chat", "sslmode=require"));
            let error = format!("{url} / {} / auth failed for {written} ({pw}) [{}]", t.driver, decode(&written));
            let s = scrubbed(&t, &error);
            prop_assert!(!s.contains(&core), "{}", s);
        }
    }

    /// The same password as a `sslpassword` parameter: masked when printed and scrubbed.
    #[test]
    fn any_password_parameter_is_never_shown((pw, core) in password()) {
        let encoded: String = pw.bytes().map(|b| format!("%{b:02X}")).collect();
        let url = format!("postgres://u@h/db?sslpassword={encoded}&sslmode=require");
        let t = read(&url).map_err(|e| TestCaseError::fail(format!("{url}: {e}")))?;
        prop_assert_eq!(&t.shown, "postgres://u@h/db?sslpassword=***&sslmode=require");
        let s = scrubbed(&t, &format!("{url} {pw} {encoded}"));
        prop_assert!(!s.contains(&core), "{}", s);
    }

    /// Any text at all: printed, it never shows the core of a password it holds.
    #[test]
    fn no_text_shows_a_password((pw, core) in password(), before in ".{0,12}", after in ".{0,12}") {
        let text = format!("postgres://{before}u:{pw}@{after}");
        let shown = super::super::redact(&text);
        prop_assert!(!shown.contains(&core), "{}", shown);
    }
}
