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
{% import "reader_macros.sql" as rd %}
{% macro ctes(msg, ctr, range, int) %}
{% if msg.restricted or msg.recipient %}
{{ reader_ctes(msg, ctr, range, int) }}
{% else %}
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
         CAST(CASE WHEN tm_q.join_pos IS NULL OR tm_at.pos > tm_q.join_pos THEN tm_at.pos END
              AS {{ int }}) AS pos,
         CAST(CASE WHEN tm_prev.pos IS NOT NULL AND (tm_q.join_pos IS NULL OR tm_prev.pos > tm_q.join_pos)
                   THEN 1 ELSE 0 END AS {{ int }}) AS representable
  FROM tm_rq tm_q
  LEFT JOIN tm_rw tm_at ON tm_at.conv = tm_q.conv AND tm_at.r_all = tm_q.k + 1 + tm_q.q_k
  LEFT JOIN tm_rw tm_prev ON tm_prev.conv = tm_q.conv AND tm_prev.r_all = tm_q.k + tm_q.q_prev
)
{% endif %}
{% endmacro %}

{#- The same ranks when messages count for some readers only (issue 22, reader_macros.sql):
    L of member u holds the countable messages every reader counts (unaddressed: of the
    member's audience `aud`, all of them for a reader `restricted_readers` admits, else the
    unrestricted ones), not u's own, and those addressed to u by another.

    tm_rw: per (conversation, audience) the unaddressed messages (g = 1) and the addressed
    ones (g = 0, one row per audience), newest first, with r_all the running count of
    unaddressed messages (for g = 1 its rank among them; for g = 0 how many are newer) and
    r_own the same among the sender's. The member's own elements (its unaddressed messages)
    and addressed elements (messages addressed to it) are few: tm_se joins them to the member
    on equality, and tm_sb gives each the number of L's messages newer than it:
    nb = (r_all - 1 for an own element, r_all for an addressed one) - own elements newer +
    addressed elements newer. L[k] is the addressed element with nb = k if there is one,
    else the unaddressed message of rank k + 1 - (addressed elements with nb < k) + (own
    elements with nb <= k); L[k - 1] exists the same way with k - 1. -#}
{% macro reader_ctes(msg, ctr, range, int) %}
{% set cv = m.out("this." ~ msg.conv, msg.conv_k) %}{% set sv = m.out("this." ~ msg.sender, msg.sender_k) %}
{% set desc = "ORDER BY tm_a.pos DESC ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW" %}
tm_rm AS (
  SELECT {{ cv }} AS conv, CAST(this.{{ msg.id }} AS {{ int }}) AS pos, {{ sv }} AS sender{{ rd.msg_cols(msg) }}
  FROM {{ m.own(msg.table, msg.joins, msg.conv, msg.sender) }}
  WHERE {{ m.pred(msg.countable) }}{{ m.range("this." ~ msg.conv, range, msg.conv_k) }}
),
tm_ra AS (
{% for aud in ([1, 0] if msg.restricted else [1]) %}
  {% if not loop.first %}UNION ALL {% endif %}
SELECT tm_x.conv AS conv, tm_x.pos AS pos, tm_x.sender AS sender, {{ aud }} AS aud,
         {% if msg.recipient %}CASE WHEN tm_x.rcp IS NULL THEN 1 ELSE 0 END{% else %}1{% endif %} AS g,
         {% if msg.recipient %}tm_x.rcp{% else %}CAST(NULL AS {{ int }}){% endif %} AS rcp
  FROM tm_rm tm_x
  WHERE 1 = 1
  {%- if aud == 0 %} AND (tm_x.rs = 0{% if msg.recipient %} OR tm_x.rcp IS NOT NULL{% endif %}){% endif %}
  {% if msg.recipient %} AND (tm_x.rcp IS NULL OR tm_x.sender IS NULL OR tm_x.sender <> tm_x.rcp){% endif %}

{% endfor %}
),
tm_rw AS (
  SELECT tm_a.conv AS conv, tm_a.pos AS pos, tm_a.sender AS sender, tm_a.aud AS aud, tm_a.g AS g,
         tm_a.rcp AS rcp,
         SUM(tm_a.g) OVER (PARTITION BY tm_a.conv, tm_a.aud {{ desc }}) AS r_all,
         SUM(tm_a.g) OVER (PARTITION BY tm_a.conv, tm_a.aud, tm_a.sender {{ desc }}) AS r_own
  FROM tm_ra tm_a
),
tm_rc AS (
  SELECT tm_s.conv AS conv, tm_s.usr AS usr, tm_s.join_pos AS join_pos,
         {% if msg.restricted %}tm_s.adm{% else %}1{% endif %} AS aud,
         CASE WHEN tm_kk.stored > 4611686018427387904 THEN 4611686018427387904 ELSE tm_kk.stored END AS k
  FROM tm_subj tm_s
  JOIN ({{ m.counter_rows(ctr, int, m.range("this." ~ ctr.conv, range, ctr.conv_k)) }}) tm_kk
    ON tm_kk.conv = tm_s.conv AND tm_kk.usr = tm_s.usr
  WHERE tm_kk.stored > 0
),
tm_se AS (
  SELECT tm_c.conv AS conv, tm_c.usr AS usr, tm_o.pos AS pos, 1 AS g, tm_o.r_all - 1 AS b
  FROM tm_rc tm_c
  JOIN tm_rw tm_o ON tm_o.conv = tm_c.conv AND tm_o.aud = tm_c.aud AND tm_o.sender = tm_c.usr AND tm_o.g = 1
{% if msg.recipient %}
  UNION ALL
  SELECT tm_c.conv, tm_c.usr, tm_o.pos, 0, tm_o.r_all
  FROM tm_rc tm_c
  JOIN tm_rw tm_o ON tm_o.conv = tm_c.conv AND tm_o.aud = tm_c.aud AND tm_o.rcp = tm_c.usr AND tm_o.g = 0
{% endif %}
),
tm_sb AS (
  SELECT tm_a.conv AS conv, tm_a.usr AS usr, tm_a.pos AS pos, tm_a.g AS g,
         tm_a.b - (SUM(tm_a.g) OVER (PARTITION BY tm_a.conv, tm_a.usr {{ desc }}) - tm_a.g)
                + (SUM(1 - tm_a.g) OVER (PARTITION BY tm_a.conv, tm_a.usr {{ desc }}) - (1 - tm_a.g)) AS nb
  FROM tm_se tm_a
),
tm_rq AS (
  SELECT tm_c.conv AS conv, tm_c.usr AS usr, tm_c.join_pos AS join_pos, tm_c.aud AS aud, tm_c.k AS k,
         COUNT(CASE WHEN tm_b.g = 1 AND tm_b.nb <= tm_c.k THEN 1 END)
           - COUNT(CASE WHEN tm_b.g = 0 AND tm_b.nb < tm_c.k THEN 1 END) AS q_k,
         COUNT(CASE WHEN tm_b.g = 1 AND tm_b.nb <= tm_c.k - 1 THEN 1 END)
           - COUNT(CASE WHEN tm_b.g = 0 AND tm_b.nb < tm_c.k - 1 THEN 1 END) AS q_prev,
         MAX(CASE WHEN tm_b.g = 0 AND tm_b.nb = tm_c.k THEN tm_b.pos END) AS hit_k,
         MAX(CASE WHEN tm_b.g = 0 AND tm_b.nb = tm_c.k - 1 THEN tm_b.pos END) AS hit_prev
  FROM tm_rc tm_c
  LEFT JOIN tm_sb tm_b ON tm_b.conv = tm_c.conv AND tm_b.usr = tm_c.usr
  GROUP BY tm_c.conv, tm_c.usr, tm_c.join_pos, tm_c.aud, tm_c.k
),
tm_rank AS (
  SELECT tm_q.conv AS conv, tm_q.usr AS usr,
         CAST(CASE WHEN tm_q.join_pos IS NULL OR COALESCE(tm_q.hit_k, tm_at.pos) > tm_q.join_pos
                   THEN COALESCE(tm_q.hit_k, tm_at.pos) END AS {{ int }}) AS pos,
         CAST(CASE WHEN COALESCE(tm_q.hit_prev, tm_prev.pos) IS NOT NULL
                    AND (tm_q.join_pos IS NULL OR COALESCE(tm_q.hit_prev, tm_prev.pos) > tm_q.join_pos)
                   THEN 1 ELSE 0 END AS {{ int }}) AS representable
  FROM tm_rq tm_q
  LEFT JOIN tm_rw tm_at ON tm_at.conv = tm_q.conv AND tm_at.aud = tm_q.aud AND tm_at.g = 1
                       AND tm_at.r_all = tm_q.k + 1 + tm_q.q_k
  LEFT JOIN tm_rw tm_prev ON tm_prev.conv = tm_q.conv AND tm_prev.aud = tm_q.aud AND tm_prev.g = 1
                         AND tm_prev.r_all = tm_q.k + tm_q.q_prev
)
{% endmacro %}
