{#- Counter evidence with 0 < k (semantics.md "Backfill", 3): with L the positions of the
    messages countable for the member (not their own, after their join position), newest first,
    the watermark is L[k] (0-based: the newest message that was read); k >= |L| gives 0, and
    k > |L| cannot be true (reported).

    Cost is linear in the batch's messages and members, never their product: each countable
    message gets its rank r_all in its conversation and r_own among its sender's messages
    (newest first). For a member u, their own message of rank s sits at index r_all and has
    r_all - s messages of others before it; the (k+1)-th message of others is at index
    k + 1 + q, q = u's own messages with r_all - r_own <= k. The same with k - 1 tells whether
    L[k-1] exists, i.e. whether k <= |L|. Equality joins only, so hash or indexed joins serve.

    k is read capped at 2^62 (issue 25 row 2): no conversation holds that many messages, so
    a larger k means the same (no L[k], no L[k-1]: 0, not representable), and k + 1 + q can
    not leave the 64-bit range (a counter of i64::MAX failed with "bigint out of range").

    A macro: `ctes` gives the ranks as common table expressions of backfill_plan.sql, over its
    members (tm_subj) and the counter as a grouped derived table joined on equality; the last,
    tm_rank, has conv, usr, pos (L[k], or NULL) and representable (1 when k <= |L|). -#}
{% import "macros.sql" as m %}
{% macro ctes(msg, ctr, range, int) %}
{% set cv = m.out("this." ~ msg.conv, msg.conv_k) %}{% set sv = m.out("this." ~ msg.sender, msg.sender_k) %}
tm_rw AS (
  SELECT {{ cv }} AS conv, this.{{ msg.id }} AS pos, {{ sv }} AS sender,
         ROW_NUMBER() OVER (PARTITION BY {{ cv }} ORDER BY this.{{ msg.id }} DESC) AS r_all,
         ROW_NUMBER() OVER (PARTITION BY {{ cv }}, {{ sv }} ORDER BY this.{{ msg.id }} DESC) AS r_own
  FROM {{ m.own(msg.table, msg.joins, msg.conv, msg.sender) }}
  WHERE {{ m.pred(msg.countable) }}{{ m.range("this." ~ msg.conv, range, msg.conv_k) }}
),
tm_rc AS (
  SELECT tm_s.conv AS conv, tm_s.usr AS usr, tm_s.join_pos AS join_pos,
         CASE WHEN tm_kk.stored > 4611686018427387904 THEN 4611686018427387904 ELSE tm_kk.stored END AS k
  FROM tm_subj tm_s
  JOIN ({{ m.counter_rows(ctr, int, m.range("this." ~ ctr.conv, range, ctr.conv_k)) }}) tm_kk
    ON tm_kk.conv = tm_s.conv AND tm_kk.usr = tm_s.usr
  WHERE tm_kk.stored > 0
),
tm_rq AS (
  SELECT tm_c.conv AS conv, tm_c.usr AS usr, tm_c.join_pos AS join_pos, tm_c.k AS k,
         COUNT(CASE WHEN tm_o.r_all - tm_o.r_own <= tm_c.k THEN 1 END) AS q_k,
         COUNT(CASE WHEN tm_o.r_all - tm_o.r_own <= tm_c.k - 1 THEN 1 END) AS q_prev
  FROM tm_rc tm_c
  LEFT JOIN tm_rw tm_o ON tm_o.conv = tm_c.conv AND tm_o.sender = tm_c.usr
  GROUP BY tm_c.conv, tm_c.usr, tm_c.join_pos, tm_c.k
),
tm_rank AS (
  SELECT tm_q.conv AS conv, tm_q.usr AS usr,
         CAST(CASE WHEN tm_q.join_pos IS NULL OR tm_at.pos > tm_q.join_pos THEN tm_at.pos END AS {{ int }}) AS pos,
         CAST(CASE WHEN tm_prev.pos IS NOT NULL AND (tm_q.join_pos IS NULL OR tm_prev.pos > tm_q.join_pos) THEN 1 ELSE 0 END AS {{ int }}) AS representable
  FROM tm_rq tm_q
  LEFT JOIN tm_rw tm_at ON tm_at.conv = tm_q.conv AND tm_at.r_all = tm_q.k + 1 + tm_q.q_k
  LEFT JOIN tm_rw tm_prev ON tm_prev.conv = tm_q.conv AND tm_prev.r_all = tm_q.k + tm_q.q_prev
)
{% endmacro %}
