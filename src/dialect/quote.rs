//! Identifier scanning for SQL text (the gate's statement statistics and the contract's
//! dependency checks), with sqlparser-rs's tokenizer. Quoting itself is
//! [`super::SqlDialect::quote_part`].

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

#[cfg(test)]
mod tests {
    use super::identifiers;

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
