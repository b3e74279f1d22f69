//! Known systems (issue 32): `inspect` recognises the schemas of the real systems the project
//! has a mapping of in `contrib/mappings/<folder>/` (Mattermost, Matrix Synapse, Dendrite,
//! Discourse, Zulip) and proposes that mapping, unedited, instead of one of its own.
//!
//! A system is recognised by its [`Signature`]: the tables that identify it, each with the key
//! columns the mapping reads, every one present in the catalog (names compared
//! case-insensitively, in the default schema). A schema that merely resembles one (a table or
//! column renamed) is not recognised: `--explain` then names what was missing. The mappings are
//! embedded here (`include_str!`), so the binary proposes them without the source tree.

use std::fmt::Write;

use super::catalog::Catalog;
use super::warning::Warning;
use crate::dialect::Dialect;

/// What a known system's mapping reads that the system itself does not create.
#[derive(Debug, Clone, Copy)]
pub struct Prerequisite {
    /// The table or view's name, as the mapping names it.
    pub name: &'static str,
    /// What to do when it is missing; `{engine}` stands for the dialect's name.
    pub fix: &'static str,
}

/// A known system: its name, its folder in `contrib/mappings/`, its mapping, and its
/// signature.
#[derive(Debug, Clone, Copy)]
pub struct KnownSystem {
    /// The system's name, as the header says it ("Mattermost").
    pub name: &'static str,
    /// Its folder under `contrib/mappings/`.
    pub folder: &'static str,
    /// The text of `contrib/mappings/<folder>/tidemark.toml`.
    pub mapping: &'static str,
    /// The tables that identify it: (table, key columns).
    pub signature: Signature,
    /// What its mapping reads that the system does not create.
    pub prerequisites: &'static [Prerequisite],
}

/// The tables (and their key columns) that identify a system.
pub type Signature = &'static [(&'static str, &'static [&'static str])];

/// Every known system, in the order they are tried.
pub const SYSTEMS: &[KnownSystem] = &[
    KnownSystem {
        name: "Mattermost",
        folder: "mattermost",
        mapping: include_str!("../../contrib/mappings/mattermost/tidemark.toml"),
        signature: &[
            ("channels", &["id", "totalmsgcount", "totalmsgcountroot"]),
            (
                "posts",
                &[
                    "id",
                    "channelid",
                    "userid",
                    "rootid",
                    "createat",
                    "deleteat",
                ],
            ),
            (
                "channelmembers",
                &[
                    "channelid",
                    "userid",
                    "msgcount",
                    "mentioncount",
                    "msgcountroot",
                    "mentioncountroot",
                    "lastviewedat",
                ],
            ),
        ],
        prerequisites: &[Prerequisite {
            name: "mentions",
            fix: "build the table mentions (postid, userid), one row per mention, from the \
                  posts' text (tests/fixtures/mattermost/schema.sql shows its shape)",
        }],
    },
    KnownSystem {
        name: "Matrix Synapse",
        folder: "synapse",
        mapping: include_str!("../../contrib/mappings/synapse/tidemark.toml"),
        signature: &[
            (
                "events",
                &["stream_ordering", "event_id", "room_id", "sender", "type"],
            ),
            ("event_json", &["event_id", "json"]),
            ("redactions", &["event_id", "redacts"]),
            (
                "local_current_membership",
                &["room_id", "user_id", "membership", "event_stream_ordering"],
            ),
            (
                "receipts_linearized",
                &[
                    "room_id",
                    "receipt_type",
                    "user_id",
                    "event_id",
                    "thread_id",
                ],
            ),
            (
                "event_push_summary",
                &["user_id", "room_id", "unread_count", "thread_id"],
            ),
        ],
        prerequisites: &[Prerequisite {
            name: "tidemark_event_unread",
            fix: "create the view with contrib/mappings/synapse/views.{engine}.sql (Synapse's \
                  rule for what counts as unread, read by messages.countable)",
        }],
    },
    KnownSystem {
        name: "Dendrite",
        folder: "dendrite",
        mapping: include_str!("../../contrib/mappings/dendrite/tidemark.toml"),
        signature: &[
            (
                "syncapi_output_room_events",
                &["id", "event_id", "room_id", "sender", "exclude_from_sync"],
            ),
            (
                "syncapi_invite_events",
                &["event_id", "target_user_id", "deleted"],
            ),
            ("syncapi_memberships", &["room_id", "user_id", "membership"]),
            (
                "syncapi_receipts",
                &["room_id", "receipt_type", "user_id", "event_id"],
            ),
            (
                "syncapi_notification_data",
                &["user_id", "room_id", "notification_count"],
            ),
        ],
        prerequisites: &[],
    },
    KnownSystem {
        name: "Discourse",
        folder: "discourse",
        mapping: include_str!("../../contrib/mappings/discourse/tidemark.toml"),
        signature: &[
            ("users", &["id", "admin", "moderator"]),
            ("topics", &["id", "highest_post_number"]),
            (
                "posts",
                &[
                    "topic_id",
                    "post_number",
                    "user_id",
                    "post_type",
                    "deleted_at",
                ],
            ),
            (
                "topic_users",
                &[
                    "user_id",
                    "topic_id",
                    "last_read_post_number",
                    "unread_count",
                ],
            ),
        ],
        prerequisites: &[],
    },
    KnownSystem {
        name: "Zulip",
        folder: "zulip",
        mapping: include_str!("../../contrib/mappings/zulip/tidemark.toml"),
        signature: &[
            (
                "zerver_message",
                &["id", "sender_id", "recipient_id", "date_sent"],
            ),
            (
                "zerver_usermessage",
                &["user_profile_id", "message_id", "flags"],
            ),
            (
                "zerver_subscription",
                &["user_profile_id", "recipient_id", "active"],
            ),
        ],
        prerequisites: &[],
    },
];

/// How a catalog compares with one system's signature.
#[derive(Debug, Clone)]
pub struct Match {
    /// The system.
    pub system: &'static KnownSystem,
    /// The signature's tables found with all their key columns.
    pub found: Vec<&'static str>,
    /// What is missing, in words: `no table x`, `x has no column y`.
    pub missing: Vec<String>,
}

impl Match {
    /// Whether every table and column of the signature is there.
    pub fn recognised(&self) -> bool {
        self.missing.is_empty()
    }

    /// The `--explain` line: what matched and what did not.
    pub fn explain(&self) -> String {
        let found = if self.found.is_empty() {
            "none".to_string()
        } else {
            self.found.join(", ")
        };
        if self.recognised() {
            format!(
                "known system {}: every table and key column of its signature found ({found})",
                self.system.name
            )
        } else {
            format!(
                "known system {}: not recognised; found {found}; {}",
                self.system.name,
                self.missing.join("; ")
            )
        }
    }
}

/// `catalog` against every known system's signature, in [`SYSTEMS`]' order.
pub fn compare(catalog: &Catalog) -> Vec<Match> {
    SYSTEMS.iter().map(|s| compare_one(catalog, s)).collect()
}

fn compare_one(catalog: &Catalog, system: &'static KnownSystem) -> Match {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for (table, columns) in system.signature {
        let Some(t) = catalog
            .tables
            .iter()
            .find(|t| t.schema.is_none() && t.bare.eq_ignore_ascii_case(table))
        else {
            missing.push(format!("no table {table}"));
            continue;
        };
        let absent: Vec<&str> = columns
            .iter()
            .copied()
            .filter(|c| t.column(c).is_none())
            .collect();
        if absent.is_empty() {
            found.push(*table);
        } else {
            missing.push(format!("{table} has no column {}", absent.join(", ")));
        }
    }
    Match {
        system,
        found,
        missing,
    }
}

/// The first recognised system, if any.
pub fn recognise(matches: &[Match]) -> Option<&Match> {
    matches.iter().find(|m| m.recognised())
}

/// The warnings for a recognised system: each prerequisite the catalog lacks, with its fix.
pub fn warnings(m: &Match, catalog: &Catalog, dialect: Dialect) -> Vec<Warning> {
    m.system
        .prerequisites
        .iter()
        .filter(|p| {
            !catalog
                .tables
                .iter()
                .any(|t| t.schema.is_none() && t.bare.eq_ignore_ascii_case(p.name))
        })
        .map(|p| Warning {
            message: format!(
                "{}'s mapping reads {}, which this database does not have yet",
                m.system.name, p.name
            ),
            count: None,
            fix: Some(p.fix.replace("{engine}", dialect.name())),
        })
        .collect()
}

/// The proposal for a recognised system: a header (comment lines: the system recognised,
/// where the mapping comes from, the warnings, with `explain` every signature compared), then
/// the text of `contrib/mappings/<folder>/tidemark.toml`, byte for byte.
pub fn render(
    m: &Match,
    all: &[Match],
    warnings: &[Warning],
    catalog: &Catalog,
    dialect: Dialect,
    explain: bool,
) -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(
        w,
        "# Proposed by `tidemark inspect` from the catalog of a {} database ({} tables and views \
         read).",
        dialect.name(),
        catalog.tables.len()
    );
    let _ = writeln!(
        w,
        "# recognised as {}: the mapping of contrib/mappings/{}/, see its note (below).",
        m.system.name, m.system.folder
    );
    for warning in warnings {
        let _ = writeln!(w, "# WARNING: {}", warning.message);
        if let Some(fix) = &warning.fix {
            let _ = writeln!(w, "#   fix: {fix}");
        }
    }
    if explain {
        let _ = writeln!(w, "#\n# How the proposal was reached (--explain):");
        for other in all {
            let _ = writeln!(w, "#   {}", other.explain());
        }
    }
    let _ = writeln!(w);
    out.push_str(m.system.mapping);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::Mapping;

    #[test]
    fn every_known_mapping_parses() {
        for s in SYSTEMS {
            Mapping::parse(s.mapping, s.folder).unwrap_or_else(|e| panic!("{}: {e:#}", s.folder));
            assert!(!s.signature.is_empty());
        }
    }
}
