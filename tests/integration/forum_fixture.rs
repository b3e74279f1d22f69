//! The forum fixture of issue 24: a schema of a user's own design that names nothing the way
//! tidemark's name lists do. `topics`, `users`, `posts (id, topic_id, post_number, user_id,
//! post_type, deleted_at, created_at)` with `UNIQUE (topic_id, post_number)` (a per-topic
//! number beside the global `id`), `topic_users (topic_id, user_id, last_read_post_number,
//! last_visited_at, unread_posts, joined_at, left_at)`. System posts have `post_type` 3, deleted
//! posts a `deleted_at` (TEXT on SQLite); late joiners, members who left, and three kinds of
//! read evidence: a last-read post number, only a last visit time, or only the counter.
//!
//! The generator keeps its truth ([`Forum`]), from which the test builds the independent model
//! (`common::model`): the values are never read back through tidemark. [`Forum::statements`]
//! writes the database; `renamed` gives the copy whose conversation key is `thread_id`, on
//! which the names alone lead to the global `posts.id` as the position beside the per-topic
//! `last_read_post_number` (issue 24, friction 2).

use std::collections::BTreeMap;

use crate::common::model::{Legacy, Member, Msg};
use crate::common::Backend;

/// 2024-03-01 00:00:00 UTC, the fixture's first instant (seconds since the epoch).
const BASE: i64 = 1_709_251_200;

/// splitmix64: the same stream from a seed on every platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n.max(1))) >> 64) as u64
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// One post.
#[derive(Debug, Clone)]
pub struct Post {
    pub id: i64,
    pub topic: i64,
    pub number: i64,
    pub user: i64,
    /// 1 regular, 3 a system notice ("closed", "pinned").
    pub post_type: i64,
    pub deleted_at: Option<i64>,
    pub created_at: i64,
}

/// One `topic_users` row.
#[derive(Debug, Clone)]
pub struct TopicUser {
    pub topic: i64,
    pub user: i64,
    pub last_read: Option<i64>,
    pub last_visited: Option<i64>,
    pub unread: i64,
    pub joined_at: i64,
    pub left_at: Option<i64>,
}

/// The generated forum.
#[derive(Debug, Clone)]
pub struct Forum {
    pub users: i64,
    pub topics: Vec<(i64, i64, i64)>,
    pub posts: Vec<Post>,
    pub members: Vec<TopicUser>,
}

/// The system user, author of every system post.
const SYSTEM: i64 = 1;

impl Forum {
    /// The forum of `seed`: 14 topics, 30 users, 520 posts interleaved over the topics (so a
    /// topic's global ids are far from its post numbers), about 130 members.
    pub fn generate(seed: u64) -> Forum {
        let mut rng = Rng(seed);
        let users = 30;
        let n_topics = 14;
        let steps = 520;
        let mut topics = Vec::new();
        let mut members: Vec<TopicUser> = Vec::new();
        // Each topic opens at step 3 * t; its members are chosen up front, a third of them
        // join later; a tenth leave.
        for t in 1..=n_topics {
            let opened = BASE + (3 * t) * 600;
            let author = 2 + rng.below(users as u64 - 1) as i64;
            topics.push((t, author, opened));
            let mut who = vec![author];
            let size = 6 + rng.below(7) as usize;
            while who.len() < size {
                let u = 2 + rng.below(users as u64 - 1) as i64;
                if !who.contains(&u) {
                    who.push(u);
                }
            }
            for (j, &u) in who.iter().enumerate() {
                let late = j > 0 && rng.chance(33);
                let joined_at = if late {
                    opened + 600 * (20 + rng.below(steps as u64 / 2) as i64) + 7
                } else {
                    opened
                };
                let left_at = (j > 0 && rng.chance(10))
                    .then(|| joined_at + 600 * (30 + rng.below(120) as i64));
                members.push(TopicUser {
                    topic: t,
                    user: u,
                    last_read: None,
                    last_visited: None,
                    unread: 0,
                    joined_at,
                    left_at,
                });
            }
        }
        let mut posts: Vec<Post> = Vec::new();
        let mut numbers: BTreeMap<i64, i64> = BTreeMap::new();
        for step in 0..steps {
            let created_at = BASE + step * 600 + 60;
            // Topics already open, the newer ones busier.
            let open: Vec<i64> = topics
                .iter()
                .filter(|(_, _, o)| *o <= created_at)
                .map(|(t, _, _)| *t)
                .collect();
            if open.is_empty() {
                continue;
            }
            let topic = open[rng.below(open.len() as u64) as usize];
            let present: Vec<i64> = members
                .iter()
                .filter(|m| {
                    m.topic == topic
                        && m.joined_at <= created_at
                        && m.left_at.is_none_or(|l| l > created_at)
                })
                .map(|m| m.user)
                .collect();
            let system = rng.chance(8) || present.is_empty();
            let user = if system {
                SYSTEM
            } else {
                present[rng.below(present.len() as u64) as usize]
            };
            let number = numbers.entry(topic).or_insert(0);
            *number += 1;
            let deleted_at = (!system && rng.chance(7)).then(|| created_at + 3600);
            posts.push(Post {
                id: posts.len() as i64 + 1,
                topic,
                number: *number,
                user,
                post_type: if system { 3 } else { 1 },
                deleted_at,
                created_at,
            });
        }
        let end = BASE + steps * 600 + 60;
        let mut forum = Forum {
            users,
            topics,
            posts,
            members: Vec::new(),
        };
        for mut m in members {
            // The member's last visit: what they had read then is every post created before it.
            let from = m.joined_at;
            let to = m.left_at.unwrap_or(end);
            let visit = from + rng.below((to - from).max(1) as u64) as i64;
            let read = forum.number_at(m.topic, visit);
            match rng.below(100) {
                0..=64 => {
                    m.last_read = Some(read).filter(|r| *r > 0);
                    m.last_visited = Some(visit);
                }
                65..=84 => m.last_visited = Some(visit),
                _ => {}
            }
            let join = forum.number_at(m.topic, m.joined_at);
            let truth = forum
                .posts
                .iter()
                .filter(|p| {
                    p.topic == m.topic
                        && p.number > read.max(join)
                        && p.post_type == 1
                        && p.deleted_at.is_none()
                        && p.user != m.user
                })
                .count() as i64;
            m.unread = match (m.left_at, rng.below(100)) {
                // Owed nothing; a few kept their counter (orphans).
                (Some(_), r) if r < 70 => 0,
                (Some(_), _) => truth + 1,
                // The legacy counter's faults, on a few members.
                (None, 0..=3) if truth > 0 => 0,
                (None, 4..=7) => truth + 2,
                (None, 8..=10) if truth > 1 => truth - 1,
                _ => truth,
            };
            forum.members.push(m);
        }
        forum
    }

    /// The highest post number of `topic` created at or before `t` (0: none).
    fn number_at(&self, topic: i64, t: i64) -> i64 {
        self.posts
            .iter()
            .filter(|p| p.topic == topic && p.created_at <= t)
            .map(|p| p.number)
            .max()
            .unwrap_or(0)
    }

    /// The statements that create and fill the forum on `backend`; `renamed`: the conversation
    /// key is `thread_id` in both tables.
    pub fn statements(&self, backend: Backend, renamed: bool) -> Vec<String> {
        let conv = if renamed { "thread_id" } else { "topic_id" };
        let (id, ts, deleted, int) = match backend {
            Backend::Postgres => ("BIGSERIAL PRIMARY KEY", "TIMESTAMP", "TIMESTAMP", "INTEGER"),
            Backend::Mysql => (
                "BIGINT AUTO_INCREMENT PRIMARY KEY",
                "DATETIME",
                "DATETIME",
                "INT",
            ),
            Backend::Sqlite => ("INTEGER PRIMARY KEY", "DATETIME", "TEXT", "INTEGER"),
        };
        let mut out = vec![
            "CREATE TABLE users (id BIGINT NOT NULL PRIMARY KEY, username VARCHAR(60) NOT NULL)"
                .to_string(),
            format!(
                "CREATE TABLE topics (id BIGINT NOT NULL PRIMARY KEY, title VARCHAR(200) NOT NULL, \
                 user_id BIGINT NOT NULL REFERENCES users (id), created_at {ts} NOT NULL)"
            ),
            format!(
                "CREATE TABLE posts (id {id}, {conv} BIGINT NOT NULL REFERENCES topics (id), \
                 post_number {int} NOT NULL, user_id BIGINT NOT NULL REFERENCES users (id), \
                 post_type {int} NOT NULL DEFAULT 1, deleted_at {deleted} NULL, \
                 created_at {ts} NOT NULL, CONSTRAINT posts_{conv}_post_number UNIQUE ({conv}, post_number))"
            ),
            format!(
                "CREATE TABLE topic_users ({conv} BIGINT NOT NULL REFERENCES topics (id), \
                 user_id BIGINT NOT NULL REFERENCES users (id), last_read_post_number {int} NULL, \
                 last_visited_at {ts} NULL, unread_posts {int} NOT NULL DEFAULT 0, \
                 joined_at {ts} NOT NULL, left_at {ts} NULL, PRIMARY KEY ({conv}, user_id))"
            ),
            "CREATE INDEX topic_users_user ON topic_users (user_id)".to_string(),
        ];
        let t = |s: i64| format!("'{}'", time(s));
        let opt = |v: Option<String>| v.unwrap_or_else(|| "NULL".into());
        let users: Vec<String> = (1..=self.users)
            .map(|u| {
                let name = if u == SYSTEM {
                    "system".into()
                } else {
                    format!("user{u}")
                };
                format!("({u}, '{name}')")
            })
            .collect();
        out.extend(inserts("users (id, username)", &users));
        let topics: Vec<String> = self
            .topics
            .iter()
            .map(|(id, user, at)| format!("({id}, 'Topic {id}', {user}, {})", t(*at)))
            .collect();
        out.extend(inserts("topics (id, title, user_id, created_at)", &topics));
        let posts: Vec<String> = self
            .posts
            .iter()
            .map(|p| {
                format!(
                    "({}, {}, {}, {}, {}, {}, {})",
                    p.id,
                    p.topic,
                    p.number,
                    p.user,
                    p.post_type,
                    opt(p.deleted_at.map(t)),
                    t(p.created_at)
                )
            })
            .collect();
        out.extend(inserts(
            &format!("posts (id, {conv}, post_number, user_id, post_type, deleted_at, created_at)"),
            &posts,
        ));
        let members: Vec<String> = self
            .members
            .iter()
            .map(|m| {
                format!(
                    "({}, {}, {}, {}, {}, {}, {})",
                    m.topic,
                    m.user,
                    opt(m.last_read.map(|v| v.to_string())),
                    opt(m.last_visited.map(t)),
                    m.unread,
                    t(m.joined_at),
                    opt(m.left_at.map(t))
                )
            })
            .collect();
        out.extend(inserts(
            &format!(
                "topic_users ({conv}, user_id, last_read_post_number, last_visited_at, \
                 unread_posts, joined_at, left_at)"
            ),
            &members,
        ));
        out
    }

    /// The forum in the terms of the independent model, for the mapping `inspect` should
    /// propose: positions are post numbers; countable: regular posts not deleted; members
    /// active while `left_at` is NULL, their join position the highest post number created at
    /// or before `joined_at`; evidence: `last_read_post_number`, then `last_visited_at`, then
    /// the counter.
    pub fn legacy(&self) -> Legacy {
        let key = |t: i64, u: i64| (t.to_string(), u.to_string());
        let mut l = Legacy::default();
        for p in &self.posts {
            l.msgs.push(Msg {
                conv: p.topic.to_string(),
                id: p.number,
                sender: Some(p.user.to_string()),
                deleted: p.deleted_at.is_some(),
                system: p.post_type != 1,
                stored: None,
            });
            l.created
                .insert((p.topic.to_string(), p.number), p.created_at);
        }
        for m in &self.members {
            let k = key(m.topic, m.user);
            let join = l.position_at(&k.0, m.joined_at);
            l.members.insert(
                k.clone(),
                Member {
                    active: m.left_at.is_none(),
                    join: Some(join),
                },
            );
            l.counters.insert(k.clone(), Some(m.unread));
            if let Some(r) = m.last_read {
                l.receipts.push((k.clone(), r));
            }
            if let Some(v) = m.last_visited {
                l.visits.insert(k, v);
            }
        }
        l
    }
}

/// `YYYY-MM-DD HH:MM:SS` of a UTC Unix time (as every engine reads a timestamp literal).
fn time(s: i64) -> String {
    let days = s.div_euclid(86_400);
    let secs = s.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// Multi-row INSERTs of `rows` into `into`, 100 rows each.
fn inserts(into: &str, rows: &[String]) -> Vec<String> {
    rows.chunks(100)
        .map(|c| format!("INSERT INTO {into} VALUES {}", c.join(", ")))
        .collect()
}

#[test]
fn times_are_civil() {
    assert_eq!(time(BASE), "2024-03-01 00:00:00");
    assert_eq!(time(BASE - 1), "2024-02-29 23:59:59");
}

/// Writes the SQLite forum (and its renamed copy) to `$TIDEMARK_FORUM_DIR`, for a look by hand:
/// `TIDEMARK_FORUM_DIR=/tmp/forum cargo test --test integration forum_fixture::write -- --ignored`.
#[tokio::test]
#[ignore]
async fn write() {
    let dir = std::path::PathBuf::from(std::env::var("TIDEMARK_FORUM_DIR").unwrap());
    std::fs::create_dir_all(&dir).unwrap();
    let forum = Forum::generate(24);
    for (name, renamed) in [("forum.db", false), ("forum-renamed.db", true)] {
        let path = dir.join(name);
        let _ = std::fs::remove_file(&path);
        let url = format!("sqlite:{}?mode=rwc", path.display());
        let mut conn = crate::common::connect(&url).await;
        crate::common::exec_all(&mut conn, &forum.statements(Backend::Sqlite, renamed)).await;
    }
}
