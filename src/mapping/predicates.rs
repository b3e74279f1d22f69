//! The mapping's SQL predicates parsed with the dialect's own grammar (sqlparser-rs) before any
//! statement runs, so that a predicate the server would reject is named with its key and line
//! instead of surfacing as a syntax error in the middle of a stage (issue 13, row 10).

use sqlparser::parser::Parser;
use sqlparser::tokenizer::Token;

use super::types::Mapping;
use crate::error::input_error;

impl Mapping {
    /// Parses every predicate of the mapping (`messages.countable`,
    /// `messages.legacy_countable`, `members.active`, each evidence `filter` as
    /// `evidence[N].filter`) as one expression of `grammar`, the engine's SQL grammar
    /// (`dialect.sql_parser_dialect()`); `engine` is the engine's name for the message
    /// (`dialect.name()`: `postgres`, `mysql`, `sqlite`). The mapping knows no dialect: the
    /// caller passes what the check needs. Called once, where the command learns the dialect and
    /// before it connects.
    ///
    /// Errors (exit 2): `origin:line:col: section.key: … does not parse as a … expression: …`
    /// for the first predicate that does not parse or leaves text after its expression.
    pub fn check_predicates(
        &self,
        grammar: &dyn sqlparser::dialect::Dialect,
        engine: &str,
    ) -> anyhow::Result<()> {
        for p in &self.predicates {
            parse_predicate(grammar, &p.text).map_err(|why| {
                input_error(format!(
                    "{}: {}: {:?} does not parse as a {} expression: {why}",
                    p.at, p.key, p.text, engine
                ))
            })?;
        }
        Ok(())
    }
}

/// Parses `text` as one SQL expression of `dialect`, the whole input consumed.
///
/// Errors: the parser's message, or the token found after a complete expression.
pub fn parse_predicate(
    dialect: &dyn sqlparser::dialect::Dialect,
    text: &str,
) -> Result<(), String> {
    let mut parser = Parser::new(dialect)
        .try_with_sql(text)
        .map_err(|e| e.to_string())?;
    parser.parse_expr().map_err(|e| e.to_string())?;
    match parser.peek_token().token {
        Token::EOF => Ok(()),
        t => Err(format!("unexpected {t} after the expression")),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_predicate;
    use sqlparser::dialect::{MySqlDialect, PostgreSqlDialect, SQLiteDialect};

    #[test]
    fn one_expression_whole_input() {
        for d in [
            &PostgreSqlDialect {} as &dyn sqlparser::dialect::Dialect,
            &MySqlDialect {},
            &SQLiteDialect {},
        ] {
            assert!(parse_predicate(d, "deleted_at IS NULL AND kind <> 'system'").is_ok());
            assert!(parse_predicate(d, "kind NOT IN ('a', 'b') OR (x = 1)").is_ok());
            assert!(parse_predicate(d, "is_deleted = 0)").is_err());
            assert!(parse_predicate(d, "is_deleted = ").is_err());
            assert!(parse_predicate(d, "a = 1 b").is_err());
            assert!(parse_predicate(d, "").is_err());
        }
    }
}
