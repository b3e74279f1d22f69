//! Identifier scanning for SQL text (the gate's statement statistics and the contract's
//! dependency checks). Quoting itself is [`super::SqlDialect::quote_part`].

/// The identifiers of an SQL text: bare words and quoted names (`"…"`, `` `…` ``, `[…]`),
/// string literals and comments skipped.
pub fn identifiers(sql: &str) -> Vec<String> {
    let chars: Vec<char> = sql.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\'' => {
                i += 1;
                while i < chars.len() {
                    if chars[i] == '\'' {
                        if chars.get(i + 1) == Some(&'\'') {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
                i += 1;
            }
            '"' | '`' | '[' => {
                let close = if c == '[' { ']' } else { c };
                let from = i + 1;
                i += 1;
                while i < chars.len() && chars[i] != close {
                    i += 1;
                }
                out.push(chars[from..i.min(chars.len())].iter().collect());
                i += 1;
            }
            '-' if chars.get(i + 1) == Some(&'-') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            _ if c.is_alphanumeric() || c == '_' => {
                let from = i;
                while i < chars.len()
                    && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '$')
                {
                    i += 1;
                }
                out.push(chars[from..i].iter().collect());
            }
            _ => i += 1,
        }
    }
    out
}
