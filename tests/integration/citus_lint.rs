//! The PostgreSQL statements against what Citus cannot run on distributed tables (issue 21),
//! with no Citus server: every statement the preflight, the evidence share, the batch bounds,
//! the backfill, the audit, the contract's checks and archive, `inspect`'s sampled measures and
//! `tidemark sql app` send over the chat tables, rendered for PostgreSQL, is read token by token for the four forms
//! Citus refuses (measured on Citus 13.2.2 with the chat tables distributed by conversation):
//!
//! 1. a correlated subquery whose enclosing FROM reads a CTE (directly or through a derived
//!    table) or a derived table with a LIMIT of its own: "correlated subqueries are not
//!    supported when the FROM clause contains a CTE or subquery" (the CTE, or the LIMIT's
//!    rows, become an intermediate result on the coordinator; the evidence share's form
//!    before issue 29 row 20);
//! 2. a statement that joins tidemark's local tables (the ledger, the drift rows, the migration
//!    history, which stay on the coordinator) with a chat table or a distributed tidemark table:
//!    "direct joins between distributed and local tables are not supported";
//! 3. a function that is not IMMUTABLE (`now()`, `CURRENT_TIMESTAMP`, `random()`…) in the `DO
//!    UPDATE SET` of an upsert: "functions used in the DO UPDATE SET clause of INSERTs on
//!    distributed tables must be marked IMMUTABLE";
//! 4. several statements in one prepared call: "cannot insert multiple commands into a prepared
//!    statement".
//!
//! The lint is checked on the forms it must catch (the statements tidemark sent before issue
//! 21) as well as on tidemark's own.

use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::tokenizer::{Token, Tokenizer};
use std::collections::BTreeSet;

use tidemark::dialect::{render, Dialect, SqlContext};
use tidemark::legacy_schema as scenario;
use tidemark::mapping::{Mapping, Shape};

/// tidemark's tables that stay on the coordinator (never distributed by `expand`).
const LOCAL_TABLES: [&str; 4] = [
    "tidemark_ledger",
    "tidemark_drift_rows",
    "tidemark_schema_history",
    "tidemark_lock",
];

/// Functions whose value changes between calls or rows: not IMMUTABLE.
const MUTABLE: [&str; 11] = [
    "now",
    "current_timestamp",
    "clock_timestamp",
    "statement_timestamp",
    "transaction_timestamp",
    "localtimestamp",
    "current_date",
    "current_time",
    "timeofday",
    "random",
    "nextval",
];

/// Words that end a FROM clause.
const FROM_ENDS: [&str; 11] = [
    "where",
    "group",
    "order",
    "having",
    "limit",
    "union",
    "window",
    "values",
    "returning",
    "offset",
    "except",
];

/// Words of a FROM clause that are neither a table nor an alias.
const FROM_WORDS: [&str; 11] = [
    "join", "left", "right", "inner", "outer", "full", "cross", "lateral", "as", "natural", "only",
];

/// A parenthesised group of tokens: `[start, end)` inside the parentheses.
#[derive(Debug, Default)]
struct Group {
    start: usize,
    end: usize,
    parent: Option<usize>,
    /// Aliases (and table names) its own FROM clauses define, lower case.
    defines: BTreeSet<String>,
    /// Whether its own FROM reads a CTE, directly or inside a derived table.
    reads_cte: bool,
    /// Whether it is a query (starts with SELECT or WITH; the whole statement is one).
    query: bool,
}

/// A token's word, lower case (quoted names unquoted), or None.
fn word(t: &Token) -> Option<String> {
    match t {
        Token::Word(w) => Some(w.value.to_ascii_lowercase()),
        _ => None,
    }
}

/// The findings of the four rules for one statement, in words; empty when Citus can run it.
/// `tables`: the chat tables and tidemark's distributed tables, lower case, unquoted.
fn findings(sql: &str, tables: &[String]) -> Vec<String> {
    let dialect = PostgreSqlDialect {};
    let tokens: Vec<Token> = Tokenizer::new(&dialect, sql)
        .tokenize()
        .unwrap_or_else(|e| panic!("tokenizing {sql}: {e}"))
        .into_iter()
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .collect();
    let mut out = Vec::new();
    // Rule 4: one statement.
    let semis = tokens
        .iter()
        .enumerate()
        .filter(|(i, t)| matches!(t, Token::SemiColon) && *i + 1 < tokens.len())
        .count();
    if semis > 0 {
        out.push(format!("{} statements in one call", semis + 1));
    }
    // Rule 2: local tables beside distributed ones.
    let words: BTreeSet<String> = tokens.iter().filter_map(word).collect();
    let local: Vec<&str> = LOCAL_TABLES
        .iter()
        .copied()
        .filter(|t| words.contains(*t))
        .collect();
    let distributed: Vec<&String> = tables.iter().filter(|t| words.contains(*t)).collect();
    if !local.is_empty() && !distributed.is_empty() {
        out.push(format!(
            "joins the local {local:?} with the distributed {distributed:?}"
        ));
    }
    // Rule 3: DO UPDATE SET without mutable functions.
    for i in 0..tokens.len().saturating_sub(2) {
        let w: Vec<Option<String>> = tokens[i..i + 3].iter().map(word).collect();
        if w == [Some("do".into()), Some("update".into()), Some("set".into())] {
            for t in &tokens[i + 3..] {
                if let Some(f) = word(t).filter(|f| MUTABLE.contains(&f.as_str())) {
                    out.push(format!("{f} in DO UPDATE SET"));
                }
            }
        }
    }
    out.extend(correlated_over_cte(&tokens));
    out
}

/// Rule 1 over the tokens of one statement (whitespace left out).
fn correlated_over_cte(tokens: &[Token]) -> Vec<String> {
    // The CTE names: `name AS [NOT] [MATERIALIZED] (`.
    let mut ctes = BTreeSet::new();
    for i in 0..tokens.len() {
        if word(&tokens[i]).as_deref() != Some("as") || i == 0 {
            continue;
        }
        let mut j = i + 1;
        while matches!(word(&tokens[j]).as_deref(), Some("not" | "materialized")) {
            j += 1;
        }
        if matches!(tokens.get(j), Some(Token::LParen)) {
            if let Some(name) = word(&tokens[i - 1]) {
                ctes.insert(name);
            }
        }
    }
    // The groups and, for each token, the innermost group holding it.
    let mut groups = vec![Group {
        start: 0,
        end: tokens.len(),
        query: true,
        ..Default::default()
    }];
    let mut owner = vec![0usize; tokens.len()];
    let mut stack = vec![0usize];
    for (i, t) in tokens.iter().enumerate() {
        match t {
            Token::LParen => {
                owner[i] = *stack.last().unwrap();
                let first = tokens.get(i + 1).and_then(word);
                groups.push(Group {
                    start: i + 1,
                    end: tokens.len(),
                    parent: Some(*stack.last().unwrap()),
                    query: matches!(first.as_deref(), Some("select" | "with")),
                    ..Default::default()
                });
                stack.push(groups.len() - 1);
            }
            Token::RParen => {
                let g = stack.pop().expect("balanced parentheses");
                groups[g].end = i;
                owner[i] = *stack.last().unwrap();
            }
            _ => owner[i] = *stack.last().unwrap(),
        }
    }
    // Each group's own FROM clauses.
    for g in 0..groups.len() {
        let (mut defines, mut reads_cte) = (BTreeSet::new(), false);
        let mut i = groups[g].start;
        let mut in_from = false;
        let mut after_on = false;
        while i < groups[g].end {
            if owner[i] != g && !matches!(tokens[i], Token::LParen) {
                i += 1;
                continue;
            }
            let w = word(&tokens[i]);
            match (&tokens[i], w.as_deref()) {
                (_, Some("from")) => (in_from, after_on) = (true, false),
                (_, Some(end)) if in_from && FROM_ENDS.contains(&end) => in_from = false,
                (_, Some("on")) if in_from => after_on = true,
                (_, Some("join")) if in_from => after_on = false,
                (Token::Comma, _) if in_from && !after_on => {}
                (Token::LParen, _) => {
                    // A derived table (in FROM, not after ON) or any other group: skip it.
                    let child = (g + 1..groups.len())
                        .find(|&c| groups[c].start == i + 1)
                        .expect("the group opened here");
                    if in_from && !after_on {
                        let (start, end) = (groups[child].start, groups[child].end);
                        let text = &tokens[start..end];
                        reads_cte |= text.iter().filter_map(word).any(|x| ctes.contains(&x));
                        // A LIMIT of the derived table itself: Citus computes its rows first.
                        reads_cte |= (start..end).any(|k| {
                            owner[k] == child && word(&tokens[k]).as_deref() == Some("limit")
                        });
                        if let Some(alias) = alias_after(tokens, groups[child].end + 1) {
                            defines.insert(alias);
                        }
                    }
                    i = groups[child].end;
                }
                (_, Some(name)) if in_from && !after_on && !FROM_WORDS.contains(&name) => {
                    // A table: name parts, then its alias.
                    let mut j = i;
                    let mut last = name.to_string();
                    defines.insert(last.clone());
                    while matches!(tokens.get(j + 1), Some(Token::Period)) {
                        j += 2;
                        last = word(&tokens[j]).unwrap_or_default();
                        defines.insert(last.clone());
                    }
                    reads_cte |= ctes.contains(&last);
                    if let Some(alias) = alias_after(tokens, j + 1) {
                        defines.insert(alias);
                        j += 1;
                    }
                    i = j;
                }
                _ => {}
            }
            i += 1;
        }
        groups[g].defines = defines;
        groups[g].reads_cte = reads_cte;
    }
    let inside = |g: usize, mut h: usize| loop {
        if h == g {
            return true;
        }
        match groups[h].parent {
            Some(p) => h = p,
            None => return false,
        }
    };
    let mut out = Vec::new();
    for s in 1..groups.len() {
        if !groups[s].query {
            continue;
        }
        let defined: BTreeSet<&String> = (s..groups.len())
            .filter(|&h| inside(s, h))
            .flat_map(|h| groups[h].defines.iter())
            .collect();
        let used: BTreeSet<String> = (groups[s].start..groups[s].end)
            .filter(|&i| matches!(tokens.get(i + 1), Some(Token::Period)))
            .filter_map(|i| word(&tokens[i]))
            .filter(|q| !defined.contains(q) && q != "excluded")
            .collect();
        for q in used {
            let mut a = groups[s].parent;
            while let Some(g) = a {
                if groups[g].defines.contains(&q) {
                    if groups[g].reads_cte {
                        out.push(format!(
                            "a subquery correlated with `{q}` over a FROM that reads a CTE or a LIMIT's rows"
                        ));
                    }
                    break;
                }
                a = groups[g].parent;
            }
        }
    }
    out
}

/// The alias at `i` (after `AS`, or a bare word that is no keyword of the FROM clause).
fn alias_after(tokens: &[Token], i: usize) -> Option<String> {
    let w = word(tokens.get(i)?)?;
    if w == "as" {
        return word(tokens.get(i + 1)?);
    }
    let keyword = FROM_WORDS.contains(&w.as_str())
        || FROM_ENDS.contains(&w.as_str())
        || matches!(w.as_str(), "on" | "using" | "set" | "select" | "do");
    (!keyword).then_some(w)
}

/// The mappings checked: the scenario schema per member (settle guard and own messages on)
/// and per message, as `tests/integration/citus.rs` runs them on Citus.
fn mappings() -> Vec<(&'static str, Mapping)> {
    let with_time = |text: String| {
        text.replace(
            "sender = \"sender_id\"\n",
            "sender = \"sender_id\"\ncreated_at = \"created_at\"\n",
        )
    };
    [
        (
            "per_member",
            with_time(scenario::mapping_toml(Shape::PerMember, true)),
        ),
        (
            "per_message",
            with_time(scenario::mapping_toml(Shape::PerMessage, true)),
        ),
        (
            "per_member, no created_at",
            scenario::mapping_toml(Shape::PerMember, false),
        ),
    ]
    .into_iter()
    .map(|(what, text)| (what, Mapping::parse(&text, what).unwrap()))
    .collect()
}

/// Every statement a run sends for `mapping` on PostgreSQL, with what it is.
fn statements(mapping: &Mapping) -> Vec<(String, String)> {
    let d = Dialect::Postgres;
    let ctx = SqlContext::new(mapping, d);
    let mut out: Vec<(String, String)> = Vec::new();
    for (what, sql) in tidemark::stages::backfill::statements(mapping, d).unwrap() {
        out.push((format!("backfill: {what}"), sql));
    }
    for (what, sql) in tidemark::stages::audit::statements(mapping, d, None).unwrap() {
        out.push((format!("audit: {what}"), sql));
    }
    for s in tidemark::app_sql::statements(mapping, d, 50).unwrap() {
        out.push((format!("sql app: {}", s.name), s.sql));
    }
    let per_member = mapping.counter.shape == Shape::PerMember;
    let (conv, subject, subject_col) = if per_member {
        ("\"conv_id\"", "\"user_id\"", "user_id")
    } else {
        ("\"conv_id\"", "\"id\"", "message_id")
    };
    let keys = minijinja::context! {
        param => "$1",
        p => (1..=5).map(|n| format!("${n}")).collect::<Vec<_>>(),
        range => tidemark::dialect::RangeParams { lo: Some("$6".into()), hi: Some("$7".into()), ..Default::default() },
        key_conv => conv, key_subject => subject, subject_col => subject_col,
        side => "archive", exact_type => "NUMERIC", text_type => "TEXT",
    };
    for name in [
        "contract_archive.sql",
        "contract_missing.sql",
        "contract_checksum.sql",
        "contract_key_duplicates.sql",
    ] {
        out.push((
            format!("contract: {name}"),
            render(name, &ctx, keys.clone()).unwrap(),
        ));
    }
    out.push((
        "contract: contract_archive_rows.sql".into(),
        render(
            "contract_archive_rows.sql",
            &ctx,
            minijinja::context! { p => ["$1", "$2"], subject_col => subject_col, limit => 1000 },
        )
        .unwrap(),
    ));
    for (what, sql) in tidemark::schema::statements::statements(mapping, d).unwrap() {
        out.push((what, sql));
    }
    let range = tidemark::dialect::RangeParams {
        lo: Some("$1".into()),
        hi: Some("$2".into()),
        ..Default::default()
    };
    for unit in ["subjects", "counters", "messages"] {
        let vars = minijinja::context! { range => range.clone(), unit => unit, limit => 1000 };
        out.push((
            format!("batch bounds: {unit}"),
            render("batch_bounds.sql", &ctx, vars).unwrap(),
        ));
    }
    out
}

/// `inspect`'s sampled measures (`inspect_fit.sql`, every mode) over the scenario schema.
fn inspect_statements() -> Vec<(String, String)> {
    use tidemark::inspect::checks::{fit_sql, FitTables};
    let messages = FitTables {
        mt: "\"messages\"".into(),
        mc: "\"conv_id\"".into(),
        mp: "\"id\"".into(),
        mt_created: "\"created_at\"".into(),
        ..Default::default()
    };
    let of = |et: &str, ev: &str| FitTables {
        et: format!("\"{et}\""),
        ec: "\"conv_id\"".into(),
        ev: format!("\"{ev}\""),
        ..messages.clone()
    };
    [
        ("position", of("read_receipts", "message_id")),
        ("time", of("read_receipts", "message_id")),
        ("range", of("unread_counters", "unread_count")),
        ("order", messages.clone()),
    ]
    .into_iter()
    .map(|(mode, t)| {
        (
            format!("inspect: {mode}"),
            fit_sql(Dialect::Postgres, mode, &t).unwrap(),
        )
    })
    .collect()
}

#[test]
fn rendered_postgres_statements_have_no_form_citus_refuses() {
    let mut bad = Vec::new();
    for (what, mapping) in mappings() {
        let tables: Vec<String> = [
            "messages",
            "members",
            "unread_counters",
            "read_receipts",
            scenario::WATERMARK_TABLE,
            "tidemark_counter_archive",
        ]
        .map(String::from)
        .to_vec();
        let mut statements = statements(&mapping);
        assert!(statements.len() >= 8, "{what}: {statements:?}");
        for want in ["evidence share: ", "preflight: ", "batch bounds: "] {
            assert!(
                statements.iter().any(|(name, _)| name.starts_with(want)),
                "{what}: no {want}statement"
            );
        }
        statements.extend(inspect_statements());
        for (name, sql) in statements {
            // The index-probe form runs only when asked (`--audit-form probe`): `auto` never
            // picks it on PostgreSQL, Citus included (Postgres::probes_by_range).
            if name.contains("index-probe form") {
                continue;
            }
            for f in findings(&sql, &tables) {
                bad.push(format!("{what}, {name}: {f}"));
            }
        }
    }
    assert!(bad.is_empty(), "forms Citus refuses:\n{}", bad.join("\n"));
}

#[test]
fn the_lint_catches_the_forms_citus_refuses() {
    let tables = vec!["messages".to_string(), "read_watermarks".to_string()];
    let cases = [
        // The backfill's settle guard before issue 21.
        ("WITH tm_subj AS (SELECT conv_id AS conv FROM members) SELECT tm_c.conv, CASE WHEN NOT EXISTS (SELECT 1 FROM messages tm_recent WHERE tm_recent.conv_id = tm_c.conv AND tm_recent.created_at > 5) THEN 0 ELSE 1 END FROM (SELECT DISTINCT tm_subj.conv AS conv FROM tm_subj) tm_c", "correlated with `tm_c`"),
        // The per-message audit's own_after before issue 21.
        ("WITH tm_d AS (SELECT conv_id AS conv, sender_id AS sender FROM messages) SELECT CASE WHEN EXISTS (SELECT 1 FROM members this WHERE this.conv_id = tm_r.conv AND this.user_id = tm_r.sender) THEN 1 ELSE 0 END FROM tm_d tm_r", "correlated with `tm_r`"),
        ("INSERT INTO read_watermarks (user_id, conversation_id, last_read_id) VALUES ($1, $2, $3) ON CONFLICT (user_id, conversation_id) DO UPDATE SET updated_at = now(), last_read_id = GREATEST(read_watermarks.last_read_id, EXCLUDED.last_read_id)", "now in DO UPDATE SET"),
        ("SELECT COUNT(*) FROM messages m JOIN tidemark_ledger l ON l.id = m.id", "joins the local"),
        ("CREATE INDEX a ON messages (conv_id); CREATE INDEX b ON messages (id)", "2 statements"),
        // The evidence share before issue 29 row 20: a correlated EXISTS over a LIMIT's rows.
        ("SELECT COUNT(*) AS measured, SUM(CASE WHEN tm_v.v = 0 OR EXISTS (SELECT 1 FROM messages tm_m WHERE tm_m.conv_id = tm_v.conv AND tm_m.id = tm_v.v) THEN 1 ELSE 0 END) AS fits FROM (SELECT this.conv_id AS conv, this.message_id AS v FROM read_receipts this WHERE this.message_id IS NOT NULL LIMIT 10000) tm_v", "correlated with `tm_v`"),
    ];
    for (sql, want) in cases {
        let found = findings(sql, &tables);
        assert!(
            found.iter().any(|f| f.contains(want)),
            "{want} not found in {found:?} for {sql}"
        );
    }
    // What Citus runs: a correlated subquery over a plain table, a LEFT JOIN … IS NULL over
    // a CTE, and EXCLUDED in DO UPDATE SET.
    for sql in [
        "SELECT COUNT(*) FROM (SELECT conv_id AS conv, user_id AS usr FROM members) tm_r WHERE NOT EXISTS (SELECT 1 FROM read_watermarks tm_w WHERE tm_w.user_id = tm_r.usr AND tm_w.conversation_id = tm_r.conv)",
        "WITH s AS (SELECT conv_id AS conv FROM members) SELECT s.conv FROM s LEFT JOIN (SELECT DISTINCT r.conv_id AS conv FROM messages r) q ON q.conv = s.conv WHERE q.conv IS NULL",
        "INSERT INTO read_watermarks (user_id) VALUES ($1) ON CONFLICT (user_id) DO UPDATE SET updated_at = EXCLUDED.updated_at",
    ] {
        assert_eq!(findings(sql, &tables), Vec::<String>::new(), "{sql}");
    }
}
