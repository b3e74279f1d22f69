//! The text of a database URL (issue 25, row 9): where its user info and password are, also
//! when the text is not a valid URL (a password with `#`, `?`, `@`, `/`, `%` or spaces, as DBAs
//! write them for psql), the URL the driver gets, the URL as printed, and every form of its
//! secrets to mask in other text (the driver's errors can echo them).
//!
//! The rules, in the book (`docs/src/introduction.md`: "Every database command takes `--database URL`"):
//!
//! - The user info runs from `//` to the last `@` (a URL parser stops at the first `#`, `?` or
//!   `/`, which a password may hold). Printed, everything after its first `:` is `***`, and
//!   the value of every query parameter whose name holds `password` (or is `pass`, `pwd`) too.
//! - The driver gets the text as written when it is a URL whose reading agrees with that rule;
//!   otherwise the user name and password, percent-encoded (a `%` followed by two hex digits is
//!   kept: an escape, as in any URL). A text that is no URL even so is refused (exit 2) with
//!   the parser's reason, never its text.

use std::fmt::Write as _;

/// How tidemark reads one database URL.
#[derive(Clone)]
pub(super) struct DsnText {
    /// The URL the driver gets.
    pub driver: String,
    /// The URL as printed: no password, no password parameter.
    pub shown: String,
    /// Texts to mask wherever they appear (error messages), each with its replacement,
    /// longest first.
    pub masks: Vec<(String, String)>,
}

/// Reads `text` (its scheme already validated and spelled for the driver).
///
/// Errors: why the text is not a URL (the parser's reason), never the text.
pub(super) fn read(text: &str) -> Result<DsnText, String> {
    let Some(start) = authority_start(text) else {
        // `sqlite:` and other URLs without an authority hold no user info; in one that is not
        // a database URL, an `@` may still end one.
        url::Url::parse(text).map_err(|e| format!("it does not parse as a URL ({e})"))?;
        let scheme = text.find(':').map_or(0, |c| c + 1);
        let mut masks = vec![text.to_string()];
        let shown = match text.rfind('@') {
            Some(at) => {
                masks.extend(forms(&text[scheme..at]));
                format!("{}***@{}", &text[..scheme], &text[at + 1..])
            }
            None => text.to_string(),
        };
        masks.extend(parameter_secrets(text));
        return Ok(finish(text.to_string(), mask_parameters(&shown), masks));
    };
    let driver = if agrees(text) {
        text.to_string()
    } else {
        let body = &text[start..];
        let at = body.rfind('@').ok_or_else(|| why(text))?;
        let (user, password) = match body[..at].split_once(':') {
            Some((user, password)) => (user, Some(password)),
            None => (&body[..at], None),
        };
        let mut driver = format!("{}{}", &text[..start], encode(user));
        if let Some(p) = password {
            let _ = write!(driver, ":{}", encode(p));
        }
        let _ = write!(driver, "@{}", &body[at + 1..]);
        if !agrees(&driver) {
            return Err(why(&driver));
        }
        driver
    };
    let shown = mask_parameters(&conservative(text, start));
    let mut masks = vec![text.to_string(), driver.clone()];
    masks.extend(parameter_secrets(text));
    // The password as the last-`@` rule reads it (as written, decoded, encoded) and as the
    // driver's URL parser reads it.
    let body = &text[start..];
    if let Some(at) = body.rfind('@') {
        if let Some((_, password)) = body[..at].split_once(':') {
            masks.extend(forms(password));
        }
    }
    if let Ok(url) = url::Url::parse(&driver) {
        if let Some(password) = url.password() {
            masks.extend(forms(password));
        }
    }
    Ok(finish(driver, shown, masks))
}

/// A text that no reading makes a URL, as printed: nothing of it.
pub(super) const NOT_SHOWN: &str = "(a database URL that does not parse: not shown)";

/// The masks, longest first, each once, the URLs replaced by `shown`, the rest by `***`.
fn finish(driver: String, shown: String, masks: Vec<String>) -> DsnText {
    let urls = [masks.first().cloned(), Some(driver.clone())];
    let mut out: Vec<(String, String)> = Vec::new();
    for m in masks {
        if m.is_empty() || m == "***" || out.iter().any(|(t, _)| *t == m) {
            continue;
        }
        let instead = if urls.iter().flatten().any(|u| *u == m) {
            shown.clone()
        } else {
            "***".to_string()
        };
        if m != instead {
            out.push((m, instead));
        }
    }
    out.sort_by_key(|(t, _)| std::cmp::Reverse(t.len()));
    DsnText {
        driver,
        shown,
        masks: out,
    }
}

/// Where the authority starts: after `scheme://` (the scheme is the text before the first `:`).
fn authority_start(text: &str) -> Option<usize> {
    let colon = text.find(':')?;
    text[colon + 1..].starts_with("//").then_some(colon + 3)
}

/// Whether a URL parser reads `text` as the last-`@` rule does: it parses, has no fragment
/// (a `#` of a password), no `@` in its path, and an `@` in its query only inside a `key=value`
/// parameter whose value after its last `@` holds no `:` or `/` (`?user=alice@corp`, not the
/// `@host:port/db` a password with `?` leaves in the query). What remains ambiguous (a password
/// shaped like `1?key=value` in a URL with neither port nor database) reads as a URL parser
/// reads it.
fn agrees(text: &str) -> bool {
    let Ok(url) = url::Url::parse(text) else {
        return false;
    };
    if url.cannot_be_a_base() || url.fragment().is_some() || url.path().contains('@') {
        return false;
    }
    match url.query() {
        Some(q) if q.contains('@') => q.split('&').filter(|s| !s.is_empty()).all(|s| {
            s.split_once('=').is_some_and(|(k, v)| {
                let host = v.rsplit('@').next().unwrap_or_default();
                !k.is_empty()
                    && k.chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
                    && !host.contains([':', '/'])
            })
        }),
        _ => true,
    }
}

/// Why `text` is not a URL: the parser's reason (fixed words, never the text).
fn why(text: &str) -> String {
    match url::Url::parse(text) {
        Err(e) => format!("it does not parse as a URL ({e})"),
        Ok(url) if url.fragment().is_some() => {
            "a `#` cuts it short and no `@` follows to end a user info".to_string()
        }
        Ok(_) => "its user info or host cannot be told apart".to_string(),
    }
}

/// The text with its user info, up to the last `@`, shown as `user:***` (`user` alone when it
/// has no `:`).
fn conservative(text: &str, start: usize) -> String {
    let body = &text[start..];
    match body.rfind('@') {
        None => text.to_string(),
        Some(at) => {
            let info = &body[..at];
            let user = info.split(':').next().unwrap_or_default();
            let masked = if info.contains(':') {
                format!("{user}:***")
            } else {
                user.to_string()
            };
            format!("{}{masked}@{}", &text[..start], &body[at + 1..])
        }
    }
}

/// Whether a query parameter's name says it holds a secret.
fn secret_key(key: &str) -> bool {
    let key = decode(key).to_ascii_lowercase();
    key.contains("password") || key == "pass" || key == "pwd"
}

/// The text with the value of every secret parameter (`?` or `&` + name + `=`) as `***`.
fn mask_parameters(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, piece) in text.split_inclusive(['?', '&']).enumerate() {
        let (body, delimiter) = match piece.strip_suffix(['?', '&']) {
            Some(body) => (body, &piece[body.len()..]),
            None => (piece, ""),
        };
        match body.split_once('=') {
            Some((key, _)) if i > 0 && secret_key(key) => {
                let _ = write!(out, "{key}=***{delimiter}");
            }
            _ => out.push_str(piece),
        }
    }
    out
}

/// The values of the secret parameters, in every form.
fn parameter_secrets(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, piece) in text.split_inclusive(['?', '&']).enumerate() {
        let body = piece.strip_suffix(['?', '&']).unwrap_or(piece);
        if let Some((key, value)) = body.split_once('=') {
            if i > 0 && secret_key(key) {
                out.extend(forms(value));
            }
        }
    }
    out
}

/// A secret as written, decoded, encoded, and its pieces between URL delimiters (four
/// characters or more: a driver that misreads the URL echoes such pieces as a host or port).
fn forms(secret: &str) -> Vec<String> {
    let mut out = vec![secret.to_string(), decode(secret), encode(secret)];
    out.extend(
        secret
            .split(|c: char| ":/?#[]@&=+;, ".contains(c))
            .filter(|p| p.chars().count() >= 4 && *p != secret)
            .map(str::to_string),
    );
    out
}

/// Percent-encodes all but letters, digits, `-._~` and an existing `%XX` escape.
fn encode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let escape = b == b'%'
            && i + 2 < bytes.len()
            && bytes[i + 1].is_ascii_hexdigit()
            && bytes[i + 2].is_ascii_hexdigit();
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') || escape {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
        i += 1;
    }
    out
}

/// Percent-decodes (`%XX` escapes; anything else as it is), lossy on invalid UTF-8.
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
#[path = "dsn_text_tests.rs"]
mod tests;
