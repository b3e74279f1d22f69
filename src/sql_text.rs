//! Identifier scanning for SQL text (the mapping's predicates and value expressions, the gate's
//! statement statistics, the contract's dependency checks), with sqlparser-rs's tokenizer. It
//! knows no engine: quoting is each dialect's ([`crate::dialect::Spelling::quote_part`]).

use sqlparser::dialect::SQLiteDialect;
use sqlparser::tokenizer::{Token, Tokenizer};

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

#[cfg(test)]
mod tests {
    use super::{identifiers, qualifiers};

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
