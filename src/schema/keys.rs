//! The key columns of the legacy schema: their declared types decide how keys are bound and
//! read, and the watermark table copies them (`expand`).

use anyhow::Result;
use sqlx::AnyConnection;

use super::key_families::KeyFamily;
use crate::db::catalog::column_type;
use crate::dialect::{Dialect, SqlContext, TypeClass};
use crate::error::input_error;
use crate::mapping::{Mapping, Shape};

/// The type family of a key column, which decides how keys are bound and read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// Any integer type: bound and read as i64.
    Integer,
    /// Any character type: bound and read as strings.
    Text,
}

/// A key column's declared type and the DDL type the watermark table uses for it.
#[derive(Debug, Clone)]
pub struct KeyType {
    /// Integer or text.
    pub kind: KeyKind,
    /// Type for `CREATE TABLE` in this dialect.
    pub ddl: String,
}

/// Maps a declared key type to a [`KeyType`].
///
/// Errors (exit 2): a type tidemark cannot key a watermark by (uuid, binary, decimal…), named.
pub fn key_type(dialect: Dialect, declared: &str, what: &str) -> Result<KeyType> {
    if KeyFamily::of(dialect, declared) == Some(KeyFamily::Uuid) {
        // Issue 29 row 14: a uuid key is read and bound as its text form; the watermark
        // table keeps the uuid type.
        return Ok(KeyType {
            kind: KeyKind::Text,
            ddl: declared.trim().to_string(),
        });
    }
    match dialect.catalog().type_class(declared) {
        TypeClass::Integer => Ok(KeyType {
            kind: KeyKind::Integer,
            ddl: "BIGINT".into(),
        }),
        TypeClass::Text | TypeClass::Unknown => Ok(KeyType {
            kind: KeyKind::Text,
            ddl: dialect.text_key_ddl(declared),
        }),
        _ => Err(input_error(format!(
            "{what} has type {declared}: tidemark keys watermarks by integer, text or uuid columns"
        ))),
    }
}

/// The key types of the watermark table: (user, conversation), read from the members table
/// when mapped, else from the per-member counter table.
///
/// Errors (exit 2): a key column that does not exist or has an unusable type.
pub async fn watermark_key_types(
    conn: &mut AnyConnection,
    mapping: &Mapping,
    ctx: &SqlContext,
) -> Result<(KeyType, KeyType)> {
    let (section, table, user, conv) = match (&mapping.members, mapping.counter.shape) {
        (Some(mb), _) => (
            "members",
            mb.table.clone(),
            mb.user.clone(),
            mb.conversation.clone(),
        ),
        (None, Shape::PerMember) => (
            "counter",
            mapping.counter_table().to_string(),
            mapping.counter.user.clone().unwrap_or_default(),
            mapping.counter.conversation.clone().unwrap_or_default(),
        ),
        (None, Shape::PerMessage | Shape::ReadFlags) => {
            unreachable!("validated: per_message and read_flags need [members]")
        }
    };
    let mut types = Vec::new();
    for (key, column) in [("user", user), ("conversation", conv)] {
        let declared = column_type(conn, ctx, &table, &column)
            .await?
            .ok_or_else(|| {
                input_error(format!(
                    "{section}.{key}: column {column:?} not found in table {table:?}"
                ))
            })?;
        types.push(key_type(
            ctx.dialect,
            &declared,
            &format!("{section}.{key} ({table}.{column})"),
        )?);
    }
    let conv = types.pop().expect("two types");
    let user = types.pop().expect("two types");
    Ok((user, conv))
}
