//! Identifier scanning for SQL text (the mapping's predicates and value expressions, the gate's
//! statement statistics, the contract's dependency checks), with sqlparser-rs's tokenizer. It
//! knows no engine: quoting is each dialect's ([`crate::dialect::Spelling::quote_part`]).

use sqlparser::dialect::SQLiteDialect;
use sqlparser::tokenizer::{Token, Tokenizer, Whitespace};

/// The identifiers of an SQL text: bare words (keywords included) and quoted names (`"…"`,
/// `` `…` ``, `[…]`), string literals, numbers and comments skipped.
///
/// Tokenized with sqlparser's SQLite dialect, the one that accepts all three quoting styles.
/// A text the tokenizer rejects part-way (a statistics view truncates long statements, leaving
/// an open quote) yields the identifiers before the rejected token.
pub fn identifiers(sql: &str) -> Vec<String> {
    let dialect = SQLiteDialect {};
    let mut tokens = Vec::new();
    // An error leaves the tokens read so far in `tokens`: keep them.
    let _ = Tokenizer::new(&dialect, sql)
        .with_unescape(true)
        .tokenize_with_location_into_buf(&mut tokens);
    tokens
        .into_iter()
        .filter_map(|t| match t.token {
            Token::Word(w) => Some(w.value),
            _ => None,
        })
        .collect()
}

/// The row names an SQL text qualifies columns with: every unquoted word directly followed by
/// a `.` (whitespace between them allowed), lower-cased, in order of appearance, each once.
/// `conv.total - this.seen` gives `["conv", "this"]`; a string literal `'conv.x'` or a quoted
/// name `"conv".x` gives nothing (a quoted name is a table's, not one of the mapping's row
/// names). Tokenized as [`identifiers`]; a text the tokenizer rejects part-way yields the names
/// before the rejected token.
///
/// The mapping's predicates and the counter's value expression use this to learn which rows a
/// template must join (`conv`, `usr`: issue 12, "Predicates that can see their row").
pub fn qualifiers(sql: &str) -> Vec<String> {
    let dialect = SQLiteDialect {};
    let mut tokens = Vec::new();
    let _ = Tokenizer::new(&dialect, sql)
        .with_unescape(true)
        .tokenize_with_location_into_buf(&mut tokens);
    let tokens: Vec<Token> = tokens
        .into_iter()
        .map(|t| t.token)
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .collect();
    let mut out: Vec<String> = Vec::new();
    for pair in tokens.windows(2) {
        if let (Token::Word(w), Token::Period) = (&pair[0], &pair[1]) {
            let name = w.value.to_ascii_lowercase();
            if w.quote_style.is_none() && !out.contains(&name) {
                out.push(name);
            }
        }
    }
    // The tokenizer may read `conv.x` as one word when the dialect allows dots in words:
    // split such words too.
    for t in &tokens {
        if let Token::Word(w) = t {
            if w.quote_style.is_none() {
                if let Some((head, _)) = w.value.split_once('.') {
                    let name = head.to_ascii_lowercase();
                    if !out.contains(&name) {
                        out.push(name);
                    }
                }
            }
        }
    }
    out
}

/// The statements of an SQL script, in order, each without its `;`: the text split at every
/// `;` outside string literals, quoted names and comments (tokenized as [`identifiers`], the
/// text kept as written). A statement that is only whitespace and comments is left out. The
/// migrations run one statement per call ([`crate::migrate`]): Citus refuses several
/// statements in one call once a table is distributed (issue 21). A text the tokenizer rejects
/// is returned whole, as one statement, for the server to judge.
pub fn statements(sql: &str) -> Vec<String> {
    let dialect = SQLiteDialect {};
    let Ok(tokens) = Tokenizer::new(&dialect, sql)
        .with_unescape(false)
        .tokenize()
    else {
        return vec![sql.to_string()];
    };
    let mut out = Vec::new();
    let mut current = String::new();
    let mut has_code = false;
    for token in tokens {
        match token {
            Token::SemiColon => {
                if has_code {
                    out.push(current.trim().to_string());
                }
                current.clear();
                has_code = false;
            }
            // The line end after a line comment is a token of its own, which sqlparser's
            // Display of the comment writes again.
            Token::Whitespace(Whitespace::SingleLineComment { prefix, comment }) => {
                current.push_str(&prefix);
                current.push_str(&comment);
            }
            Token::Whitespace(w) => current.push_str(&w.to_string()),
            t => {
                has_code = true;
                current.push_str(&t.to_string());
            }
        }
    }
    if has_code {
        out.push(current.trim().to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{identifiers, qualifiers, statements};

    #[test]
    fn a_script_splits_at_semicolons_outside_literals_names_and_comments() {
        let script = "-- a; comment\nCREATE TABLE \"a;b\" (x TEXT DEFAULT 'it''s; here');\n\
                      /* c; */ CREATE INDEX i ON t (x);\n-- trailing comment\n";
        assert_eq!(
            statements(script),
            [
                "-- a; comment\nCREATE TABLE \"a;b\" (x TEXT DEFAULT 'it''s; here')",
                "/* c; */ CREATE INDEX i ON t (x)"
            ]
        );
        assert_eq!(
            statements("ALTER TABLE t ADD COLUMN c BIGINT NULL\n"),
            ["ALTER TABLE t ADD COLUMN c BIGINT NULL"]
        );
        assert_eq!(statements("-- nothing\n;\n"), Vec::<String>::new());
    }

    #[test]
    fn row_names_are_the_words_before_a_dot() {
        assert_eq!(
            qualifiers("conv.message_total - this.seen_count"),
            ["conv", "this"]
        );
        assert_eq!(
            qualifiers(
                "NOT EXISTS (SELECT 1 FROM h WHERE h.room_id = THIS.room_id) AND x = 'usr.y'"
            ),
            ["h", "this"]
        );
        assert_eq!(
            qualifiers("\"conv\".a = 1 AND b = 2.5"),
            Vec::<String>::new()
        );
        assert_eq!(qualifiers("usr . marked_at > 0"), ["usr"]);
    }

    #[test]
    fn words_and_quoted_names_not_literals_or_comments() {
        assert_eq!(
            identifiers("SELECT \"Unread\", `b`, [c] FROM t -- x y\nWHERE k <> 'no pe' AND n = 5"),
            ["SELECT", "Unread", "b", "c", "FROM", "t", "WHERE", "k", "AND", "n"]
        );
    }

    #[test]
    fn a_truncated_text_keeps_what_came_before() {
        assert_eq!(
            identifiers("UPDATE m SET x = 'abc"),
            ["UPDATE", "m", "SET", "x"]
        );
    }

    #[test]
    fn placeholders_and_doubled_quotes() {
        assert_eq!(
            identifiers("SELECT a FROM t WHERE b = $1 AND c = ? AND d = 'it''s'"),
            ["SELECT", "a", "FROM", "t", "WHERE", "b", "AND", "c", "AND", "d"]
        );
    }
}
