//! Two connections whose order of ids is not their order of commits, a late mark-read that must not move a watermark back, and a mark-read racing a new message.

use super::*;

on_every_backend!(servers: id_order_is_not_commit_order, late_mark_read_does_not_move_back, mark_read_races_new_message);

/// Seed 000 §4. Writer A inserts (id 100) and does not commit; writer B inserts (id 101) and
/// commits; the reader sees only 101 and marks read up to it; A commits: message 100 is never
/// counted unread (the wrong value, shown). Then with the sequence: A takes number 102 under the
/// conversation's row lock; B's `sequence_next` waits (its task has not finished while A holds
/// the lock); A commits, B gets 103: sequence order equals commit order, and a reader that
/// marks read up to what it saw misses nothing.
async fn id_order_is_not_commit_order(backend: Backend) {
    let Some(fx) = Fx::create(backend, "two_conn_ids", &["alice", "bob", "carol"]).await else {
        return;
    };
    let app = fx.by_id.clone();
    let mut a = fx.db.connect().await;
    let mut b = fx.db.connect().await;
    let mut r = fx.db.connect().await;

    let mut tx_a = a.begin().await.unwrap();
    let id_a = insert(&mut tx_a, backend, "alice", None).await;
    let mut tx_b = b.begin().await.unwrap();
    let id_b = insert(&mut tx_b, backend, "bob", None).await;
    tx_b.commit().await.unwrap();
    assert_eq!((id_a, id_b), (100, 101), "A's id is the smaller one");

    // The reader sees only B's message and marks read up to it.
    let seen = ints(
        &mut r,
        "SELECT id FROM messages WHERE conv_id = 1 ORDER BY id",
    )
    .await;
    assert_eq!(seen, [101]);
    app.run(&mut r, "mark_read", &mark("carol", 101)).await;
    tx_a.commit().await.unwrap();

    // A's message is there, carol never saw it, and it is not unread: skipped for good.
    let all = ints(
        &mut r,
        "SELECT id FROM messages WHERE conv_id = 1 ORDER BY id",
    )
    .await;
    assert_eq!(all, [100, 101]);
    let unread_by_id = app.unread(&mut r, CONV, "carol").await;
    assert_eq!(
        unread_by_id, 0,
        "the wrong value: message 100 was never seen"
    );
    eprintln!(
        "observed: {} id order: A id {id_a} uncommitted, B id {id_b} committed, reader saw {seen:?}, \
         marked 101, A committed: unread = {unread_by_id} (true: 1, message 100 unseen)",
        backend.name()
    );

    // With the sequence (seq filled from id: 100, 101; the next number is 102).
    let seq_app = fx.sequence(&mut r).await;
    let mut tx_a = a.begin().await.unwrap();
    let seq_a = next_seq(&seq_app, &mut tx_a).await;
    insert(&mut tx_a, backend, "alice", Some(seq_a)).await;
    assert_eq!(seq_a, 102);

    // B reports the number it took (0: none yet) and commits when told to.
    let took = Arc::new(AtomicI64::new(0));
    let commit = Arc::new(AtomicBool::new(false));
    let writer_b = {
        let (seq_app, took, commit) = (seq_app.clone(), took.clone(), commit.clone());
        tokio::spawn(async move {
            let mut tx_b = b.begin().await.unwrap();
            let seq_b = next_seq(&seq_app, &mut tx_b).await;
            insert(&mut tx_b, backend, "bob", Some(seq_b)).await;
            took.store(seq_b, Ordering::SeqCst);
            while !commit.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            tx_b.commit().await.unwrap();
            seq_b
        })
    };
    tokio::time::sleep(WAIT).await;
    let b_blocked = !writer_b.is_finished() && took.load(Ordering::SeqCst) == 0;
    assert!(
        b_blocked,
        "B must wait for A's row lock before it gets a number"
    );
    let visible = ints(
        &mut r,
        "SELECT seq FROM messages WHERE conv_id = 1 ORDER BY seq",
    )
    .await;
    assert_eq!(visible, [100, 101], "nothing of A or B is visible yet");

    tx_a.commit().await.unwrap();
    let seq_b = wait_for(&took).await;
    assert_eq!(seq_b, 103, "B's number follows A's");
    // Between A's and B's commits the reader sees up to 102 and marks read there.
    let visible = ints(
        &mut r,
        "SELECT seq FROM messages WHERE conv_id = 1 ORDER BY seq",
    )
    .await;
    assert_eq!(visible, [100, 101, 102]);
    seq_app.run(&mut r, "mark_read", &mark("carol", 102)).await;
    commit.store(true, Ordering::SeqCst);
    assert_eq!(writer_b.await.unwrap(), 103);
    let unread_by_seq = seq_app.unread(&mut r, CONV, "carol").await;
    assert_eq!(
        unread_by_seq, 1,
        "B's message (seq 103) stays unread: nothing skipped"
    );
    eprintln!(
        "observed: {} sequence: A took {seq_a} (uncommitted), B still waiting after {} ms = {b_blocked}, \
         A committed, B took {seq_b}, reader marked 102 before B committed: unread = {unread_by_seq} (true: 1)",
        backend.name(),
        WAIT.as_millis()
    );
    drop((a, r));
    fx.db.cleanup().await;
}

/// Seed 000 §3. The phone marks read up to the 20th message (its transaction still open); the
/// laptop's late request for the 12th waits for it, then keeps 20: the watermark does not move
/// back. The same order with a plain overwrite (the bug) leaves 8 read messages unread.
async fn late_mark_read_does_not_move_back(backend: Backend) {
    let Some(fx) = Fx::create(backend, "two_conn_late", &["alice", "bob", "carol"]).await else {
        return;
    };
    let app = fx.by_id.clone();
    let mut phone = fx.db.connect().await;
    let mut laptop = fx.db.connect().await;
    let mut ids = Vec::new();
    for _ in 0..20 {
        ids.push(insert(&mut phone, backend, "alice", None).await);
    }
    let (twelfth, twentieth) = (ids[11], ids[19]);

    let mut tx_phone = phone.begin().await.unwrap();
    app.run(&mut tx_phone, "mark_read", &mark("carol", twentieth))
        .await;
    let late = {
        let app = app.clone();
        tokio::spawn(async move {
            app.run(&mut laptop, "mark_read", &mark("carol", twelfth))
                .await;
            laptop
        })
    };
    tokio::time::sleep(WAIT).await;
    let waited = !late.is_finished();
    assert!(waited, "the late request waits for the phone's row lock");
    tx_phone.commit().await.unwrap();
    let mut laptop = late.await.unwrap();
    let kept = watermark(&mut laptop, "carol").await;
    let unread = app.unread(&mut laptop, CONV, "carol").await;
    assert_eq!(kept, twentieth);
    assert_eq!(unread, 0);

    // The bug, same order, for bob: each device overwrites.
    let overwrite = |pos: i64| {
        format!(
            "UPDATE {WATERMARK_TABLE} SET last_read_id = {pos} WHERE conversation_id = {CONV} AND user_id = 'bob'"
        )
    };
    app.run(&mut phone, "mark_read", &mark("bob", 0)).await;
    exec_all(&mut phone, &[overwrite(twentieth)]).await;
    exec_all(&mut laptop, &[overwrite(twelfth)]).await;
    let overwritten = app.unread(&mut laptop, CONV, "bob").await;
    assert_eq!(overwritten, 8, "the overwrite moved bob's watermark back");
    eprintln!(
        "observed: {} late mark-read: phone marked {twentieth} (open), laptop's {twelfth} waited = {waited}, \
         watermark = {kept}, unread = {unread}; plain overwrite in the same order: unread = {overwritten}",
        backend.name()
    );
    drop((phone, laptop));
    fx.db.cleanup().await;
}

/// Seed 000 §2. Bob has seen 10 messages and reports "read up to the 10th"; meanwhile the 11th
/// is being written (with the legacy counter's +1). The mark-read runs while the writer's
/// transaction is open, the writer commits, then the legacy "clear" runs: the counter says 0
/// (the wrong value), the watermark's count says 1: the new message stays unread.
async fn mark_read_races_new_message(backend: Backend) {
    let Some(fx) = Fx::create(backend, "two_conn_race", &["alice", "bob"]).await else {
        return;
    };
    let app = fx.by_id.clone();
    let mut writer = fx.db.connect().await;
    let mut reader = fx.db.connect().await;
    let mut ids = Vec::new();
    for _ in 0..10 {
        ids.push(insert(&mut writer, backend, "alice", None).await);
    }
    exec_all(
        &mut writer,
        &["UPDATE unread_counters SET unread_count = 10 WHERE user_id = 'bob'".to_string()],
    )
    .await;

    let mut tx = writer.begin().await.unwrap();
    let eleventh = insert(&mut tx, backend, "alice", None).await;
    exec_all(
        &mut tx,
        &[
            "UPDATE unread_counters SET unread_count = unread_count + 1 WHERE user_id = 'bob'"
                .to_string(),
        ],
    )
    .await;
    app.run(&mut reader, "mark_read", &mark("bob", ids[9]))
        .await;
    tx.commit().await.unwrap();
    exec_all(
        &mut reader,
        &["UPDATE unread_counters SET unread_count = 0 WHERE user_id = 'bob'".to_string()],
    )
    .await;

    let counter = ints(
        &mut reader,
        "SELECT unread_count FROM unread_counters WHERE user_id = 'bob'",
    )
    .await[0];
    let unread = app.unread(&mut reader, CONV, "bob").await;
    assert_eq!(counter, 0, "the clear erased the 11th message");
    assert_eq!(unread, 1, "the 11th message stays unread");
    assert_eq!(watermark(&mut reader, "bob").await, ids[9]);
    eprintln!(
        "observed: {} mark-read vs new message: read up to {} while {eleventh} was being written: \
         counter after clear = {counter}, unread from the watermark = {unread}",
        backend.name(),
        ids[9]
    );
    drop((writer, reader));
    fx.db.cleanup().await;
}
