//! The queries over the data that `inspect` runs: the facts its choice needs (which counter
//! columns hold values, which values a membership column takes) and the counts behind its
//! warnings. Every query is one set-based statement over quoted identifiers from the catalog.

use anyhow::{Context, Result};
use sqlx::{AnyConnection, Row};

use super::catalog::Catalog;
use super::propose::{self, Facts, MessagesCandidate, Proposal};
use super::structure;
use super::warning::Warning;
use crate::dialect::Dialect;
use crate::mapping::{EvidenceKind, Shape};
use crate::values::text;

/// At most this many distinct values of a membership column are read.
const MAX_VALUES: usize = 12;

async fn count(conn: &mut AnyConnection, sql: &str) -> Result<u64> {
    let row = sqlx::query(sql)
        .persistent(false)
        .fetch_one(&mut *conn)
        .await
        .with_context(|| format!("inspect: {sql}"))?;
    Ok(row.try_get::<i64, _>(0).unwrap_or_default().max(0) as u64)
}

/// The facts [`propose::propose`] needs, for a first choice `first` (made without them): which
/// counter candidates hold values, the values of membership and kind columns, and on a
/// sample (issue 24) how well each read position fits each position candidate of the first
/// messages table, each last-read time its conversations, each counter candidate the range of
/// a count, and each position the creation order.
///
/// Errors (exit 3): a query of the catalog's values fails. A sampled measure that fails (a
/// comparison the engine refuses) is left out and said in the reasoning.
pub async fn facts(
    conn: &mut AnyConnection,
    dialect: Dialect,
    catalog: &Catalog,
    first: &Proposal,
) -> Result<Facts> {
    let q = |s: &str| dialect.quote(s);
    let mut facts = Facts::default();
    let messages = first.messages.as_ref().map(|m| m.table.as_str());
    for c in propose::counter_candidates(catalog, messages, &Facts::default()) {
        let sql = format!(
            "SELECT COUNT(*) FROM (SELECT 1 AS x FROM {} WHERE {} IS NOT NULL LIMIT 1) t",
            q(&c.table),
            q(&c.column)
        );
        let n = count(conn, &sql).await?;
        facts.has_values.insert((c.table, c.column), n > 0);
    }
    for (table, column) in propose::membership_value_columns(catalog) {
        let sql = format!(
            "SELECT DISTINCT CAST({c} AS {t}) FROM {tb} WHERE {c} IS NOT NULL ORDER BY 1 LIMIT {MAX_VALUES}",
            c = q(&column),
            t = dialect.text_type(),
            tb = q(&table)
        );
        let rows = sqlx::query(&sql)
            .persistent(false)
            .fetch_all(&mut *conn)
            .await
            .with_context(|| format!("inspect: {sql}"))?;
        let mut values = Vec::new();
        for r in &rows {
            if let Some(v) = text(r, 0)? {
                values.push(v);
            }
        }
        facts.values.insert((table, column), values);
    }
    kinds(conn, dialect, catalog, first, &mut facts).await?;
    if let Some(m) = &first.messages {
        sampled(conn, dialect, catalog, first, m, &mut facts).await;
    }
    Ok(facts)
}

/// The values of the kind columns (`post_type`) of every messages candidate, with their row
/// counts, most frequent first.
async fn kinds(
    conn: &mut AnyConnection,
    dialect: Dialect,
    catalog: &Catalog,
    first: &Proposal,
    facts: &mut Facts,
) -> Result<()> {
    let q = |s: &str| dialect.quote(s);
    for m in first.messages.iter().chain(&first.messages_alternatives) {
        let Some(t) = catalog.tables.iter().find(|t| t.name == m.table) else {
            continue;
        };
        for k in structure::kind_columns(t) {
            let sql = format!(
                "SELECT CAST({c} AS {tt}) AS v, COUNT(*) AS n FROM {tb} WHERE {c} IS NOT NULL \
                 GROUP BY {c} ORDER BY 2 DESC, 1 LIMIT {MAX_VALUES}",
                c = q(&k.name),
                tt = dialect.text_type(),
                tb = q(&t.name)
            );
            let rows = sqlx::query(&sql)
                .persistent(false)
                .fetch_all(&mut *conn)
                .await
                .with_context(|| format!("inspect: {sql}"))?;
            let mut values = Vec::new();
            for r in &rows {
                let n = r.try_get::<i64, _>(1).unwrap_or_default().max(0) as u64;
                values.push((text(r, 0)?.unwrap_or_default(), n));
            }
            facts.kinds.insert((t.name.clone(), k.name.clone()), values);
        }
    }
    Ok(())
}

/// What one sampled measure (`sql/common/inspect_fit.sql`) reads, every name quoted (empty
/// where its mode reads none): the messages table `mt`, its conversation `mc`, position `mp`
/// and creation time `mt_created`; the measured table `et`, its conversation `ec` and value
/// `ev`.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct FitTables {
    /// The messages table.
    pub mt: String,
    /// Its conversation column.
    pub mc: String,
    /// Its position column (modes `position`, `order`).
    pub mp: String,
    /// Its creation time column (modes `time`, `order`).
    pub mt_created: String,
    /// The measured table (modes `position`, `range`, `time`).
    pub et: String,
    /// Its conversation column.
    pub ec: String,
    /// Its measured column.
    pub ev: String,
}

/// The statement of one sampled measure: `mode` is `position`, `range`, `time` or `order`
/// (see `sql/common/inspect_fit.sql`); one row, (sampled, fitting). Public so that the Citus
/// lint (`tests/integration/citus_lint.rs`) reads what `inspect` sends.
///
/// Errors: a template that fails to render (a bug in tidemark).
pub fn fit_sql(dialect: Dialect, mode: &str, t: &FitTables) -> Result<String> {
    let vars = minijinja::context! {
        mode => mode,
        sample => crate::schema::evidence_share::SAMPLE_ROWS,
        conversations => crate::schema::evidence_share::SAMPLE_CONVERSATIONS,
        ..minijinja::Value::from_serialize(t)
    };
    crate::dialect::render_plain("inspect_fit.sql", dialect.name(), dialect.int_cast(), vars)
}

/// One sampled measure ([`fit_sql`]): (sampled, fitting), or None when the engine refuses the
/// statement (said in `explain`).
async fn fit(
    conn: &mut AnyConnection,
    dialect: Dialect,
    mode: &str,
    t: &FitTables,
    explain: &mut Vec<String>,
) -> Option<(u64, u64)> {
    let sql = fit_sql(dialect, mode, t).ok()?;
    match sqlx::query(&sql)
        .persistent(false)
        .fetch_one(&mut *conn)
        .await
    {
        Ok(row) => {
            let n = |i: usize| row.try_get::<i64, _>(i).unwrap_or_default().max(0) as u64;
            Some((n(0), n(1)))
        }
        Err(e) => {
            explain.push(format!("a sampled measure failed ({e}): {sql}"));
            None
        }
    }
}

/// The sampled measures against the first choice's messages table `m` (see [`facts`]).
async fn sampled(
    conn: &mut AnyConnection,
    dialect: Dialect,
    catalog: &Catalog,
    first: &Proposal,
    m: &MessagesCandidate,
    facts: &mut Facts,
) {
    let q = |s: &str| dialect.quote(s);
    let Some(t) = catalog.tables.iter().find(|t| t.name == m.table) else {
        return;
    };
    let mut explain = Vec::new();
    let positions: Vec<String> = structure::positions(t, &m.conversation, &m.sender)
        .into_iter()
        .filter(|p| p.integer)
        .map(|p| p.column)
        .collect();
    let messages = FitTables {
        mt: q(&m.table),
        mc: q(&m.conversation),
        mt_created: m.created_at.as_deref().map(q).unwrap_or_default(),
        ..Default::default()
    };
    for e in &first.evidence {
        let Some((et, _, ec, ev)) = &e.source else {
            continue;
        };
        let base = FitTables {
            et: q(et),
            ec: q(ec),
            ev: q(ev),
            ..messages.clone()
        };
        match e.kind {
            EvidenceKind::Position => {
                for p in &positions {
                    let tables = FitTables {
                        mp: q(p),
                        ..base.clone()
                    };
                    if let Some(x) = fit(conn, dialect, "position", &tables, &mut explain).await {
                        let key = (et.clone(), ev.clone(), m.table.clone(), p.clone());
                        facts.fits.insert(key, x);
                    }
                }
            }
            EvidenceKind::Timestamp if !base.mt_created.is_empty() => {
                if let Some(x) = fit(conn, dialect, "time", &base, &mut explain).await {
                    facts.times.insert((et.clone(), ev.clone()), x);
                }
            }
            _ => {}
        }
    }
    let mut ranged: Vec<(String, String, String)> = propose::range_columns(catalog)
        .into_iter()
        .filter(|(table, _, _)| *table != m.table)
        .collect();
    for c in propose::counter_candidates(catalog, Some(&m.table), &Facts::default()) {
        if let (true, Some((_, conv))) = (c.integer, &c.key) {
            ranged.push((c.table, conv.clone(), c.column));
        }
    }
    for (table, conv, column) in ranged {
        let tables = FitTables {
            et: q(&table),
            ec: q(&conv),
            ev: q(&column),
            ..messages.clone()
        };
        if let Some(x) = fit(conn, dialect, "range", &tables, &mut explain).await {
            facts.ranges.insert((table, column), x);
        }
    }
    if !messages.mt_created.is_empty() {
        for p in &positions {
            let tables = FitTables {
                mp: q(p),
                ..messages.clone()
            };
            if let Some(x) = fit(conn, dialect, "order", &tables, &mut explain).await {
                facts.order.insert((m.table.clone(), p.clone()), x);
            }
        }
    }
    facts.failed = explain;
}

/// The warnings for a proposal, counted.
///
/// Errors (exit 3): a query fails.
pub async fn warnings(
    conn: &mut AnyConnection,
    dialect: Dialect,
    catalog: &Catalog,
    p: &Proposal,
) -> Result<Vec<Warning>> {
    let q = |s: &str| dialect.quote(s);
    let mut out = Vec::new();
    if let Some(m) = &p.messages {
        let table = catalog.tables.iter().find(|t| t.name == m.table);
        let indexed = table.is_some_and(|t| {
            t.indexes
                .iter()
                .any(|i| !i.partial && i.starts_with(&[&m.conversation, &m.position]))
        });
        let is_view = table.is_some_and(|t| t.is_view);
        if is_view {
            out.push(Warning {
                message: format!(
                    "{} is a view: the table under it needs an index on (conversation, position) \
                     for the audit; inspect cannot see through the view",
                    m.table
                ),
                count: None,
                fix: None,
            });
        } else if !indexed {
            let rows = count(conn, &format!("SELECT COUNT(*) FROM {}", q(&m.table))).await?;
            let bare = table.map(|t| t.bare.clone()).unwrap_or_default();
            let schema = table.and_then(|t| t.schema.clone());
            out.push(Warning {
                message: format!(
                    "no index on {} ({}, {}): the audit and the backfill read each \
                     conversation's messages by position, a full scan of {rows} rows per batch",
                    m.table, m.conversation, m.position
                ),
                count: Some(rows),
                fix: Some(format!(
                    "CREATE INDEX {} ON {} ({}, {});",
                    dialect.index_name(
                        schema.as_deref(),
                        &format!("{bare}_{}_{}", m.conversation, m.position)
                    ),
                    q(&m.table),
                    q(&m.conversation),
                    q(&m.position)
                )),
            });
        }
        if !m.position_integer {
            let rows = count(conn, &format!("SELECT COUNT(*) FROM {}", q(&m.table))).await?;
            out.push(Warning {
                message: format!(
                    "the position {}.{} is {}, not an integer: watermarks compare positions as \
                     integers",
                    m.table, m.position, m.position_declared
                ),
                count: Some(rows),
                fix: Some(dialect.inspect_integer_fix(&q(&m.table), &q(&m.position))),
            });
        }
        if let (Some(created), true) = (&m.created_at, m.position_integer) {
            // Seed 000 §4: a row with a higher id but an earlier creation time than the row
            // before it committed out of id order; one set-based pass with LAG counts them.
            let sql = format!(
                "SELECT COUNT(*) FROM (SELECT {ca} AS created, \
                 LAG({ca}) OVER (PARTITION BY {cv} ORDER BY {id}) AS previous FROM {t}) x \
                 WHERE x.previous > x.created",
                ca = q(created),
                cv = q(&m.conversation),
                id = q(&m.position),
                t = q(&m.table)
            );
            let n = count(conn, &sql).await?;
            if n > 0 {
                out.push(Warning {
                    message: format!(
                        "{n} rows of {} have a {} earlier than the row before them in {} order \
                         (same {}): {} order is not commit order (a position is allocated at insert and \
                         becomes visible at commit), so a reader whose watermark passed a row \
                         before it committed never sees it as unread",
                        m.table, created, m.position, m.conversation, m.position
                    ),
                    count: Some(n),
                    fix: Some(format!(
                        "ALTER TABLE {} ADD COLUMN {} BIGINT;  -- a per-conversation sequence \
                         allocated under the conversation's row lock, then mapped as \
                         messages.id",
                        q(&m.table),
                        q("seq")
                    )),
                });
            }
        }
    }
    if let Some(c) = &p.counter {
        if !c.integer {
            let n = count(
                conn,
                &format!("SELECT COUNT({}) FROM {}", q(&c.column), q(&c.table)),
            )
            .await?;
            out.push(Warning {
                message: format!(
                    "the counter {}.{} is {}, not an integer: {n} stored values are compared \
                     with integer counts",
                    c.table, c.column, c.declared
                ),
                count: Some(n),
                fix: Some(dialect.inspect_integer_fix(&q(&c.table), &q(&c.column))),
            });
        }
        if let (Shape::PerMember, Some((user, conv))) = (c.shape, &c.key) {
            let table = catalog.tables.iter().find(|t| t.name == c.table);
            if table.is_some_and(|t| !t.is_view && !t.unique_on(&[user, conv])) {
                let n = count(
                    conn,
                    &format!(
                        "SELECT COUNT(*) FROM (SELECT {u}, {cv} FROM {t} GROUP BY {u}, {cv} \
                         HAVING COUNT(*) > 1) x",
                        u = q(user),
                        cv = q(conv),
                        t = q(&c.table)
                    ),
                )
                .await?;
                if n > 0 {
                    out.push(Warning {
                        message: format!(
                            "{n} ({user}, {conv}) pairs have more than one row in {}: the \
                             counter is not one value per member (threads? devices?): refused",
                            c.table
                        ),
                        count: Some(n),
                        fix: Some(format!(
                            "CREATE VIEW tidemark_unread_counts AS SELECT {u}, {cv}, {col} FROM \
                             {t} WHERE …;  -- one row per member, then map the view as [counter]",
                            u = q(user),
                            cv = q(conv),
                            col = q(&c.column),
                            t = q(&c.table)
                        )),
                    });
                }
            }
        }
    }
    out.extend(collation_warning(conn, dialect, p).await?);
    Ok(out)
}

/// The key columns of a proposal whose collations differ (issue 25), as one warning naming
/// each with its collation: the stages then read each batch by its conversations' keys and
/// compare keys byte for byte. None when each family of keys is in one collation.
///
/// Errors (exit 3): the catalog cannot be read.
async fn collation_warning(
    conn: &mut AnyConnection,
    dialect: Dialect,
    p: &Proposal,
) -> Result<Option<Warning>> {
    use crate::schema::{Family, KeyCollations};
    let mut columns: Vec<(String, String, Family)> = Vec::new();
    let mut add = |table: &str, column: &str, family: Family| {
        if !column.is_empty() && !columns.iter().any(|(t, c, _)| t == table && c == column) {
            columns.push((table.to_string(), column.to_string(), family));
        }
    };
    if let Some(m) = &p.messages {
        add(&m.table, &m.conversation, Family::Conversation);
        add(&m.table, &m.sender, Family::User);
    }
    if let Some(mb) = &p.members {
        add(&mb.table, &mb.conversation, Family::Conversation);
        add(&mb.table, &mb.user, Family::User);
    }
    if let Some((c, (user, conv))) = p.counter.as_ref().and_then(|c| Some((c, c.key.as_ref()?))) {
        add(&c.table, conv, Family::Conversation);
        add(&c.table, user, Family::User);
    }
    for (table, user, conv, _) in p.evidence.iter().filter_map(|e| e.source.as_ref()) {
        add(table, conv, Family::Conversation);
        add(table, user, Family::User);
    }
    let collations = KeyCollations::read_columns(conn, dialect, &columns).await?;
    Ok(collations.notice().map(|message| Warning {
        message,
        count: None,
        fix: None,
    }))
}
