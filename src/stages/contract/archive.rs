//! The archive: a target's values copied batch by batch into `tidemark_counter_archive`, its
//! verification (every row with its keys and value, and the checksums of the source and the
//! archive), and the CSV copy (`--archive FILE`).

use anyhow::{bail, Context, Result};
use serde::Serialize;
use sqlx::{AnyConnection, Row};
use std::path::Path;

use super::target::{Keys, Target};
use crate::db::tx::{begin_write, commit, rollback};
use crate::dialect::{render, SqlContext};
pub use crate::ledger::records::Checksum;
use crate::stages::batch::{next_batch, Key, Scope};
use crate::tables::ARCHIVE_TABLE;
use crate::values::{now_ms, text};

/// Rows per page when the archive is read back for its CSV copy.
const CSV_PAGE_ROWS: u64 = 5000;

/// The archive a run made.
#[derive(Debug, Clone, Serialize)]
pub struct ArchiveSummary {
    /// The archive table.
    pub table: String,
    /// The contract run (ledger id) whose rows they are.
    pub contract_id: i64,
    /// The audit that covered the values (the final audit).
    pub audit_id: Option<i64>,
    /// The checksum of the archived values, equal to the source's.
    pub checksum: Checksum,
    /// The CSV copy, if any.
    pub csv: Option<String>,
    /// Its SHA-256.
    pub csv_sha256: Option<String>,
}

/// Copies a target's values into the archive table as rows of contract run `contract_id`,
/// one transaction per batch of whole conversations (`ctx` is the target's:
/// [`super::target::keys_of`]).
pub async fn archive_rows(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    keys: &Keys,
    target: &Target,
    contract_id: i64,
    audit_id: Option<i64>,
    batch_size: u64,
) -> Result<()> {
    let d = ctx.dialect;
    let mut lo: Option<Key> = None;
    let mut done = 0u64;
    loop {
        let found = next_batch(
            conn,
            ctx,
            keys.unit,
            keys.conv_kind,
            lo.clone(),
            batch_size,
            &Scope::default(),
        )
        .await;
        let batch = match found {
            Ok(Some(batch)) => batch,
            Ok(None) => return Ok(()),
            Err(e) => return Err(stopped(e, target, contract_id, done, lo.as_ref(), None)),
        };
        let sql = render(
            "contract_archive.sql",
            ctx,
            minijinja::context! {
                p => (1..=5).map(|n| d.placeholder(n)).collect::<Vec<_>>(),
                range => batch.params(d, 6),
                key_conv => keys.conv.clone(),
                key_subject => (!keys.subject.is_empty()).then(|| keys.subject.clone()),
                subject_col => keys.subject_col,
            },
        )?;
        let written = async {
            begin_write(conn, d).await?;
            let q = sqlx::query(&sql)
                .bind(contract_id)
                .bind(audit_id)
                .bind(target.table.clone())
                .bind(target.column.clone())
                .bind(now_ms());
            match batch.bind(q).execute(&mut *conn).await {
                Ok(_) => commit(conn).await,
                Err(e) => {
                    rollback(conn).await;
                    Err(e.into())
                }
            }
        }
        .await;
        if let Err(e) = written {
            let hi = Some(&batch.hi);
            return Err(stopped(e, target, contract_id, done, lo.as_ref(), hi));
        }
        done += 1;
        lo = Some(batch.hi);
        super::test_pause::pause_at("archive").await;
    }
}

/// The error of an archive that stops in its batch `done + 1` (the conversations after `lo`
/// up to `hi`), with what is kept (issue 25, row 14): the target is untouched (nothing is
/// dropped before its archive verifies), and the batches archived so far stay under the run
/// (a new run archives anew under its own id).
fn stopped(
    e: anyhow::Error,
    target: &Target,
    contract_id: i64,
    done: u64,
    lo: Option<&Key>,
    hi: Option<&Key>,
) -> anyhow::Error {
    let range = crate::stages::batch::range_words(lo, hi);
    let what = target.describe();
    e.context(format!(
        "archiving {what} stopped in batch {}{range}: {what} is intact and nothing was dropped; the {done} batch(es) archived so far stay in {ARCHIVE_TABLE} under contract run #{contract_id}; run the same command again",
        done + 1
    ))
}

/// The checksum of a target's column (`side` "source", `contract_id` None) or of its rows in
/// one contract run's archive (`side` "archive", `contract_id` given; also for a target that
/// is gone).
pub async fn checksum(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    target: &Target,
    contract_id: Option<i64>,
) -> Result<Checksum> {
    let side = if contract_id.is_some() {
        "archive"
    } else {
        "source"
    };
    let sql = render(
        "contract_checksum.sql",
        ctx,
        minijinja::context! {
            side => side,
            param => ctx.dialect.placeholder(1),
            exact_type => ctx.dialect.exact_decimal(),
            text_type => ctx.dialect.text_type(),
            archive_of => archive_of(target),
        },
    )?;
    let mut q = sqlx::query(&sql);
    if let Some(id) = contract_id {
        q = q.bind(id);
    }
    let row = q
        .fetch_one(&mut *conn)
        .await
        .with_context(|| format!("computing the {side} checksum"))?;
    Ok(Checksum {
        rows: row.try_get("n")?,
        non_null: row.try_get("non_null")?,
        sum: normalise_decimal(&text(&row, "total")?.unwrap_or_default()),
        sum_squares: normalise_decimal(&text(&row, "squares")?.unwrap_or_default()),
    })
}

/// Verifies a target's archive of contract run `contract_id`: no row of the column is missing
/// from it with the same keys and value ([`missing`]), and its checksum equals the column's.
/// Returns the archive's checksum.
///
/// Errors (exit 3): the archive does not verify (a value changed while archiving?), or the
/// database fails; nothing was dropped.
pub async fn verify(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    keys: &Keys,
    target: &Target,
    contract_id: i64,
) -> Result<Checksum> {
    let source = checksum(conn, ctx, target, None).await?;
    let archived = checksum(conn, ctx, target, Some(contract_id)).await?;
    let missing = missing(conn, ctx, keys, target, contract_id)
        .await
        .context("verifying the archive")?;
    if missing != 0 || source != archived {
        bail!(
            "the archive of {} (contract run #{contract_id}) does not verify: {missing} row(s) not archived with the same keys and value; source {source:?}, archive {archived:?} (a value changed while archiving?); {} not dropped",
            target.describe(),
            target.describe()
        );
    }
    Ok(archived)
}

/// How many rows of a target's column contract run `contract_id`'s archive does not hold with
/// the same keys and value (`contract_missing.sql`, one index lookup per row): 0 when every
/// value is in the archive where it came from; a permutation of values, which keeps every
/// checksum, counts. Read once the archive is written ([`verify`]) and again inside the drop's
/// lock ([`super::ddl`]).
///
/// Errors (exit 3): the database fails.
pub async fn missing(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    keys: &Keys,
    target: &Target,
    contract_id: i64,
) -> Result<i64> {
    let sql = render(
        "contract_missing.sql",
        ctx,
        minijinja::context! {
            param => ctx.dialect.placeholder(1),
            key_conv => keys.conv.clone(),
            key_subject => (!keys.subject.is_empty()).then(|| keys.subject.clone()),
            subject_col => keys.subject_col,
            archive_of => archive_of(target),
        },
    )?;
    Ok(sqlx::query_scalar(&sql)
        .bind(contract_id)
        .fetch_one(&mut *conn)
        .await?)
}

/// The target's table and column as SQL string literals (identifiers the mapping validated),
/// which pick its rows out of a run's archive.
fn archive_of(target: &Target) -> [String; 2] {
    let literal = |s: &str| format!("'{}'", s.replace('\'', "''"));
    [literal(&target.table), literal(&target.column)]
}

/// The audit that covered contract run `run`'s archive (its final audit), for a run that
/// resumes after it dropped a first target.
pub async fn audit_of_run(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    run: i64,
) -> Result<Option<i64>> {
    let sql = format!(
        "SELECT MAX(audit_id) AS id FROM {ARCHIVE_TABLE} WHERE contract_id = {}",
        ctx.dialect.placeholder(1)
    );
    Ok(sqlx::query_scalar(&sql)
        .bind(run)
        .fetch_one(&mut *conn)
        .await?)
}

/// An exact decimal as text without a fractional part of zeros (`12.000` is `12`).
fn normalise_decimal(s: &str) -> String {
    let s = s.trim();
    match s.split_once('.') {
        Some((int, frac)) if frac.chars().all(|c| c == '0') => int.to_string(),
        _ => s.to_string(),
    }
}

/// Writes a contract run's archive to a CSV (temporary file, fsync, rename) and returns the
/// checksum of what was written and the file's SHA-256.
pub async fn write_csv(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    keys: &Keys,
    contract_id: i64,
    path: &Path,
    mode: Option<u32>,
) -> Result<(Checksum, String)> {
    let mut csv = crate::report::ReportWriter::with_header(
        path,
        &[
            "conversation_id",
            keys.subject_col,
            "stored_unread",
            "audit_id",
        ],
        mode,
    )?;
    let result: Result<Checksum> = async {
        let (mut rows, mut non_null, mut sum, mut squares) = (0i64, 0i64, 0i128, 0i128);
        let d = ctx.dialect;
        let sql = render(
            "contract_archive_rows.sql",
            ctx,
            minijinja::context! {
                p => [d.placeholder(1), d.placeholder(2)],
                subject_col => keys.subject_col,
                limit => CSV_PAGE_ROWS,
            },
        )?;
        let mut last = 0i64;
        loop {
            let page = sqlx::query(&sql)
                .bind(contract_id)
                .bind(last)
                .fetch_all(&mut *conn)
                .await
                .context("reading the archive")?;
            if page.is_empty() {
                break;
            }
            for r in &page {
                last = r.try_get("id")?;
                let conv = Key::read(r, "conversation_id", keys.conv_kind)?;
                let subject = Key::read(r, keys.subject_col, keys.subject_kind)?;
                let value: Option<i64> = r.try_get("counter_value")?;
                let audit: Option<i64> = r.try_get("audit_id")?;
                rows += 1;
                if let Some(v) = value {
                    non_null += 1;
                    sum += i128::from(v);
                    squares += i128::from(v) * i128::from(v);
                }
                csv.row(&[
                    conv.to_string(),
                    subject.to_string(),
                    crate::report::cell(value),
                    crate::report::cell(audit),
                ])?;
            }
        }
        Ok(Checksum {
            rows,
            non_null,
            sum: sum.to_string(),
            sum_squares: squares.to_string(),
        })
    }
    .await;
    match result {
        Ok(sum) => Ok((sum, csv.finish()?)),
        Err(e) => {
            csv.abandon();
            Err(e)
        }
    }
}

/// Refuses a target whose archive keys (the row's conversation and subject: user or message id;
/// the conversation alone when `subject` is None) name more than one row of `ctx`'s counter
/// table, such as one summary row per thread of a member: the archive would hold their values
/// but could not say which row each came from, so they could not be put back (the trial of
/// issue 12: two thread rows of one member archived as two rows with the same key).
///
/// Errors: exit 2 naming the table, the number of such keys and the first conversation; exit 3
/// for a database failure.
pub async fn refuse_ambiguous_keys(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    conv: &str,
    subject: Option<&str>,
    target: &str,
) -> Result<()> {
    let sql = render(
        "contract_key_duplicates.sql",
        ctx,
        minijinja::context! { key_conv => conv, key_subject => subject },
    )?;
    let row = sqlx::query(&sql)
        .fetch_one(&mut *conn)
        .await
        .with_context(|| format!("checking that the archive keys of {target} name one row each"))?;
    let n: i64 = row.try_get("n")?;
    if n > 0 {
        let first = text(&row, 1)?.unwrap_or_default();
        return Err(crate::error::input_error(format!(
            "{target}: {n} key(s) of the archive ({}) name several rows of the table (the first in conversation {first}), e.g. one row per thread; the archive could not tell their values apart, so tidemark will not drop the column: archive and drop it yourself, or keep one row per key",
            if subject.is_some() { "conversation and subject" } else { "conversation" }
        )));
    }
    Ok(())
}

/// Refuses a target holding a value the archive cannot keep (issue 25 rows 2 and 3): its
/// `counter_value` is a 64-bit integer, so a `numeric` 2.7 would be archived as 3 and the
/// verification then fail ("a value changed while archiving?") after the archive was written,
/// and a `BIGINT UNSIGNED` above 2^63 - 1 could not be archived at all. Every row of the
/// table counts, `[counter] rows` or not: the archive copies them all. Reads the values only
/// where the column's declared type can hold such a value
/// ([`crate::schema::counter_values::may_hold_other`]), one streamed pass that stops at the
/// first.
///
/// Errors: exit 2 naming the target, the value and the first row's keys; exit 3 for a
/// database failure.
pub async fn refuse_non_integers(
    conn: &mut AnyConnection,
    ctx: &SqlContext,
    keys: &Keys,
    target: &Target,
) -> Result<()> {
    use crate::schema::counter_values::{first_not_int64, may_hold_other, Values};
    let declared =
        crate::db::catalog::column_type(conn, ctx, &target.table, &target.column).await?;
    if !may_hold_other(ctx.dialect, declared.as_deref()) {
        return Ok(());
    }
    let value = format!("this.{}", ctx.ctr.column);
    let values = Values {
        table: &ctx.ctr.table,
        joins: &crate::dialect::Joins::default(),
        conv: &keys.conv,
        user: "",
        subject: &keys.subject,
        value: &value,
        keep: None,
    };
    let Some(found) = first_not_int64(conn, ctx, &values, false).await? else {
        return Ok(());
    };
    let subject = match keys.subject_col {
        _ if keys.subject.is_empty() => String::new(),
        "message_id" => format!(", message {}", found.subject),
        _ => format!(", user {}", found.subject),
    };
    Err(crate::error::input_error(format!(
        "{}: {}.{} holds {} for conversation {}{subject} (the first such row found): the archive keeps whole numbers within the 64-bit integer range (-9223372036854775808 to 9223372036854775807); correct the row before the contract archives and drops the column",
        target.describe(),
        target.table,
        target.column,
        found.value,
        found.conv,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals() {
        assert_eq!(normalise_decimal("12.000"), "12");
        assert_eq!(normalise_decimal(" 7 "), "7");
        assert_eq!(normalise_decimal("-3"), "-3");
    }
}
