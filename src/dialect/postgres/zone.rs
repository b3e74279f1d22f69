//! The session's time zone on PostgreSQL (issue 29 row 2; semantics.md "Backfill", timestamp
//! evidence). sqlx sends `TimeZone=UTC` in its startup packet, which beats `ALTER DATABASE …
//! SET timezone` and `ALTER ROLE … SET timezone`: a `timestamp` (without time zone) compared
//! with a `timestamptz` would then be read as UTC wall time, not as the database's own
//! sessions (`psql`, the application) read it. This file finds the zone those sessions get
//! and sets it, or the zone the DBA names with `--time-zone`.

use anyhow::Result;
use sqlx::{AnyConnection, Row};

use crate::dialect::types::BoxFuture;
use crate::error::input_error;

/// The `timezone` setting a fresh session of this role in this database gets from
/// `pg_db_role_setting`, in PostgreSQL's order of precedence: this role in this database,
/// this role in every database, every role in this database, every role everywhere.
const ROLE_DB_ZONE: &str = "SELECT s.zone AS zone FROM (\
 SELECT substr(c, strpos(c, '=') + 1) AS zone, \
 CASE WHEN d.setdatabase <> 0 AND d.setrole <> 0 THEN 1 WHEN d.setrole <> 0 THEN 2 WHEN d.setdatabase <> 0 THEN 3 ELSE 4 END AS rank \
 FROM pg_catalog.pg_db_role_setting d CROSS JOIN LATERAL unnest(d.setconfig) AS c \
 WHERE (d.setdatabase = 0 OR d.setdatabase = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())) \
 AND (d.setrole = 0 OR d.setrole = (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = session_user)) \
 AND lower(split_part(c, '=', 1)) = 'timezone') s ORDER BY s.rank LIMIT 1";

/// The server's configured `timezone` (`postgresql.conf`, `ALTER SYSTEM`), readable by a
/// superuser or a member of `pg_read_all_settings` only: the last valid line wins.
const FILE_ZONE: &str = "SELECT setting AS zone FROM pg_catalog.pg_file_settings \
 WHERE lower(name) = 'timezone' AND error IS NULL ORDER BY seqno DESC LIMIT 1";

/// One text value of `sql`'s first row, None when there is no row or the query fails (a
/// catalog the role may not read).
async fn first_zone(conn: &mut AnyConnection, sql: &str) -> Option<String> {
    let row = sqlx::query(sql).fetch_optional(&mut *conn).await.ok()??;
    row.try_get::<Option<String>, _>("zone").ok().flatten()
}

/// The zone a session of this role and database gets without the driver's `TimeZone=UTC`:
/// the role's / database's setting, else the server's configuration file; None when neither
/// can be read (the session then stays in UTC).
pub(super) async fn database_zone(conn: &mut AnyConnection) -> Option<String> {
    match first_zone(conn, ROLE_DB_ZONE).await {
        Some(z) => Some(z),
        None => first_zone(conn, FILE_ZONE).await,
    }
}

/// Sets the session's `TimeZone` to `zone` (named by the DBA) or to [`database_zone`]. See
/// [`crate::dialect::Sessions::session_time_zone`].
///
/// Errors (exit 2): PostgreSQL refuses the named zone (`invalid value for parameter
/// "TimeZone"`), with its message.
pub(super) fn apply<'a>(
    conn: &'a mut AnyConnection,
    zone: Option<&'a str>,
) -> BoxFuture<'a, Result<()>> {
    Box::pin(async move {
        let (zone, named) = match zone {
            Some(z) => (z.to_string(), true),
            None => match database_zone(conn).await {
                Some(z) => (z, false),
                None => return Ok(()),
            },
        };
        // A value as pg_db_role_setting keeps it may be quoted ('America/New_York').
        let value = zone.trim().trim_matches('\'').trim_matches('"').to_string();
        // An offset the DBA names means what it means in ISO 8601 and on MariaDB (-04:00: four
        // hours behind UTC); PostgreSQL reads a bare offset the POSIX way (-04:00: four hours
        // *ahead*), so it is given as the POSIX spelling of the same offset.
        let setting = if named {
            match iso_offset_as_posix(&value) {
                Some(posix) => posix?,
                None => value.clone(),
            }
        } else {
            value.clone()
        };
        let set = sqlx::query("SELECT set_config('TimeZone', $1, false) AS zone")
            .bind(setting)
            .fetch_one(&mut *conn)
            .await;
        match set {
            Ok(_) => Ok(()),
            Err(e) if named => Err(input_error(format!(
                "--time-zone {value:?}: PostgreSQL does not accept this time zone: {}",
                crate::error::describe(&anyhow::Error::from(e))
            ))),
            // The database's own setting that this server cannot set (it would fail
            // the application's sessions as well): the driver's UTC stays.
            Err(_) => Ok(()),
        }
    })
}

/// `zone` as an ISO 8601 offset (`-04:00`, `+05:30`, `+9`: hours, optionally `:MM`, positive
/// east of UTC, as MariaDB and ISO 8601 read it) in PostgreSQL's POSIX spelling of the same
/// offset (`<-04:00>+04:00`, the spelling `SET TIME ZONE INTERVAL '-04:00' HOUR TO MINUTE`
/// gives: POSIX counts positive west of UTC; PostgreSQL manual, "8.5.3. Time Zones"). None
/// when `zone` is no offset (a zone name, passed on as it is).
///
/// Errors (exit 2): an offset beyond ±14:00 or with minutes above 59.
fn iso_offset_as_posix(zone: &str) -> Option<Result<String>> {
    let (sign, rest) = match zone.chars().next()? {
        '+' => ('+', &zone[1..]),
        '-' => ('-', &zone[1..]),
        _ => return None,
    };
    let (h, m) = rest.split_once(':').unwrap_or((rest, "0"));
    let digits = |t: &str| !t.is_empty() && t.len() <= 2 && t.bytes().all(|b| b.is_ascii_digit());
    if !digits(h) || !digits(m) {
        return None;
    }
    let (h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
    if m > 59 || h * 60 + m > 14 * 60 {
        return Some(Err(input_error(format!(
            "--time-zone {zone:?}: an offset is from -14:00 to +14:00 (hours, then :MM below 60)"
        ))));
    }
    let west = if sign == '+' { '-' } else { '+' };
    Some(Ok(format!("<{sign}{h:02}:{m:02}>{west}{h:02}:{m:02}")))
}

#[cfg(test)]
mod tests {
    use super::iso_offset_as_posix;

    #[test]
    fn iso_offsets_are_given_in_posix_spelling() {
        let posix = |z: &str| iso_offset_as_posix(z).map(|r| r.map_err(|e| e.to_string()));
        assert_eq!(posix("-04:00"), Some(Ok("<-04:00>+04:00".to_string())));
        assert_eq!(posix("+05:30"), Some(Ok("<+05:30>-05:30".to_string())));
        assert_eq!(posix("+9"), Some(Ok("<+09:00>-09:00".to_string())));
        assert_eq!(posix("-14:00"), Some(Ok("<-14:00>+14:00".to_string())));
        assert!(matches!(posix("+25:00"), Some(Err(e)) if e.contains("-14:00 to +14:00")));
        assert!(matches!(posix("+14:01"), Some(Err(_))));
        assert!(matches!(posix("+05:60"), Some(Err(_))));
        assert_eq!(posix("America/New_York"), None);
        assert_eq!(posix("UTC"), None);
        assert_eq!(posix("-04:00:00"), None);
    }
}
