//! Concurrent sends and mark-reads on two connections: every watermark ends where the model says.

use super::*;

/// What one concurrent task did.
#[derive(Debug)]
enum Did {
    /// `user` sent the message with this sequence number.
    Sent(String, i64),
    /// `user` marked read up to this position.
    Marked(String, i64),
}

/// The members of [`concurrent_sends_and_mark_reads`].
const USERS: [&str; 5] = ["u0", "u1", "u2", "u3", "u4"];

/// Task `i` of [`concurrent_sends_and_mark_reads`]: an even one sends (in one transaction: a
/// number from `sequence_next`, the message, the sender's own watermark), an odd one marks read
/// a position in 0..=40.
async fn one_task(pool: AnyPool, app: Arc<App>, i: usize) -> Did {
    let mut c = pool.acquire().await.unwrap();
    let conn: &mut AnyConnection = &mut c;
    if i % 2 == 0 {
        let user = USERS[(i / 2) % USERS.len()].to_string();
        let mut tx = conn.begin().await.unwrap();
        let seq = next_seq(&app, &mut tx).await;
        let sql = format!(
            "INSERT INTO messages (conv_id, sender_id, seq) VALUES ({CONV}, '{user}', {seq})"
        );
        // sqlx::query, not raw_sql: a raw_sql future is not Send for every lifetime.
        sqlx::query(&sql).execute(&mut *tx).await.unwrap();
        app.run(&mut tx, "send_message_own_watermark", &mark(&user, seq))
            .await;
        tx.commit().await.unwrap();
        Did::Sent(user, seq)
    } else {
        let user = USERS[i % USERS.len()].to_string();
        let position = ((i * 37) % 41) as i64;
        app.run(conn, "mark_read", &mark(&user, position)).await;
        Did::Marked(user, position)
    }
}

/// 100 tokio tasks on a pool of 8 connections: 50 sends (a number from `sequence_next`, the
/// message, the sender's own watermark, one transaction) and 50 mark-reads of positions 0..=40 by
/// 5 members. The end state is exact: the numbers are 1..=50 without gap or repeat, each
/// watermark is the highest position its member marked or sent, and each unread count is the
/// number of others' messages above it.
async fn concurrent_sends_and_mark_reads(backend: Backend) {
    let users = USERS;
    let Some(fx) = Fx::create(backend, "two_conn_many", &users).await else {
        return;
    };
    let mut conn = fx.db.connect().await;
    let seq_app = fx.sequence(&mut conn).await;
    seq_app
        .run(
            &mut conn,
            "sequence_new_conversation",
            &[("conversation", V::Int(CONV))],
        )
        .await;
    // Every member has a watermark row, as after the backfill.
    for u in users {
        seq_app.run(&mut conn, "mark_read", &mark(u, 0)).await;
    }
    let pool = AnyPoolOptions::new()
        .max_connections(8)
        .connect(&fx.db.url)
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..100usize {
        tasks.push(tokio::spawn(one_task(pool.clone(), seq_app.clone(), i)));
    }
    let mut done = Vec::new();
    for t in tasks {
        done.push(t.await.unwrap());
    }
    pool.close().await;

    let mut numbers: Vec<i64> = done
        .iter()
        .filter_map(|d| match d {
            Did::Sent(_, s) => Some(*s),
            Did::Marked(..) => None,
        })
        .collect();
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=50).collect::<Vec<i64>>(), "no gap, no repeat");
    let stored = ints(
        &mut conn,
        "SELECT seq FROM messages WHERE conv_id = 1 ORDER BY seq",
    )
    .await;
    assert_eq!(stored, numbers);

    let mut want_wm: BTreeMap<&str, i64> = users.iter().map(|u| (*u, 0)).collect();
    for d in &done {
        let (Did::Sent(u, p) | Did::Marked(u, p)) = d;
        let w = want_wm.get_mut(u.as_str()).unwrap();
        *w = (*w).max(*p);
    }
    let sent: Vec<(&str, i64)> = done
        .iter()
        .filter_map(|d| match d {
            Did::Sent(u, s) => Some((u.as_str(), *s)),
            Did::Marked(..) => None,
        })
        .collect();
    let mut observed = Vec::new();
    for u in users {
        let wm = watermark(&mut conn, u).await;
        assert_eq!(
            wm, want_wm[u],
            "{u}'s watermark = the highest position marked or sent"
        );
        let want_unread = sent.iter().filter(|(s, n)| *s != u && *n > wm).count() as i64;
        let unread = seq_app.unread(&mut conn, CONV, u).await;
        assert_eq!(unread, want_unread.min(100), "{u}'s unread");
        observed.push(format!("{u}: wm {wm} unread {unread}"));
    }
    eprintln!(
        "observed: {} 100 tasks (50 sends, 50 mark-reads, pool of 8): numbers 1..={} \
         without gap; {}",
        backend.name(),
        numbers.len(),
        observed.join(", ")
    );
    drop(conn);
    fx.db.cleanup().await;
}

mod concurrent_sends_and_mark_reads {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        super::concurrent_sends_and_mark_reads(crate::common::Backend::Postgres).await
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mysql() {
        super::concurrent_sends_and_mark_reads(crate::common::Backend::Mysql).await
    }
}
