//! The `time` and `zero_dates` dimensions (issue 29 rows 2, 3, 5): messages get a creation
//! time and members a `last_read_at`, read as timestamp evidence after the receipts and
//! before the counter (semantics.md "Backfill" 2: the highest position of a message of the
//! conversation created at or before that time; a time that is no time is no evidence).
//!
//! - PostgreSQL: each column `timestamp` or `timestamptz`, in a database whose `timezone` is
//!   not UTC (`ALTER DATABASE … SET timezone`); the rows are written in a session of that zone,
//!   so times compare as wall times of that zone, as `psql` compares them.
//! - MariaDB: each column `DATETIME` or `TIMESTAMP`, the rows written in a session of a zone
//!   that is not UTC, which the backfill is told with `--time-zone`; with `zero_dates`, some
//!   visits are `0000-00-00 00:00:00` or (DATETIME) `2024-06-00 00:00:00`.
//! - SQLite: each time in one of the ISO 8601 forms (with or without `T`, `Z`, an offset) or an
//!   integer (Unix seconds); with `zero_dates`, some visits are text that is no time.
//!
//! The model (`model::Legacy::created`, `visits`) holds seconds of the zone's wall clock
//! (SQLite: UTC); a visit that is no time is left out of `visits`.

use std::collections::BTreeMap;

use proptest::prelude::*;

use crate::common::model::{Key, Legacy};
use crate::common::Backend;

/// The zones tried, none with daylight saving time: (PostgreSQL name, MariaDB offset). UTC,
/// the control, needs no `--time-zone` on MariaDB (its server's zone is UTC here), so its
/// zero dates are tried even where the option is unknown.
const ZONES: &[(&str, &str)] = &[
    ("Asia/Kolkata", "+05:30"),
    ("America/Bogota", "-05:00"),
    ("Asia/Tokyo", "+09:00"),
    ("UTC", "+00:00"),
];

/// 2024-06-01 00:00:00, in seconds: every time is this plus some minutes.
const BASE: i64 = 1_717_200_000;

/// One member's visit: at some minute, at a message's creation time exactly, or no time.
#[derive(Debug, Clone, Copy)]
pub enum Visit {
    /// At `BASE` + minutes.
    At(i64),
    /// At the creation time of the n-th message of the conversation (modulo their number).
    AtMessage(usize),
    /// A value that is no time (which one: an index into the backend's list).
    NoTime(usize),
}

/// What the time dimensions drew for one world.
#[derive(Debug, Clone)]
pub struct Times {
    /// `created_at` has a time zone (`timestamptz`, MariaDB `TIMESTAMP`).
    pub created_zoned: bool,
    /// `last_read_at` has a time zone.
    pub visit_zoned: bool,
    /// Index into [`ZONES`].
    pub zone: usize,
    /// Per message (in order): minutes after `BASE`, and the SQLite form.
    pub created: Vec<(i64, usize)>,
    /// Per member (in key order): a visit (None: NULL) and its SQLite form.
    pub visits: Vec<(Option<Visit>, usize)>,
    /// The SQLite text of each time, by its seconds and form, is decided at render time; the
    /// rendered visits by member key, for the INSERTs.
    pub rendered: BTreeMap<Key, String>,
    /// The rendered creation time of each message, by (conversation, position).
    pub rendered_created: BTreeMap<(String, i64), String>,
}

/// The strategy of [`Times`] (the rendering is filled in by [`apply`]).
pub fn times(zero_dates: bool) -> impl Strategy<Value = Times> {
    let visit = prop_oneof![
        3 => (-120i64..900).prop_map(Visit::At),
        3 => (0usize..8).prop_map(Visit::AtMessage),
        if zero_dates { 2 } else { 0 } => (0usize..4).prop_map(Visit::NoTime),
    ];
    (
        any::<bool>(),
        any::<bool>(),
        0..ZONES.len(),
        prop::collection::vec((0i64..720, 0usize..6), 24),
        prop::collection::vec((prop::option::weighted(0.7, visit), 0usize..6), 64),
    )
        .prop_map(
            |(created_zoned, visit_zoned, zone, created, visits)| Times {
                created_zoned,
                visit_zoned,
                zone,
                created,
                visits,
                rendered: BTreeMap::new(),
                rendered_created: BTreeMap::new(),
            },
        )
}

/// Fills the model's creation times and visits from `t`, and `t`'s rendered literals for
/// `backend`.
pub fn apply(backend: Backend, l: &mut Legacy, t: &mut Times) {
    for (m, &(minutes, form)) in l.msgs.iter().zip(&t.created) {
        let at = BASE + minutes * 60;
        l.created.insert((m.conv.clone(), m.id), at);
        t.rendered_created
            .insert((m.conv.clone(), m.id), literal(backend, at, form));
    }
    for (key, &(visit, form)) in l.members.keys().zip(&t.visits) {
        let at = match visit {
            None => continue,
            Some(Visit::At(minutes)) => BASE + minutes * 60,
            Some(Visit::AtMessage(n)) => {
                let of_conv: Vec<i64> = l
                    .created
                    .iter()
                    .filter(|((c, _), _)| *c == key.0)
                    .map(|(_, at)| *at)
                    .collect();
                if of_conv.is_empty() {
                    BASE
                } else {
                    of_conv[n % of_conv.len()]
                }
            }
            Some(Visit::NoTime(n)) => {
                if let Some(text) = no_time(backend, t.visit_zoned, n) {
                    t.rendered.insert(key.clone(), text);
                    continue;
                }
                BASE + (n as i64) * 3600
            }
        };
        l.visits.insert(key.clone(), at);
        t.rendered.insert(key.clone(), literal(backend, at, form));
    }
}

/// A value that is no time on `backend` (None where the backend has none to try:
/// PostgreSQL refuses them at insert).
fn no_time(backend: Backend, zoned: bool, n: usize) -> Option<String> {
    match backend {
        Backend::Postgres => None,
        Backend::Mysql if zoned => Some("'0000-00-00 00:00:00'".into()),
        Backend::Mysql => Some(
            [
                "'0000-00-00 00:00:00'",
                "'2024-06-00 00:00:00'",
                "'0000-00-00'",
            ][n % 3]
                .into(),
        ),
        Backend::Sqlite => {
            Some(["'never'", "''", "'2024-13-45 00:00:00'", "'yesterday'"][n % 4].into())
        }
    }
}

/// The SQL literal of `at` (seconds of the zone's wall clock; SQLite: UTC) on `backend`; on
/// SQLite in form `form`: 0 `YYYY-MM-DD HH:MM:SS`, 1 with `T`, 2 with `T` and `Z`, 3 with
/// offset `+02:00`, 4 with offset `-05:30` (the wall clock of that offset), 5 Unix seconds.
pub fn literal(backend: Backend, at: i64, form: usize) -> String {
    if backend != Backend::Sqlite {
        return format!("'{}'", wall(at, " "));
    }
    match form % 6 {
        0 => format!("'{}'", wall(at, " ")),
        1 => format!("'{}'", wall(at, "T")),
        2 => format!("'{}Z'", wall(at, "T")),
        3 => format!("'{}+02:00'", wall(at + 7200, "T")),
        4 => format!("'{}-05:30'", wall(at - 19800, "T")),
        _ => at.to_string(),
    }
}

/// `YYYY-MM-DD<sep>HH:MM:SS` of Unix seconds `at`.
fn wall(at: i64, sep: &str) -> String {
    let t = ::time::OffsetDateTime::from_unix_timestamp(at).expect("a time in range");
    format!(
        "{:04}-{:02}-{:02}{sep}{:02}:{:02}:{:02}",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// The column types: (messages.created_at, members.last_read_at).
pub fn column_types(backend: Backend, t: &Times) -> (&'static str, &'static str) {
    let kind = |zoned: bool| match (backend, zoned) {
        (Backend::Postgres, false) => "TIMESTAMP NULL",
        (Backend::Postgres, true) => "TIMESTAMPTZ NULL",
        (Backend::Mysql, false) => "DATETIME NULL",
        (Backend::Mysql, true) => "TIMESTAMP NULL",
        (Backend::Sqlite, _) => "TIMESTAMP NULL",
    };
    (kind(t.created_zoned), kind(t.visit_zoned))
}

/// What runs on the test's own connection before the rows are written (and, on PostgreSQL,
/// what makes the zone the database's own): the zone, and on MariaDB a `sql_mode` that
/// accepts zero dates.
pub fn session(backend: Backend, db_name: &str, t: &Times) -> Vec<String> {
    let (pg, my) = ZONES[t.zone];
    match backend {
        Backend::Postgres => vec![
            format!("ALTER DATABASE \"{db_name}\" SET timezone = '{pg}'"),
            format!("SET TIME ZONE '{pg}'"),
        ],
        Backend::Mysql => vec![
            format!("SET time_zone = '{my}'"),
            "SET sql_mode = ''".into(),
        ],
        Backend::Sqlite => Vec::new(),
    }
}

/// The backfill's extra arguments: MariaDB has no zone of its own per database, so a zone
/// other than the server's (UTC) is named with `--time-zone`.
pub fn args(backend: Backend, t: &Times) -> Vec<String> {
    match (backend, ZONES[t.zone].1) {
        (Backend::Mysql, "+00:00") => Vec::new(),
        (Backend::Mysql, offset) => vec!["--time-zone".into(), offset.into()],
        _ => Vec::new(),
    }
}

/// The mapping with `created_at` and the timestamp evidence after the receipts.
pub fn mapping(toml: &str) -> String {
    toml.replacen(
        "sender = \"sender_id\"\n",
        "sender = \"sender_id\"\ncreated_at = \"created_at\"\n",
        1,
    )
    .replacen(
        "column = \"message_id\"\n",
        "column = \"message_id\"\n\n[[evidence]]\nkind = \"timestamp\"\ntable = \"members\"\nuser = \"user_id\"\nconversation = \"conv_id\"\ncolumn = \"last_read_at\"\n",
        1,
    )
}

#[test]
fn sqlite_forms_name_one_instant() {
    let at = BASE + 3600;
    let forms: Vec<String> = (0..6).map(|f| literal(Backend::Sqlite, at, f)).collect();
    assert_eq!(
        forms,
        [
            "'2024-06-01 01:00:00'",
            "'2024-06-01T01:00:00'",
            "'2024-06-01T01:00:00Z'",
            "'2024-06-01T03:00:00+02:00'",
            "'2024-05-31T19:30:00-05:30'",
            "1717203600",
        ]
    );
}
