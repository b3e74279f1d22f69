//! Stage 1, expand: the versioned migrations that create the watermark table and tidemark's
//! ledger, applied with refinery through [`crate::migrate::SqlxMigrator`]. The migration files
//! are the dialect's ([`crate::dialect::Spelling::migrations`], `migrations/<dialect>/`).

use anyhow::{Context, Result};
use refinery_core::{Migration, Runner};
use sqlx::AnyConnection;

use crate::dialect::{Colocation, Dialect, SqlContext};
use crate::error::input_error;
use crate::mapping::Mapping;
use crate::migrate::SqlxMigrator;
use crate::schema;
use crate::tables::{ARCHIVE_TABLE, HISTORY_TABLE};

/// What `expand` did or would do.
#[derive(Debug, Clone)]
pub struct ExpandReport {
    /// Migrations already applied before this run, by name (`V1__watermarks`…).
    pub already_applied: Vec<String>,
    /// Migrations this run applied (or, in a dry run, would apply), with their SQL.
    pub pending: Vec<(String, String)>,
    /// Whether anything was written.
    pub dry_run: bool,
    /// The preflight's notices: the key columns whose collations differ (issue 25,
    /// [`crate::schema::KeyCollations::notice`]); empty when there is nothing to say.
    pub notices: Vec<String>,
    /// Where the chat tables are spread over nodes (Citus, issue 21): how tidemark's tables
    /// were placed beside them (in a dry run, would be), one sentence each
    /// ([`crate::dialect::Distribution::colocate`]); empty on one server.
    pub distribution: Vec<String>,
}

/// Renders the migrations for this mapping: the watermark table's name and the legacy key types
/// read from the schema.
///
/// Errors (exit 2): a key column that is missing or of an unusable type.
pub async fn migrations(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
) -> Result<Vec<Migration>> {
    let ctx = SqlContext::new(mapping, dialect);
    let (user, conv) = schema::watermark_key_types(conn, mapping, &ctx).await?;
    let index_name = format!("{}_by_conversation", ctx.wm_name);
    let table_schema = mapping
        .watermarks
        .table
        .split_once('.')
        .map(|(schema, _)| schema);
    let wm_index = dialect.index_name(table_schema, &index_name);
    let mut env = minijinja::Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    let vars = minijinja::context! {
        wm => ctx.wm,
        wm_table => dialect.quote(&ctx.wm_name),
        wm_index => wm_index,
        user_type => user.ddl,
        conv_type => conv.ddl,
    };
    let mut out = Vec::new();
    for &(name, source) in dialect.migrations() {
        let sql = env
            .render_str(source, vars.clone())
            .with_context(|| format!("rendering migration {name}"))?;
        out.push(
            Migration::unapplied(name, &sql)
                .map_err(|e| anyhow::anyhow!("migration {name}: {e}"))?,
        );
    }
    Ok(out)
}

/// Applies the pending migrations (or with `dry_run`, lists them and changes nothing). A
/// second run applies nothing.
///
/// Errors: exit 2 when an applied migration differs from this mapping's (the watermark table
/// was created for another mapping) or the schema is unusable; exit 3 on database failure.
pub async fn run(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
    dry_run: bool,
) -> Result<ExpandReport> {
    let collations = schema::preflight(conn, mapping, dialect).await?;
    let wanted = migrations(conn, mapping, dialect).await?;
    let applied = applied(conn, dialect).await?;
    for app in &applied {
        if let Some(w) = wanted.iter().find(|w| w.version() == app.version()) {
            if w.checksum() != app.checksum() {
                return Err(input_error(format!(
                    "migration {} was applied with different SQL (checksum {} in {HISTORY_TABLE}, {} for this mapping): was the watermark table created for another mapping?",
                    w, app.checksum(), w.checksum()
                )));
            }
        }
    }
    let pending: Vec<(String, String)> = wanted
        .iter()
        .filter(|w| !applied.iter().any(|a| a.version() == w.version()))
        .map(|w| (w.to_string(), w.sql().unwrap_or_default().to_string()))
        .collect();
    let mut report = ExpandReport {
        already_applied: applied.iter().map(|a| a.to_string()).collect(),
        pending,
        dry_run,
        notices: collations.notices(),
        distribution: Vec::new(),
    };
    if dry_run || report.pending.is_empty() {
        report.distribution = colocate(conn, mapping, dialect, dry_run).await?;
        return Ok(report);
    }
    let mut runner = Runner::new(&wanted);
    runner.set_migration_table_name(HISTORY_TABLE);
    let runner = runner.set_abort_divergent(true).set_abort_missing(true);
    let mut target = SqlxMigrator {
        conn,
        transactional_ddl: dialect.sessions().transactional_ddl(),
    };
    runner
        .run_async(&mut target)
        .await
        .map_err(|e| anyhow::anyhow!("applying migrations: {e}"))?;
    report.distribution = colocate(conn, mapping, dialect, false).await?;
    Ok(report)
}

/// Places tidemark's per-conversation tables beside the chat tables where the engine spreads
/// them over nodes ([`crate::dialect::Distribution::colocate`]: the messages table first, then
/// the members and the counter tables), after the migrations; what was done, in words.
async fn colocate(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    dialect: Dialect,
    dry_run: bool,
) -> Result<Vec<String>> {
    let mut chat = vec![(
        mapping.messages.table.clone(),
        mapping.messages.conversation.clone(),
    )];
    if let Some(members) = &mapping.members {
        chat.push((members.table.clone(), members.conversation.clone()));
    }
    if let (Some(table), Some(conv)) = (&mapping.counter.table, &mapping.counter.conversation) {
        chat.push((table.clone(), conv.clone()));
    }
    let plan = Colocation {
        chat,
        watermarks: mapping.watermarks.table.clone(),
        archive: ARCHIVE_TABLE.to_string(),
    };
    dialect.distribution().colocate(conn, &plan, dry_run).await
}

/// The migrations recorded in `tidemark_schema_history` (empty when the table does not exist).
pub async fn applied(conn: &mut AnyConnection, dialect: Dialect) -> Result<Vec<Migration>> {
    if !crate::db::catalog::table_exists(conn, dialect, HISTORY_TABLE).await? {
        return Ok(Vec::new());
    }
    let mut target = SqlxMigrator {
        conn,
        transactional_ddl: false,
    };
    use refinery_core::traits::r#async::AsyncMigrate;
    target
        .get_applied_migrations(HISTORY_TABLE)
        .await
        .map_err(|e| anyhow::anyhow!("reading {HISTORY_TABLE}: {e}"))
}
