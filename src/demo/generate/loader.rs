//! Loading the generated rows: multi-row `INSERT`s in transactions of about
//! [`ROWS_PER_TRANSACTION`] rows.

use anyhow::{Context, Result};
use sqlx::AnyConnection;

use crate::dialect::Dialect;

/// Rows per multi-row `INSERT` statement.
const ROWS_PER_STATEMENT: usize = 1000;
/// Rows per transaction (a commit happens at the first statement boundary past this).
const ROWS_PER_TRANSACTION: u64 = 50_000;

/// Accumulates rows into multi-row `INSERT` statements.
pub(super) struct Table {
    pub(super) head: &'static str,
    pub(super) body: String,
    pub(super) rows: usize,
}

impl Table {
    pub(super) fn new(head: &'static str) -> Table {
        Table {
            head,
            body: String::new(),
            rows: 0,
        }
    }
}

/// Buffers the rows of one conversation (and less than one statement per table carried over)
/// and runs them in transactions of about [`ROWS_PER_TRANSACTION`] rows.
pub(super) struct Loader {
    pub(super) dialect: Dialect,
    pub(super) tables: [Table; 4],
    pub(super) ready: Vec<(String, usize)>,
    pub(super) in_tx: u64,
    pub(super) open: bool,
}

pub(super) const T_MESSAGES: usize = 0;
pub(super) const T_MEMBERS: usize = 1;
pub(super) const T_COUNTERS: usize = 2;
pub(super) const T_RECEIPTS: usize = 3;

impl Loader {
    pub(super) fn new(dialect: Dialect) -> Loader {
        Loader {
            dialect,
            tables: [
                Table::new(
                    "INSERT INTO messages (conv_id, id, sender_id, is_deleted, is_system, created_at, unread_count) VALUES ",
                ),
                Table::new("INSERT INTO members (conv_id, user_id, active, join_position) VALUES "),
                Table::new("INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES "),
                Table::new("INSERT INTO read_receipts (conv_id, user_id, message_id) VALUES "),
            ],
            ready: Vec::new(),
            in_tx: 0,
            open: false,
        }
    }

    /// Starts a row of table `t`; the caller writes the row's text (with parentheses) into the
    /// returned buffer.
    pub(super) fn row(&mut self, t: usize) -> &mut String {
        if self.tables[t].rows == ROWS_PER_STATEMENT {
            self.seal(t);
        }
        let table = &mut self.tables[t];
        if table.rows == 0 {
            table.body.push_str(table.head);
        } else {
            table.body.push_str(", ");
        }
        table.rows += 1;
        &mut table.body
    }

    pub(super) fn seal(&mut self, t: usize) {
        let table = &mut self.tables[t];
        if table.rows > 0 {
            self.ready
                .push((std::mem::take(&mut table.body), table.rows));
            table.rows = 0;
        }
    }

    pub(super) async fn exec(conn: &mut AnyConnection, sql: &str) -> Result<()> {
        sqlx::raw_sql(sql).execute(&mut *conn).await?;
        Ok(())
    }

    /// Runs the sealed statements, committing every [`ROWS_PER_TRANSACTION`] rows.
    pub(super) async fn drain(&mut self, conn: &mut AnyConnection) -> Result<()> {
        for (sql, rows) in std::mem::take(&mut self.ready) {
            if !self.open {
                Self::exec(conn, self.dialect.admin().generator_begin()).await?;
                self.open = true;
            }
            Self::exec(conn, &sql).await.with_context(|| {
                format!(
                    "generate: loading {}",
                    sql.chars().take(60).collect::<String>()
                )
            })?;
            self.in_tx += rows as u64;
            if self.in_tx >= ROWS_PER_TRANSACTION {
                Self::exec(conn, "COMMIT").await?;
                self.open = false;
                self.in_tx = 0;
            }
        }
        Ok(())
    }

    /// Seals every partial statement, runs everything and commits.
    pub(super) async fn finish(&mut self, conn: &mut AnyConnection) -> Result<()> {
        for t in 0..self.tables.len() {
            self.seal(t);
        }
        self.drain(conn).await?;
        if self.open {
            Self::exec(conn, "COMMIT").await?;
            self.open = false;
        }
        Ok(())
    }
}
