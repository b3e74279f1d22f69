//! One conversation at a time: its members, messages, receipts and counters, with the drift
//! injected into chosen counters (and the classification rules the injection is checked
//! against).

use anyhow::{bail, Result};
use std::collections::HashSet;
use std::fmt::Write as _;

use super::classes::{
    CLEARED, EXCEEDS, EXCLUDED, NEGATIVE, NULL_COUNTER, ORPHAN, OVERCOUNT, OWN, UNDERCOUNT,
};
use super::loader::{Loader, T_COUNTERS, T_MEMBERS, T_MESSAGES, T_RECEIPTS};
use super::plan::Plan;
use super::rng::Rng;
use super::truth::GroundTruth;
use crate::drift::DriftClass;

/// One member of the conversation being generated.
#[derive(Debug, Clone)]
pub(super) struct Member {
    pub(super) user: u64,
    pub(super) active: bool,
    /// Messages with an index up to this one came before the member joined.
    pub(super) join_idx: Option<usize>,
    /// Indexes of the member's own messages, ascending.
    pub(super) own: Vec<usize>,
    /// How many of `own` are countable, as a prefix sum: own_countable[i] = countable among
    /// own[..i].
    pub(super) own_countable: Vec<u32>,
}

impl Member {
    /// The index of the first message after the member joined (0 when it was there from the
    /// start).
    fn first(&self) -> usize {
        self.join_idx.map_or(0, |j| j + 1)
    }
}

/// The messages of the conversation being generated, as a member's counter sees them.
struct History {
    /// The message ids (positions), by index.
    ids: Vec<i64>,
    /// Countable messages at index >= i (one more entry than messages: 0 at the end).
    suf_c: Vec<i64>,
    /// Not countable messages at index >= i (one more entry than messages: 0 at the end).
    suf_n: Vec<i64>,
}

impl History {
    /// The history of the messages with these ids, countable or not (one flag per id).
    fn new(ids: Vec<i64>, countable: &[bool]) -> History {
        let m = ids.len();
        let mut suf_c = vec![0i64; m + 1];
        let mut suf_n = vec![0i64; m + 1];
        for i in (0..m).rev() {
            suf_c[i] = suf_c[i + 1] + i64::from(countable[i]);
            suf_n[i] = suf_n[i + 1] + i64::from(!countable[i]);
        }
        History { ids, suf_c, suf_n }
    }

    /// Facts for a member whose messages count from index `s` on.
    fn facts(&self, mb: &Member, s: usize) -> Facts {
        let s0 = mb.first();
        let from = |s: usize| {
            let k = mb.own.partition_point(|&i| i < s);
            let own_all = (mb.own.len() - k) as i64;
            let own_c = i64::from(mb.own_countable[mb.own.len()] - mb.own_countable[k]);
            (own_all, own_c)
        };
        let (own_all, own_c) = from(s);
        let (_, own_c0) = from(s0);
        Facts {
            recomputed: self.suf_c[s] - own_c,
            own: own_all,
            excluded: self.suf_n[s] - (own_all - own_c),
            total: self.suf_c[s0] - own_c0,
        }
    }
}

/// The conversation being generated, while its members' rows are written.
struct Current {
    /// Its id (`conv_id`).
    conv: i64,
    /// The users of its member rows.
    seen: HashSet<u64>,
    /// The users given a counter row without a member row (orphans) so far.
    phantoms: Vec<u64>,
    /// Its messages.
    history: History,
}

/// The counts the audit classifies a row by (semantics.md "Drift classes").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Facts {
    /// Countable messages after the watermark, not own, after the join position.
    pub(super) recomputed: i64,
    /// Own messages (any) after the watermark and the join position.
    pub(super) own: i64,
    /// Not-countable messages after the watermark and the join position, not own.
    pub(super) excluded: i64,
    /// Countable messages after the join position, not own, whatever the watermark.
    pub(super) total: i64,
}

/// The class a per-member counter row gets by semantics.md's table (no cap, the legacy counter
/// counted every message), or None when it does not drift. An independent copy of the rules,
/// used to check every injected value.
pub(super) fn expected_class(stored: Option<i64>, is_member: bool, f: &Facts) -> Option<usize> {
    let recomputed = if is_member { f.recomputed } else { 0 };
    let Some(s) = stored else {
        return Some(NULL_COUNTER);
    };
    if s == recomputed {
        return None;
    }
    Some(if !is_member {
        ORPHAN
    } else if s < 0 {
        NEGATIVE
    } else if f.own > 0 && s == recomputed + f.own {
        OWN
    } else if f.excluded > 0 && s == recomputed + f.excluded {
        EXCLUDED
    } else if s == 0 && recomputed > 0 {
        CLEARED
    } else if s > f.total {
        EXCEEDS
    } else if s > recomputed {
        OVERCOUNT
    } else {
        UNDERCOUNT
    })
}

/// The generator's state between conversations.
pub(super) struct Gen {
    pub(super) rng: Rng,
    pub(super) plan: Plan,
    pub(super) done: u64,
    pub(super) injected: [u64; 9],
    pub(super) truth: GroundTruth,
}

impl Gen {
    /// Whether to inject class `c` now: keeps each class close to an even spread of its
    /// target over the member rows, with some randomness.
    pub(super) fn go(&mut self, c: usize) -> bool {
        let target = self.plan.targets[c];
        let have = self.injected[c];
        if have >= target {
            return false;
        }
        let done = self.done + 1;
        let due =
            (u128::from(target) * u128::from(done)).div_ceil(u128::from(self.plan.total)) as u64;
        if have + 1 < due || done * 20 >= self.plan.total * 19 {
            return true;
        }
        have < due && self.rng.chance(0.2)
    }

    pub(super) fn size(&mut self, remaining: u64) -> u64 {
        let u = self.rng.unit();
        let mut n = if u < self.plan.p_dm {
            2
        } else if u < self.plan.p_dm + self.plan.p_small {
            let v = self.rng.unit();
            3 + (18.0 * v * v * v * v) as u64
        } else {
            let v = self.rng.unit();
            let spread = self.plan.large_max.saturating_sub(self.plan.large_min);
            self.plan.large_min + (spread as f64 * v * v * v) as u64
        };
        n = n.min(remaining);
        if remaining - n == 1 {
            n += 1;
        }
        n
    }

    /// Generates conversation `conv` into `out`: its size, its users, its messages, then each
    /// member's rows (member, receipts, counter).
    pub(super) fn conversation(&mut self, conv: i64, out: &mut Loader) -> Result<()> {
        let remaining = self.plan.total - self.done;
        let n = self.size(remaining) as usize;
        let (seen, users) = self.users(n);
        let m = self.message_count(n);
        let mut members = self.members(&users, m);
        let history = self.messages(conv, &mut members, m, out);
        self.truth.messages += m as u64;
        let mut current = Current {
            conv,
            seen,
            phantoms: Vec::new(),
            history,
        };
        for mb in &members {
            self.member_rows(&mut current, mb, out)?;
        }
        self.truth.members += n as u64;
        self.truth.conversations += 1;
        Ok(())
    }

    /// `n` distinct users, drawn from the plan's user ids (1 and up): the set, and the users in
    /// the order drawn.
    fn users(&mut self, n: usize) -> (HashSet<u64>, Vec<u64>) {
        let mut seen = HashSet::with_capacity(n);
        let mut users = Vec::with_capacity(n);
        while users.len() < n {
            let u = 1 + self.rng.below(self.plan.users);
            if seen.insert(u) {
                users.push(u);
            }
        }
        (seen, users)
    }

    /// The message count of a conversation of `n` members: ~3 per member, skewed (x has mean
    /// ~1, median ~0.5, max ~12.7), 0 for a few, at most the plan's maximum.
    fn message_count(&mut self, n: usize) -> usize {
        if self.rng.chance(0.03) {
            0
        } else {
            let x = 0.254 / (self.rng.unit() + 0.02);
            ((n as f64 * 3.0 * x) as u64 + self.rng.below(2)).min(self.plan.max_messages) as usize
        }
    }

    /// The members of a conversation of `m` messages, one per user: some left, some (not the
    /// first) joined late when the conversation has 3 members or more and 2 messages or more.
    fn members(&mut self, users: &[u64], m: usize) -> Vec<Member> {
        let n = users.len();
        let mut members: Vec<Member> = users
            .iter()
            .map(|&user| Member {
                user,
                active: true,
                join_idx: None,
                own: Vec::new(),
                own_countable: vec![0],
            })
            .collect();
        for (i, mb) in members.iter_mut().enumerate() {
            mb.active = !self.rng.chance(0.03);
            if i > 0 && n >= 3 && m >= 2 && self.rng.chance(0.15) {
                mb.join_idx = Some(self.rng.below(m as u64) as usize);
            }
        }
        members
    }

    /// Writes the `m` messages of conversation `conv`: positions with occasional gaps, flags,
    /// senders (skewed towards the first members; none before they joined), times. Records
    /// each sender's own messages in `members`.
    fn messages(
        &mut self,
        conv: i64,
        members: &mut [Member],
        m: usize,
        out: &mut Loader,
    ) -> History {
        let n = members.len();
        let large = n > 20;
        let mut ids = Vec::with_capacity(m);
        let mut countable = Vec::with_capacity(m);
        let mut next: i64 = 1;
        let mut t: i64 = 1_600_000_000 + self.rng.below(60_000_000) as i64;
        for i in 0..m {
            if self.rng.chance(0.02) {
                next += 1 + self.rng.below(3) as i64;
            }
            let id = next;
            next += 1;
            t += 1 + self.rng.below(3600) as i64;
            let system = self.rng.chance(0.02);
            let deleted = !system && self.rng.chance(0.03);
            let sender = if system {
                None
            } else {
                let v = self.rng.unit();
                let skew = if large { v * v * v } else { v * v };
                let mut s = if n == 2 {
                    self.rng.below(2) as usize
                } else {
                    ((n as f64 * skew) as usize).min(n - 1)
                };
                if members[s].join_idx.is_some_and(|j| i <= j) {
                    s = 0;
                }
                Some(s)
            };
            let c = !system && !deleted;
            if let Some(s) = sender {
                let mb = &mut members[s];
                mb.own.push(i);
                let last = *mb.own_countable.last().unwrap_or(&0);
                mb.own_countable.push(last + u32::from(c));
            }
            ids.push(id);
            countable.push(c);
            let row = out.row(T_MESSAGES);
            let _ = match sender {
                Some(s) => write!(
                    row,
                    "({conv}, {id}, 'u{}', {}, 0, {t}, NULL)",
                    members[s].user,
                    i32::from(deleted)
                ),
                None => write!(row, "({conv}, {id}, 'system', 0, 1, {t}, NULL)"),
            };
        }
        History::new(ids, &countable)
    }

    /// Writes one member's rows: its member row, its receipts, and its counter (true or
    /// drifting; none for some members who left).
    fn member_rows(&mut self, current: &mut Current, mb: &Member, out: &mut Loader) -> Result<()> {
        let conv = current.conv;
        let m = current.history.ids.len();
        let first = mb.first();
        let row = out.row(T_MEMBERS);
        let _ = match mb.join_idx {
            Some(j) => write!(
                row,
                "({conv}, 'u{}', {}, {})",
                mb.user,
                i32::from(mb.active),
                current.history.ids[j]
            ),
            None => write!(
                row,
                "({conv}, 'u{}', {}, NULL)",
                mb.user,
                i32::from(mb.active)
            ),
        };
        let stored: Option<Option<i64>> = if !mb.active {
            self.left(current, mb, out)
        } else if first < m && self.rng.chance(0.6) {
            Some(self.receipt_backed(&current.history, conv, mb, out)?)
        } else {
            Some(Some(self.counter_only(&current.history, mb)))
        };
        if let Some(value) = stored {
            let row = out.row(T_COUNTERS);
            let _ = match value {
                Some(v) => write!(row, "({conv}, 'u{}', {v})", mb.user),
                None => write!(row, "({conv}, 'u{}', NULL)", mb.user),
            };
            self.truth.counter_rows += 1;
        }
        self.done += 1;
        Ok(())
    }

    /// A member who left: sometimes an old receipt; then a counter of 0 or none, or an orphan
    /// (a counter above 0, or a counter row of a user with no member row at all). Returns the
    /// member's own counter (None: no counter row).
    fn left(
        &mut self,
        current: &mut Current,
        mb: &Member,
        out: &mut Loader,
    ) -> Option<Option<i64>> {
        let conv = current.conv;
        let m = current.history.ids.len();
        let first = mb.first();
        if first < m && self.rng.chance(0.3) {
            let w = first + self.rng.below((m - first) as u64) as usize;
            let _ = write!(
                out.row(T_RECEIPTS),
                "({conv}, 'u{}', {})",
                mb.user,
                current.history.ids[w]
            );
            self.truth.receipt_rows += 1;
        }
        if self.go(ORPHAN) {
            self.injected[ORPHAN] += 1;
            if self.rng.chance(0.3) {
                // A counter row with no member row at all.
                let user = loop {
                    let u = 1 + self.rng.below(self.plan.users);
                    if !current.seen.contains(&u) && !current.phantoms.contains(&u) {
                        break u;
                    }
                };
                current.phantoms.push(user);
                let value = 1 + self.rng.below(20) as i64;
                let _ = write!(out.row(T_COUNTERS), "({conv}, 'u{user}', {value})");
                self.truth.counter_rows += 1;
                Some(Some(0))
            } else {
                Some(Some(1 + self.rng.below(20) as i64))
            }
        } else if self.rng.chance(0.1) {
            None
        } else {
            Some(Some(0))
        }
    }

    /// An active member whose watermark is its highest receipt: writes one or two receipts and
    /// returns its counter, true or drifting (see [`Gen::inject`]).
    fn receipt_backed(
        &mut self,
        history: &History,
        conv: i64,
        mb: &Member,
        out: &mut Loader,
    ) -> Result<Option<i64>> {
        let m = history.ids.len();
        let first = mb.first();
        let w = if self.rng.chance(0.35) {
            m - 1
        } else {
            let v = self.rng.unit();
            let back = ((m - first) as f64 * v * v * v) as usize;
            (m - 1).saturating_sub(back).max(first)
        };
        let older = if self.rng.chance(0.2) {
            Some(first + self.rng.below((w - first + 1) as u64) as usize)
        } else {
            None
        };
        let mut receipts = vec![history.ids[w]];
        if let Some(o) = older {
            receipts.push(history.ids[o]);
            if self.rng.chance(0.5) {
                receipts.swap(0, 1);
            }
        }
        for r in receipts {
            let _ = write!(out.row(T_RECEIPTS), "({conv}, 'u{}', {r})", mb.user);
            self.truth.receipt_rows += 1;
        }
        let f = history.facts(mb, w + 1);
        self.inject(&f)
    }

    /// An active member with a counter and no receipt: the counter defines the watermark, so
    /// any k in 0..=L (L: the member's countable messages) is true; returns the one picked.
    fn counter_only(&mut self, history: &History, mb: &Member) -> i64 {
        let l = history.facts(mb, mb.first()).total;
        let k = if l == 0 || self.rng.chance(0.45) {
            0
        } else if self.rng.chance(0.1) {
            l
        } else {
            let v = self.rng.unit();
            1 + ((l - 1) as f64 * v * v * v) as i64
        };
        k.min(l)
    }

    /// The stored counter of a receipt-backed active member with facts `f`: the true value, or
    /// a drifting value of one class when that class is due and the member allows it.
    pub(super) fn inject(&mut self, f: &Facts) -> Result<Option<i64>> {
        let start = self.rng.below(9) as usize;
        for step in 0..9 {
            let c = (start + step) % 9;
            let Some(value) = self.candidate(c, f) else {
                continue;
            };
            if !self.go(c) {
                continue;
            }
            let got = expected_class(value, true, f);
            if got != Some(c) {
                bail!(
                    "generate: internal error: value {value:?} for {f:?} meant as {} classifies as {:?}",
                    DriftClass::ALL[c],
                    got.map(|g| DriftClass::ALL[g])
                );
            }
            self.injected[c] += 1;
            return Ok(value);
        }
        Ok(Some(f.recomputed))
    }

    /// A stored value of class `c` for a member with facts `f`, if the member allows one.
    pub(super) fn candidate(&mut self, c: usize, f: &Facts) -> Option<Option<i64>> {
        let (t, o, e, total) = (f.recomputed, f.own, f.excluded, f.total);
        // A drift d that would be read as own or excluded messages counted.
        let taken = |d: i64| (o > 0 && d == o) || (e > 0 && d == e);
        match c {
            NULL_COUNTER => Some(None),
            NEGATIVE => Some(Some(-1 - self.rng.below(5) as i64)),
            OWN if o > 0 => Some(Some(t + o)),
            EXCLUDED if e > 0 && e != o => Some(Some(t + e)),
            CLEARED if t > 0 => Some(Some(0)),
            EXCEEDS => {
                let mut s = total + 1 + self.rng.below(5) as i64;
                while taken(s - t) {
                    s += 1;
                }
                Some(Some(s))
            }
            OVERCOUNT => {
                let room = total - t;
                let mut blocked = [o, e];
                blocked.sort_unstable();
                let free = room
                    - (blocked[0] >= 1 && blocked[0] <= room) as i64
                    - (blocked[1] >= 1 && blocked[1] <= room && blocked[1] != blocked[0]) as i64;
                if room < 1 || free < 1 {
                    return None;
                }
                let mut d = 1 + self.rng.below(room.min(10) as u64) as i64;
                while taken(d) {
                    d = d % room + 1;
                }
                Some(Some(t + d))
            }
            UNDERCOUNT if t >= 2 => {
                Some(Some(t - 1 - self.rng.below((t - 1).min(10) as u64) as i64))
            }
            _ => None,
        }
    }
}
