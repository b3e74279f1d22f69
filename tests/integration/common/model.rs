//! An independent model of `shared/spec/semantics.md`, written from the spec in plain Rust, not
//! from tidemark's SQL: what the backfill must write and what the audit must report for a small
//! legacy database. The property tests (`audit_model`, `differential`) hold tidemark's results
//! against it.
//!
//! The mapping modelled is the scenarios' (`tidemark::legacy_schema::mapping_toml`): messages
//! countable when neither deleted nor system; members with an active flag and a join position;
//! the counter per member (shape A) or per message (shape B); evidence: read receipts
//! (`position`, the highest per member), then for shape A the counter; policy `first`; no
//! creation time, so no settle time.
//!
//! Where semantics.md leaves a detail open, the model takes it from the scenarios and says so:
//! - "messages after the watermark" for `own_messages_counted` / `excluded_counted` start after
//!   max(watermark, join position) (scenario S11 expects `exceeds_history` for a member whose
//!   counter counted the history before they joined, not `excluded_counted`);
//! - shape B: a message that is not countable is unread by nobody (recomputed 0; the class
//!   table "holds per message", so `excluded_counted` compares with what it would count);
//!   `orphan` counts the members who left, or joined at or after the message, and have not
//!   read it; the sender's "own message counted" is 1 when the sender is an active member who
//!   joined before it;
//! - the counter evidence's "highest position of c" (k <= 0) is the highest position of any
//!   message of the conversation, 0 when it has none;
//! - the report's `stored_unread` and `recomputed_unread` are the compared (clamped) values;
//! - messages only some readers count (issue 22, [`Readers`]): a message counts for reader u
//!   when it is addressed to u, or, not addressed, it is not restricted or u is admitted; the
//!   rule applies to every per-reader fact (recomputed, own, excluded, total) and to the
//!   counter evidence's L; an addressed message whose sender is its recipient is the
//!   recipient's own; whether a message hidden from a reader is one of its excluded messages
//!   is [`Hidden`] (issue 29: it is, where the legacy counter counted it);
//! - a receipt below 0 is no position (issue 29 row 23): the next source applies; 0 is the
//!   application's own "nothing read" (scenarios.json S7, K1, K2: watermark 0 from position).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;

/// Shape C, read flags per message (issue 22): its backfill evidence, out-of-order counts and
/// audit, over the types of this file.
pub mod flags;

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// (conversation, user), as the keys are written.
pub type Key = (String, String);

/// One message.
#[derive(Debug, Clone)]
pub struct Msg {
    /// Its conversation.
    pub conv: String,
    /// Its position (unique in the database).
    pub id: i64,
    /// Its sender (None: an account that no longer exists, never a member's own).
    pub sender: Option<String>,
    /// Deleted (not countable).
    pub deleted: bool,
    /// A system message (not countable).
    pub system: bool,
    /// The shape B counter.
    pub stored: Option<i64>,
}

impl Msg {
    /// semantics.md: countable (before the per-reader rules).
    pub fn countable(&self) -> bool {
        !self.deleted && !self.system
    }
}

/// One member row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    /// `active = 1`.
    pub active: bool,
    /// `join_position`.
    pub join: Option<i64>,
}

/// One row of the watermark table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watermark {
    /// `last_read_id`.
    pub last_read_id: i64,
    /// `source`: the evidence the backfill wrote it from (None: never written by it, or
    /// written by the application with no source).
    pub source: Option<String>,
    /// `backfilled_id`: the value the backfill wrote.
    pub backfilled: Option<i64>,
}

impl Watermark {
    /// A watermark the application wrote (the three columns it owns).
    pub fn application(last_read_id: i64) -> Watermark {
        Watermark {
            last_read_id,
            source: None,
            backfilled: None,
        }
    }

    /// semantics.md "Provenance names where the stored value came from": the backfill's
    /// evidence while the value is the one it wrote, else `application`.
    pub fn provenance(&self) -> String {
        match self.backfilled {
            None => self.source.clone().unwrap_or_else(|| "application".into()),
            Some(b) if b == self.last_read_id => self.source.clone().unwrap_or_default(),
            Some(_) => "application".into(),
        }
    }
}

/// A small legacy database.
#[derive(Debug, Clone, Default)]
pub struct Legacy {
    /// Shape B (the counter per message) instead of A.
    pub per_message: bool,
    /// The messages.
    pub msgs: Vec<Msg>,
    /// The member rows.
    pub members: BTreeMap<Key, Member>,
    /// The shape A counter rows (a value may be NULL).
    pub counters: BTreeMap<Key, Option<i64>>,
    /// Read receipts: (member, position); several per member, the highest counts.
    pub receipts: Vec<(Key, i64)>,
    /// Messages only some readers count (issue 22); empty: every reader counts every message.
    pub readers: Readers,
    /// Creation times of the messages, by (conversation, position), in seconds: needed only
    /// by timestamp evidence and join times.
    pub created: BTreeMap<(String, i64), i64>,
    /// Timestamp evidence (a last visit time per member, in seconds), after the receipts.
    pub visits: BTreeMap<Key, i64>,
    /// What the legacy counter counted of the messages the reader rules keep from a reader.
    pub hidden: Hidden,
}

/// What the legacy counter counted of the messages [`Readers`] keeps from a reader: whether
/// such a message is one of that reader's excluded messages (`excluded_counted`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Hidden {
    /// semantics.md since issue 29 (row 15), the mapping without `legacy_countable`: the legacy
    /// counter counted everything, so a hidden message after the watermark (not the reader's
    /// own) is excluded, as a deleted one is.
    #[default]
    Counted,
    /// The mapping's `legacy_countable` says the legacy counter never counted restricted or
    /// addressed messages: excluded are the not countable messages that are neither.
    NotCounted,
}

/// semantics.md "Messages only some readers count" (issue 22), by message position (unique
/// in the database).
#[derive(Debug, Clone, Default)]
pub struct Readers {
    /// Restricted messages (a staff-only whisper).
    pub restricted: BTreeSet<i64>,
    /// The members a restricted message counts for (staff).
    pub admitted: BTreeSet<Key>,
    /// Addressed messages and the one reader each counts for (an invite and its invitee).
    pub recipient: BTreeMap<i64, String>,
}

impl Legacy {
    /// Whether `m` counts for `user` of its conversation at all (before countable, own and
    /// the watermark): addressed to them, or not addressed and not restricted or admitted.
    pub fn visible(&self, m: &Msg, user: &str) -> bool {
        match self.readers.recipient.get(&m.id) {
            Some(r) => r == user,
            None => {
                !self.readers.restricted.contains(&m.id)
                    || self
                        .readers
                        .admitted
                        .contains(&(m.conv.clone(), user.to_string()))
            }
        }
    }

    /// semantics.md "Backfill" 2 (and `join_time`): the highest position of a message of
    /// `conv` created at or before `t`, 0 when none was.
    pub fn position_at(&self, conv: &str, t: i64) -> i64 {
        self.created
            .iter()
            .filter(|((c, _), at)| c == conv && **at <= t)
            .map(|((_, id), _)| *id)
            .max()
            .unwrap_or(0)
    }
}

/// The audit the model expects.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Audit {
    /// The report's rows as CSV cells, sorted.
    pub rows: Vec<Vec<String>>,
    /// Rows compared.
    pub rows_checked: u64,
    /// Sum of |drift| (NULL counters add nothing), saturating.
    pub sum_abs_drift: i64,
    /// Largest |drift|.
    pub max_abs_drift: i64,
    /// Drifting rows per class (only classes with rows).
    pub by_class: BTreeMap<String, u64>,
}

/// What the classes compare (semantics.md "Drift classes"); exact counts.
struct Facts {
    stored: Option<i64>,
    recomputed: i64,
    orphan: bool,
    own: i64,
    excluded: i64,
    total: i64,
}

fn cell(v: Option<i64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// (clamped stored, clamped recomputed, drift, class), or None when the row does not drift.
fn classify(f: &Facts, cap: Option<i64>) -> Option<(Option<i64>, i64, Option<i64>, &'static str)> {
    let clamp = |x: i64| cap.map_or(x, |n| x.min(n + 1));
    let rc = clamp(f.recomputed);
    let Some(stored) = f.stored else {
        return Some((None, rc, None, "null_counter"));
    };
    let sc = clamp(stored);
    if sc == rc {
        return None;
    }
    let class = if f.orphan {
        "orphan"
    } else if sc < 0 {
        "negative"
    } else if f.own > 0 && sc == clamp(f.recomputed.saturating_add(f.own)) {
        "own_messages_counted"
    } else if f.excluded > 0 && sc == clamp(f.recomputed.saturating_add(f.excluded)) {
        "excluded_counted"
    } else if sc == 0 && rc > 0 {
        "cleared"
    } else if sc > clamp(f.total) {
        "exceeds_history"
    } else if sc > rc {
        "overcount"
    } else {
        "undercount"
    };
    Some((Some(sc), rc, Some(sc - rc), class))
}

/// semantics.md "Backfill: where each last_read_id comes from", for the mapping above: every
/// member row gets the highest of its receipts; failing that, the position its visit time
/// gives (timestamp evidence, when the legacy database has visits); failing that, an active member of shape A its
/// counter k (k <= 0: the conversation's highest position; 0 < k < |L|: L[k], L the positions
/// countable for it newest first; k >= |L|: 0), which only fills a missing watermark. The write
/// is forward-only, and a write that does not advance a watermark changes nothing (its source
/// included).
pub fn backfill(l: &Legacy, existing: &BTreeMap<Key, Watermark>) -> BTreeMap<Key, Watermark> {
    let mut out = existing.clone();
    for (key, member) in &l.members {
        let (conv, user) = key;
        let position = l
            .receipts
            .iter()
            .filter(|(k, p)| k == key && *p >= 0)
            .map(|(_, p)| *p)
            .max();
        let counter = if l.per_message || !member.active {
            None
        } else {
            l.counters.get(key).copied().flatten()
        };
        let visit = l.visits.get(key).map(|t| l.position_at(conv, *t));
        let (value, source) = match (position, visit, counter) {
            (Some(p), _, _) => (p, "position"),
            (None, Some(v), _) => (v, "timestamp"),
            (None, None, Some(k)) => {
                if existing.contains_key(key) {
                    continue; // a counter never advances an existing watermark
                }
                (counter_position(l, conv, user, *member, k), "counter")
            }
            (None, None, None) => continue,
        };
        let advances = out.get(key).is_none_or(|w| value > w.last_read_id);
        if advances {
            out.insert(
                key.clone(),
                Watermark {
                    last_read_id: value,
                    source: Some(source.into()),
                    backfilled: Some(value),
                },
            );
        }
    }
    out
}

/// The watermark a counter k gives member `user` of `conv` (semantics.md, Backfill 3).
fn counter_position(l: &Legacy, conv: &str, user: &str, member: Member, k: i64) -> i64 {
    let mut ls: Vec<i64> = l
        .msgs
        .iter()
        .filter(|m| m.conv == conv && m.countable() && m.sender.as_deref() != Some(user))
        .filter(|m| member.join.is_none_or(|j| m.id > j) && l.visible(m, user))
        .map(|m| m.id)
        .collect();
    ls.sort_unstable_by(|a, b| b.cmp(a));
    if k <= 0 {
        return l
            .msgs
            .iter()
            .filter(|m| m.conv == conv)
            .map(|m| m.id)
            .max()
            .unwrap_or(0);
    }
    usize::try_from(k)
        .ok()
        .and_then(|k| ls.get(k).copied())
        .unwrap_or(0)
}

/// The audit of `l` under the watermarks `wms`, with `--cap` (semantics.md "Legacy shapes",
/// "Capped counts", "Drift classes"; the report's columns of interface.md).
pub fn audit(l: &Legacy, wms: &BTreeMap<Key, Watermark>, cap: Option<i64>) -> Audit {
    let mut a = Audit::default();
    if l.per_message {
        a.rows_checked = l.msgs.len() as u64;
        for m in &l.msgs {
            if let Some((sc, rc, drift, class)) = classify(&message_facts(l, wms, m, cap), cap) {
                add(&mut a, drift, class);
                a.rows.push(vec![
                    m.conv.clone(),
                    m.id.to_string(),
                    cell(sc),
                    rc.to_string(),
                    cell(drift),
                    class.to_string(),
                ]);
            }
        }
    } else {
        a.rows_checked = l.counters.len() as u64;
        for ((conv, user), &stored) in &l.counters {
            let key = (conv.clone(), user.clone());
            let facts = member_facts(l, wms, &key, stored);
            if let Some((sc, rc, drift, class)) = classify(&facts, cap) {
                add(&mut a, drift, class);
                let wm = wms.get(&key);
                a.rows.push(vec![
                    conv.clone(),
                    user.clone(),
                    cell(sc),
                    rc.to_string(),
                    cell(drift),
                    class.to_string(),
                    cell(wm.map(|w| w.last_read_id)),
                    wm.map(Watermark::provenance).unwrap_or_default(),
                ]);
            }
        }
    }
    a.rows.sort();
    a
}

/// Adds one drifting row to the sums.
fn add(a: &mut Audit, drift: Option<i64>, class: &str) {
    *a.by_class.entry(class.to_string()).or_default() += 1;
    if let Some(d) = drift {
        let abs = d.checked_abs().unwrap_or(i64::MAX);
        a.sum_abs_drift = a.sum_abs_drift.saturating_add(abs);
        a.max_abs_drift = a.max_abs_drift.max(abs);
    }
}

/// One of several counters per member (semantics.md "Several counters per member", issue
/// 22): its name (the report's last column), its stored values, what it counts besides
/// `countable` (`only`: root messages, say; also what it counted then) and, for a mention
/// counter, the (message position, mentioned user) pairs.
pub struct CounterModel<'a> {
    /// `[[counter]] name`.
    pub name: &'a str,
    /// The stored values per member (a value may be NULL).
    pub stored: &'a BTreeMap<Key, Option<i64>>,
    /// The counter's own predicate over a message.
    pub only: &'a dyn Fn(&Msg) -> bool,
    /// A mention counter's mentions: (message position, user).
    pub mentions: Option<&'a std::collections::BTreeSet<(i64, String)>>,
}

/// The audit rows of one of several counters, each row ending with the counter's name.
/// The model's reading: a counter counts what an unread counter counts restricted to
/// `only`; a mention counter counts, of those, the messages mentioning the member: its
/// recomputed value is the countable messages after the watermark that mention the member
/// and are not the member's own (own messages never mention-count), `own` the member's own
/// messages mentioning itself after it, `excluded` the not countable ones of others
/// mentioning it, `total` every countable mention of it by others after its join.
pub fn audit_counter(
    l: &Legacy,
    wms: &BTreeMap<Key, Watermark>,
    cap: Option<i64>,
    c: &CounterModel<'_>,
) -> Audit {
    let mut a = Audit {
        rows_checked: c.stored.len() as u64,
        ..Default::default()
    };
    for (key, &stored) in c.stored {
        let keep = |m: &Msg, user: &str| {
            (c.only)(m)
                && c.mentions
                    .is_none_or(|mn| mn.contains(&(m.id, user.to_string())))
        };
        let facts = member_facts_of(l, wms, key, stored, &keep);
        if let Some((sc, rc, drift, class)) = classify(&facts, cap) {
            add(&mut a, drift, class);
            let wm = wms.get(key);
            a.rows.push(vec![
                key.0.clone(),
                key.1.clone(),
                cell(sc),
                rc.to_string(),
                cell(drift),
                class.to_string(),
                cell(wm.map(|w| w.last_read_id)),
                wm.map(Watermark::provenance).unwrap_or_default(),
                c.name.to_string(),
            ]);
        }
    }
    a.rows.sort();
    a
}

/// Shape A: the facts of one counter row.
fn member_facts(
    l: &Legacy,
    wms: &BTreeMap<Key, Watermark>,
    key: &Key,
    stored: Option<i64>,
) -> Facts {
    member_facts_of(l, wms, key, stored, &|_, _| true)
}

/// Shape A: the facts of one counter row, of the messages `keep` keeps for the member.
fn member_facts_of(
    l: &Legacy,
    wms: &BTreeMap<Key, Watermark>,
    key: &Key,
    stored: Option<i64>,
    keep: &dyn Fn(&Msg, &str) -> bool,
) -> Facts {
    let (conv, user) = key;
    let member = l.members.get(key);
    let is_member = member.is_some_and(|m| m.active);
    let join = member.and_then(|m| m.join);
    let wm = wms.get(key).map_or(0, |w| w.last_read_id);
    let after_join = |pos: i64| join.is_none_or(|j| pos > j);
    let t = join.map_or(wm, |j| wm.max(j));
    let not_own = |m: &Msg| m.sender.as_deref() != Some(user.as_str());
    // The member's own messages the legacy counter counted (semantics.md: `legacy_countable`
    // says what it counted; "sender's own messages incremented" can only be messages it
    // counted at all): under `Hidden::NotCounted` it never counted restricted or addressed ones.
    let legacy_counted = |m: &Msg| match l.hidden {
        Hidden::Counted => true,
        Hidden::NotCounted => {
            !l.readers.restricted.contains(&m.id) && !l.readers.recipient.contains_key(&m.id)
        }
    };
    let count = |f: &dyn Fn(&Msg) -> bool| {
        l.msgs
            .iter()
            .filter(|m| &m.conv == conv && l.visible(m, user) && keep(m, user) && f(m))
            .count() as i64
    };
    let recomputed = if is_member {
        count(&|m| m.id > wm && m.countable() && not_own(m) && after_join(m.id))
    } else {
        0
    };
    Facts {
        stored,
        recomputed,
        orphan: !is_member,
        own: count(&|m| m.id > t && !not_own(m) && legacy_counted(m)),
        excluded: match l.hidden {
            Hidden::NotCounted => count(&|m| {
                m.id > t
                    && not_own(m)
                    && !m.countable()
                    && !l.readers.restricted.contains(&m.id)
                    && !l.readers.recipient.contains_key(&m.id)
            }),
            Hidden::Counted => l
                .msgs
                .iter()
                .filter(|m| &m.conv == conv && keep(m, user) && m.id > t && not_own(m))
                .filter(|m| !m.countable() || !l.visible(m, user))
                .count() as i64,
        },
        total: count(&|m| m.countable() && not_own(m) && after_join(m.id)),
    }
}

/// Shape B: the facts of one message (semantics.md: `exceeds_history` compares with every
/// reader the message ever had, the members other than the sender who joined before it).
fn message_facts(l: &Legacy, wms: &BTreeMap<Key, Watermark>, m: &Msg, cap: Option<i64>) -> Facts {
    let others: Vec<(&String, Member)> = l
        .members
        .iter()
        .filter(|((c, x), _)| *c == m.conv && Some(x.as_str()) != m.sender.as_deref())
        .map(|((_, x), &mb)| (x, mb))
        .collect();
    let joined_before = |mb: &Member| mb.join.is_none_or(|j| j < m.id);
    let unread = |x: &String| {
        wms.get(&(m.conv.clone(), x.clone()))
            .map_or(0, |w| w.last_read_id)
            < m.id
    };
    let would = others
        .iter()
        .filter(|(x, mb)| mb.active && joined_before(mb) && unread(x))
        .count() as i64;
    let orphans = others
        .iter()
        .filter(|(x, mb)| (!mb.active || !joined_before(mb)) && unread(x))
        .count() as i64;
    let own = m
        .sender
        .as_ref()
        .and_then(|s| l.members.get(&(m.conv.clone(), s.clone())))
        .is_some_and(|mb| mb.active && joined_before(mb));
    let recomputed = if m.countable() { would } else { 0 };
    let clamp = |x: i64| cap.map_or(x, |n| x.min(n + 1));
    let orphan = m
        .stored
        .is_some_and(|s| orphans > 0 && clamp(s) == clamp(recomputed + orphans));
    Facts {
        stored: m.stored,
        recomputed,
        orphan,
        own: own as i64,
        excluded: if m.countable() { 0 } else { would },
        total: others.iter().filter(|(_, mb)| joined_before(mb)).count() as i64,
    }
}

/// How many cases a property runs: `TIDEMARK_PROPTEST_CASES` (or `PROPTEST_CASES`), else
/// `default`.
pub fn cases(default: u32) -> u32 {
    ["TIDEMARK_PROPTEST_CASES", "PROPTEST_CASES"]
        .iter()
        .find_map(|k| std::env::var(k).ok()?.parse().ok())
        .unwrap_or(default)
}

/// Runs a property over `strategy`'s worlds, each checked by `check` on a current-thread
/// runtime of its own, and panics with the minimal failing world.
pub fn run_property<S, F, Fut>(strategy: S, default_cases: u32, check: F)
where
    S: Strategy,
    S::Value: Debug,
    F: Fn(S::Value) -> Fut,
    Fut: std::future::Future<Output = Result<(), TestCaseError>>,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut runner = TestRunner::new(Config {
        cases: cases(default_cases),
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&strategy, |w| rt.block_on(check(w)))
        .unwrap_or_else(|e| panic!("{e}"));
}

/// A text as an SQL string literal (quotes doubled), for the test data's INSERTs.
pub fn sql_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The INSERTs of the watermarks the application wrote before a backfill (`existing`, keyed
/// by (conversation, user), text keys) into `read_watermarks`.
pub fn existing_watermark_inserts(existing: &BTreeMap<Key, Watermark>) -> Vec<String> {
    existing
        .iter()
        .map(|((c, u), wm)| {
            format!(
                "INSERT INTO read_watermarks (user_id, conversation_id, last_read_id) VALUES ({}, {}, {})",
                sql_literal(u),
                sql_literal(c),
                wm.last_read_id
            )
        })
        .collect()
}
