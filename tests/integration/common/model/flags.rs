//! The independent model of semantics.md "Shape C, read flags per message" (issue 22), in plain
//! Rust from the spec, not from tidemark's SQL. The mapping modelled (`read_flags::MAPPING`):
//! messages countable when neither deleted nor system (the legacy state counted every flag
//! row); members with an active flag and a join position; the counter of shape `read_flags`
//! over a flags table (one row per (user, message), read or not); one evidence, `read_flags`
//! over the same table; policy `first`; no creation time (no settle time).
//!
//! Where semantics.md leaves a detail open, the model says what it takes:
//! - a member with no flag row in a conversation has no read_flags evidence there, and no
//!   stored value (no counter row: not audited);
//! - the out-of-order counts are taken from t = max(final watermark, join position), as the
//!   audit counts unread: "read after" = flags saying read on countable messages of others
//!   after t, "unread at or before" = flags saying unread at or before t; a member without a
//!   watermark is not counted;
//! - `read_out_of_order` applies when stored - unread at/before + read after = recomputed and
//!   either count is above 0; it is checked after `negative` (never the case for a count),
//!   before `own_messages_counted`: the flags are the stored value's own rows.

use std::collections::BTreeMap;

use super::{Key, Member, Msg, Watermark};

/// A small database of shape C.
#[derive(Debug, Clone, Default)]
pub struct Flagged {
    /// The messages.
    pub msgs: Vec<Msg>,
    /// The member rows.
    pub members: BTreeMap<Key, Member>,
    /// The flag rows: (user, message id) -> read (message ids unique in the database).
    pub flags: BTreeMap<(String, i64), bool>,
    /// Flag rows that name their conversation (issue 29 row 11, positions unique only per
    /// conversation): (user, conversation, position) -> read. A row belongs to the message
    /// of that conversation at that position only (none: the row names no message).
    pub conv_flags: BTreeMap<(String, String, i64), bool>,
}

/// The backfill's out-of-order counts (semantics.md "Shape C").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutOfOrder {
    /// Members with either count above 0.
    pub members: u64,
    /// Flags saying read after the watermark (countable, others'): unread now.
    pub read_out_of_order: u64,
    /// Flags saying unread at or before the watermark: read now.
    pub unread_marked_read: u64,
}

impl Flagged {
    fn msg(&self, id: i64) -> Option<&Msg> {
        self.msgs.iter().find(|m| m.id == id)
    }

    /// The message of `conv` at position `id`.
    fn msg_in(&self, conv: &str, id: i64) -> Option<&Msg> {
        self.msgs.iter().find(|m| m.id == id && m.conv == conv)
    }

    /// Every flag row that names a message: (user, its message, read), of both kinds.
    fn all_flags(&self) -> Vec<(&str, &Msg, bool)> {
        let by_id = self
            .flags
            .iter()
            .filter_map(|((u, id), &read)| self.msg(*id).map(|m| (u.as_str(), m, read)));
        let by_conv = self
            .conv_flags
            .iter()
            .filter_map(|((u, c, id), &read)| self.msg_in(c, *id).map(|m| (u.as_str(), m, read)));
        by_id.chain(by_conv).collect()
    }

    /// The flag rows of `user` on messages of `conv`: (position, read).
    fn flags_of(&self, conv: &str, user: &str) -> Vec<(i64, bool)> {
        self.all_flags()
            .into_iter()
            .filter(|(u, m, _)| *u == user && m.conv == conv)
            .map(|(_, m, read)| (m.id, read))
            .collect()
    }

    /// The read_flags evidence of (conv, user): the greatest position of the conversation
    /// below the lowest unread flag (0 when none is below), or its greatest position when no
    /// flag is unread; None without flag rows.
    pub fn evidence(&self, conv: &str, user: &str) -> Option<i64> {
        let flags = self.flags_of(conv, user);
        if flags.is_empty() {
            return None;
        }
        let positions = self.msgs.iter().filter(|m| m.conv == conv).map(|m| m.id);
        Some(
            match flags.iter().filter(|(_, r)| !r).map(|(p, _)| *p).min() {
                None => positions.max().unwrap_or(0),
                Some(lo) => positions.filter(|&p| p < lo).max().unwrap_or(0),
            },
        )
    }

    /// (read after, unread at or before) from threshold t for (conv, user).
    fn counts(&self, conv: &str, user: &str, t: i64) -> (i64, i64) {
        let mut read_after = 0;
        let mut unread_before = 0;
        for (pos, read) in self.flags_of(conv, user) {
            let m = self.msg_in(conv, pos).expect("a flag's message");
            let others = m.sender.as_deref() != Some(user);
            if read && pos > t && m.countable() && others {
                read_after += 1;
            }
            if !read && pos <= t {
                unread_before += 1;
            }
        }
        (read_after, unread_before)
    }

    /// t = max(watermark, join position) of a member (0 for no watermark).
    fn threshold(&self, key: &Key, wm: i64) -> i64 {
        let join = self.members.get(key).and_then(|m| m.join);
        join.map_or(wm, |j| wm.max(j))
    }
}

/// The backfill: every member row (active or not) gets its read_flags evidence, written
/// forward-only (a write that does not advance a watermark changes nothing); then the
/// out-of-order counts against the watermarks it leaves.
pub fn backfill(
    w: &Flagged,
    existing: &BTreeMap<Key, Watermark>,
) -> (BTreeMap<Key, Watermark>, OutOfOrder) {
    let mut out = existing.clone();
    for (conv, user) in w.members.keys() {
        let Some(v) = w.evidence(conv, user) else {
            continue;
        };
        let key = (conv.clone(), user.clone());
        if out.get(&key).is_none_or(|x| v > x.last_read_id) {
            out.insert(
                key,
                Watermark {
                    last_read_id: v,
                    source: Some("read_flags".into()),
                    backfilled: Some(v),
                },
            );
        }
    }
    let mut ooo = OutOfOrder::default();
    for key in w.members.keys() {
        let Some(wm) = out.get(key) else { continue };
        let t = w.threshold(key, wm.last_read_id);
        let (r, u) = w.counts(&key.0, &key.1, t);
        if r + u > 0 {
            ooo.members += 1;
        }
        ooo.read_out_of_order += r as u64;
        ooo.unread_marked_read += u as u64;
    }
    (out, ooo)
}

/// The audit (no cap): one row per (conversation, user) with flag rows; the report's cells
/// (the per_member columns, then read after, unread at or before), sorted, and the sums.
pub fn audit(w: &Flagged, wms: &BTreeMap<Key, Watermark>) -> super::Audit {
    let mut keys: Vec<Key> = w
        .all_flags()
        .into_iter()
        .map(|(u, m, _)| (m.conv.clone(), u.to_string()))
        .collect();
    keys.sort();
    keys.dedup();
    let mut a = super::Audit {
        rows_checked: keys.len() as u64,
        ..Default::default()
    };
    for key in keys {
        let (conv, user) = &key;
        let flags = w.flags_of(conv, user);
        let stored = flags.iter().filter(|(_, r)| !r).count() as i64;
        let member = w.members.get(&key);
        let is_member = member.is_some_and(|m| m.active);
        let join = member.and_then(|m| m.join);
        let wm = wms.get(&key);
        let lr = wm.map_or(0, |x| x.last_read_id);
        let t = w.threshold(&key, lr);
        let mine = |m: &Msg| m.sender.as_deref() == Some(user.as_str());
        let after_join = |p: i64| join.is_none_or(|j| p > j);
        let count = |f: &dyn Fn(&Msg) -> bool| {
            w.msgs.iter().filter(|m| &m.conv == conv && f(m)).count() as i64
        };
        let recomputed = if is_member {
            count(&|m| m.id > lr && m.countable() && !mine(m) && after_join(m.id))
        } else {
            0
        };
        if stored == recomputed {
            continue;
        }
        let own = count(&|m| m.id > t && mine(m));
        let excluded = count(&|m| m.id > t && !mine(m) && !m.countable());
        let total = count(&|m| m.countable() && !mine(m) && after_join(m.id));
        let (r, u) = w.counts(conv, user, t);
        let class = if !is_member {
            "orphan"
        } else if r + u > 0 && stored - u + r == recomputed {
            "read_out_of_order"
        } else if own > 0 && stored == recomputed + own {
            "own_messages_counted"
        } else if excluded > 0 && stored == recomputed + excluded {
            "excluded_counted"
        } else if stored == 0 && recomputed > 0 {
            "cleared"
        } else if stored > total {
            "exceeds_history"
        } else if stored > recomputed {
            "overcount"
        } else {
            "undercount"
        };
        let drift = stored - recomputed;
        *a.by_class.entry(class.to_string()).or_default() += 1;
        a.sum_abs_drift += drift.abs();
        a.max_abs_drift = a.max_abs_drift.max(drift.abs());
        a.rows.push(vec![
            conv.clone(),
            user.clone(),
            stored.to_string(),
            recomputed.to_string(),
            drift.to_string(),
            class.to_string(),
            wm.map(|x| x.last_read_id.to_string()).unwrap_or_default(),
            wm.map(Watermark::provenance).unwrap_or_default(),
            r.to_string(),
            u.to_string(),
        ]);
    }
    a.rows.sort();
    a
}
