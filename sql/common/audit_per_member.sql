{#- Audit, shape per_member (semantics.md "Shape A", "Drift classes"), one batch of
    conversations, in one pass over the messages (issue 11, "The one-pass form").

    Each counter row gets a threshold t = max(watermark, join position) (watermark 0 when
    none). Per conversation the thresholds are merged into the stream of messages above the
    conversation's lowest threshold, ordered by position descending, a threshold before the
    messages of its own position (a message counts when position > t). Running counts then
    give, at each threshold row:
      a_all - a_own : countable messages after t not sent by the member (recomputed; a counter
                      whose member row is missing or not active is owed 0)
      l_own         : the member's own legacy-countable messages after t (own_after)
      x_all - x_own : legacy-countable but not countable messages after t, not the member's
                      own (excluded_after)
    `_all` is partitioned by conversation, `_own` by (conversation, sender): a message whose
    sender is NULL (a deleted account) is nobody's own and is counted (scenario S12), exactly
    as `IS DISTINCT FROM` counted it. Then, for the drifting rows only, a second pass over
    their conversations places each at its join position (no join position: after every
    message) for all countable messages not its own (total_countable). Counts are exact, then
    clamped at cap+1 under `--cap` (seed 000 §5), which is what a count stopped at cap+1 gives.

    Range placeholders: `range` on the counter table, `range2` and `range3` on the messages
    (the same batch bound again, so each engine reads the messages by an index range).
    Predicates and the counter's value see their own row as `this` (and `conv`, `usr`
    where they read them: macros.sql `own`, `counter_rows`).
    `range_wm` on the watermarks and `range_mem` on the members (when mapped): each table read
    by its own index range, never joined whole.
    `count_only`: return only the number of drifting rows (the backfill's change count),
    without the second pass: `range3` is then not placed (bind the batch twice). The pass
    then carries only what the count needs (no classification facts): the countable messages
    alone, two running sums instead of five, rows a quarter as wide to sort (PostgreSQL
    15, 5 000 members: 41 ms a batch with every fact carried).

    A mention counter (`ctr.mentions`, issue 22) streams one row per (message, mentioned
    user) in place of the messages (mention_macros.sql `stream`), the mentioned user as
    `sender`, its own-message rows already left out of `c`: its counts are then the
    (conversation, sender) partitions alone (`a_own`, `x_own`, `t_own`), each member's own
    mentions above its threshold, in the same one pass.

    With a mention counter and reader rules (issue 29 row 16: a mention counts for a reader
    only where the message counts for that reader), the stream folds `recipient` into its
    rows (the reader is the row's mentioned user), so `rmsg` (the reader keys the statement
    still applies per threshold) keeps `restricted` alone: the mention rows carry `rs` and
    `k`, and the counts subtract the restricted rows (`ra_own`, `tr_own`) and add their
    legacy-counted ones to the excluded (`rk_own`) for a reader not admitted.
    Messages only some readers count (issue 22, reader_macros.sql): with `restricted` each
    fact also sums the restricted messages (ra_, rl_, rx_, tr_) and subtracts them for a
    reader `restricted_readers` does not admit (adm = 0); with `recipient` each fact leaves the
    addressed messages out of the shared sums and adds those addressed to the reader (to_c,
    to_l, to_x, t_to: running sums over (conversation, recipient)). Still one pass: the
    threshold rows carry adm and their reader as rcp, no join of members with messages.

    Shape read_flags (semantics.md "Shape C", issue 22): the counter rows are the members'
    flag rows (the SqlContext's derived table, `tm_pos` its message's position, `tm_unread`
    1 unless read), summed per member; the drifting rows get two more facts, from t as above:
    read_after (flag rows saying read on countable messages of others after t) and
    unread_before (flag rows saying unread at or before t), read by `range_fl` (the flags by
    their messages' conversation) and `range_fm` (the messages, for `countable`). -#}
{% import "macros.sql" as m %}
{% import "reader_macros.sql" as rd %}
{% set rmsg = {"restricted": msg.restricted, "recipient": none} if ctr.mentions else msg %}
{% set readers = rmsg.restricted or rmsg.recipient %}
{% import "mention_macros.sql" as mm %}
{% set win = "ORDER BY tm_s.pos DESC, tm_s.kind ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW" %}
WITH tm_base AS (
  SELECT tm_k.conv AS conv, tm_k.usr AS usr, tm_k.stored AS stored,
         CAST(tm_w.last_read_id AS {{ int }}) AS last_read_id, tm_w.source AS source,
{% if mem %}
         CASE WHEN tm_mb.usr IS NULL THEN 0 ELSE tm_mb.is_active END AS is_member,
{% if msg.restricted %}
         CASE WHEN tm_mb.usr IS NULL THEN 0 ELSE tm_mb.adm END AS adm,
{% endif %}
         CAST(tm_mb.join_pos AS {{ int }}) AS join_pos
{% else %}
         1 AS is_member,
         CAST(NULL AS {{ int }}) AS join_pos
{% endif %}
  FROM ({{ m.counter_rows(ctr, int, m.range("this." ~ ctr.conv, range, ctr.conv_k)) }}) tm_k
  LEFT JOIN (SELECT {{ m.out("tm_w0.conversation_id", wm_conv_k) }} AS conversation_id, {{ m.out("tm_w0.user_id", wm_user_k) }} AS user_id,
                    tm_w0.last_read_id AS last_read_id, {{ m.provenance("tm_w0") }} AS source
             FROM {{ wm }} tm_w0
             WHERE 1 = 1{{ m.range("tm_w0.conversation_id", range_wm, wm_conv_k) }}) tm_w
         ON tm_w.conversation_id = tm_k.conv AND tm_w.user_id = tm_k.usr
{% if mem %}
  LEFT JOIN (SELECT {{ m.out("this." ~ mem.conv, mem.conv_k) }} AS conv, {{ m.out("this." ~ mem.user, mem.user_k) }} AS usr,
                    {{ m.join_pos(mem, msg, int, "this") }} AS join_pos,
                    CASE WHEN {{ m.pred(mem.active) }} THEN 1 ELSE 0 END AS is_active{% if msg.restricted %},
                    CASE WHEN {{ m.pred(mem.readers) }} THEN 1 ELSE 0 END AS adm{% endif %}

             FROM {{ m.own(mem.table, mem.joins, mem.conv, mem.user) }}
             WHERE 1 = 1{{ m.range("this." ~ mem.conv, range_mem, mem.conv_k) }}) tm_mb ON tm_mb.conv = tm_k.conv AND tm_mb.usr = tm_k.usr
{% endif %}
),
tm_t AS {{ materialized }} (
  SELECT tm_b.conv, tm_b.usr, tm_b.stored, tm_b.last_read_id, tm_b.source, tm_b.is_member, tm_b.join_pos,{% if msg.restricted %} tm_b.adm,{% endif %}

         CAST(CASE WHEN tm_b.join_pos IS NOT NULL AND tm_b.join_pos > COALESCE(tm_b.last_read_id, 0)
                   THEN tm_b.join_pos ELSE COALESCE(tm_b.last_read_id, 0) END AS {{ int }}) AS t1
  FROM tm_base tm_b
),
tm_lo AS (
  SELECT tm_t.conv AS tm_conv, MIN(tm_t.t1) AS tm_min FROM tm_t GROUP BY tm_t.conv
),
{% if count_only %}
tm_s1 AS (
  SELECT tm_t.conv AS conv, tm_t.t1 AS pos, 0 AS kind, tm_t.usr AS sender, 0 AS c,
         tm_t.stored AS stored, tm_t.is_member AS is_member{{ rd.reader_cols(rmsg, "tm_t.adm", "tm_t.usr", ["rc"], ["tc"]) }}
  FROM tm_t
  UNION ALL
  SELECT tm_f.conv, tm_f.pos, 1, tm_f.sender, {% if readers %}{{ rd.gen(rmsg, "tm_f", "c") }}{% else %}1{% endif %}, NULL, NULL{{ rd.message_cols(rmsg, "tm_f", ["c"], [["c", false]]) }}
{% if ctr.mentions %}
  FROM ({{ mm.stream(m, msg, ctr, int, range2, true) }}) tm_f
{% else %}
  FROM (SELECT {{ m.out("this." ~ msg.conv, msg.conv_k) }} AS conv, CAST(this.{{ msg.id }} AS {{ int }}) AS pos, {{ m.out("this." ~ msg.sender, msg.sender_k) }} AS sender{% if readers %}, 1 AS c{{ rd.msg_cols(msg) }}{% endif %}

        FROM {{ m.own(msg.table, msg.joins, msg.conv, msg.sender) }}
        WHERE {{ m.pred(msg.countable) }}{{ m.range("this." ~ msg.conv, range2, msg.conv_k) }}) tm_f
{% endif %}
  JOIN tm_lo ON tm_lo.tm_conv = tm_f.conv AND tm_f.pos > tm_lo.tm_min
),
tm_w1 AS (
  SELECT tm_s.kind, tm_s.stored, tm_s.is_member,
         SUM(tm_s.c) OVER (PARTITION BY tm_s.conv {{ win }}) AS a_all,
         SUM(tm_s.c) OVER (PARTITION BY tm_s.conv, tm_s.sender {{ win }}) AS a_own{% if msg.restricted %}, tm_s.adm,
         SUM(tm_s.rc) OVER (PARTITION BY tm_s.conv {{ win }}) AS ra_all,
         SUM(tm_s.rc) OVER (PARTITION BY tm_s.conv, tm_s.sender {{ win }}) AS ra_own{% endif %}{% if rmsg.recipient %},
         {{ rd.to_sum("tm_s", "tc", win) }} AS to_c{% endif %}

  FROM tm_s1 tm_s
)
SELECT COUNT(*) AS n
FROM tm_w1 tm_w
WHERE tm_w.kind = 0
  AND (tm_w.stored IS NULL
       OR {{ m.clamp("tm_w.stored", cap) }} <> {{ m.clamp("CASE WHEN tm_w.is_member = 1 THEN " ~ ("tm_w.a_own" ~ rd.adjust(rmsg, "tm_w", "ra_own", none, "to_c") if ctr.mentions else "tm_w.a_all - tm_w.a_own" ~ rd.adjust(rmsg, "tm_w", "ra_all", "ra_own", "to_c")) ~ " ELSE 0 END", cap) }})
{% else %}
tm_s1 AS (
  SELECT tm_t.conv AS conv, tm_t.t1 AS pos, 0 AS kind, tm_t.usr AS sender, 0 AS c, 0 AS l, 0 AS x,
         tm_t.stored AS stored, tm_t.last_read_id AS last_read_id, tm_t.source AS source,
         tm_t.is_member AS is_member, tm_t.join_pos AS join_pos{{ rd.reader_cols(rmsg, "tm_t.adm", "tm_t.usr", ["rc", "rl", "rx", "rk"] if ctr.mentions else ["rc", "rl", "rx"], ["tc", "tl", "tx", "ta", "tb"]) }}
  FROM tm_t
  UNION ALL
  SELECT tm_f.conv, tm_f.pos, 1, tm_f.sender, {{ rd.gen(rmsg, "tm_f", "c") }}, {{ rd.gen(rmsg, "tm_f", "l") }}, {{ rd.gen(rmsg, "tm_f", "x") }}, NULL, NULL, NULL, NULL, NULL{{ rd.message_cols(rmsg, "tm_f", ["c", "l", "x", "k"] if ctr.mentions else ["c", "l", "x"], [["c", false], ["l", true], ["x", false], ["l", "any"], ["l", false]]) }}
{% if ctr.mentions %}
  FROM ({{ mm.stream(m, msg, ctr, int, range2, false) }}) tm_f
{% else %}
  FROM (SELECT {{ m.out("this." ~ msg.conv, msg.conv_k) }} AS conv, CAST(this.{{ msg.id }} AS {{ int }}) AS pos, {{ m.out("this." ~ msg.sender, msg.sender_k) }} AS sender,
               CASE WHEN {{ m.pred(msg.countable) }} THEN 1 ELSE 0 END AS c,
               CASE WHEN {{ m.pred(msg.legacy) }} THEN 1 ELSE 0 END AS l,
{% if msg.countable %}
               CASE WHEN {{ m.pred(msg.legacy) }} AND NOT COALESCE({{ m.pred(msg.countable) }}, FALSE) THEN 1 ELSE 0 END AS x
{% else %}
               0 AS x
{% endif %}
               {{ rd.msg_cols(msg) }}
        FROM {{ m.own(msg.table, msg.joins, msg.conv, msg.sender) }}
        WHERE 1 = 1{{ m.range("this." ~ msg.conv, range2, msg.conv_k) }}) tm_f
{% endif %}
  JOIN tm_lo ON tm_lo.tm_conv = tm_f.conv AND tm_f.pos > tm_lo.tm_min
),
tm_w1 AS (
  SELECT tm_s.conv, tm_s.pos, tm_s.kind, tm_s.sender, tm_s.stored, tm_s.last_read_id, tm_s.source,
         tm_s.is_member, tm_s.join_pos,
         SUM(tm_s.c) OVER (PARTITION BY tm_s.conv {{ win }}) AS a_all,
         SUM(tm_s.c) OVER (PARTITION BY tm_s.conv, tm_s.sender {{ win }}) AS a_own,
         SUM(tm_s.l) OVER (PARTITION BY tm_s.conv, tm_s.sender {{ win }}) AS l_own,
         SUM(tm_s.x) OVER (PARTITION BY tm_s.conv {{ win }}) AS x_all,
         SUM(tm_s.x) OVER (PARTITION BY tm_s.conv, tm_s.sender {{ win }}) AS x_own{% if msg.restricted %}, tm_s.adm,
         SUM(tm_s.rc) OVER (PARTITION BY tm_s.conv {{ win }}) AS ra_all,
         SUM(tm_s.rc) OVER (PARTITION BY tm_s.conv, tm_s.sender {{ win }}) AS ra_own,
         SUM(tm_s.rl) OVER (PARTITION BY tm_s.conv {{ win }}) AS rl_all,
         SUM(tm_s.rl) OVER (PARTITION BY tm_s.conv, tm_s.sender {{ win }}) AS rl_own,
         SUM(tm_s.rx) OVER (PARTITION BY tm_s.conv {{ win }}) AS rx_all,
         SUM(tm_s.rx) OVER (PARTITION BY tm_s.conv, tm_s.sender {{ win }}) AS rx_own{% if ctr.mentions %},
         SUM(tm_s.rk) OVER (PARTITION BY tm_s.conv, tm_s.sender {{ win }}) AS rk_own{% endif %}{% endif %}{% if rmsg.recipient %},
         {{ rd.to_sum("tm_s", "tc", win) }} AS to_c,
         {{ rd.to_sum("tm_s", "tl", win) }} AS to_l,
         {{ rd.to_sum("tm_s", "tx", win) }} AS to_x,
         SUM(tm_s.ta) OVER (PARTITION BY tm_s.conv {{ win }}) AS ta_all,
         {{ rd.to_sum("tm_s", "ta", win) }} AS ta_to,
         SUM(tm_s.tb) OVER (PARTITION BY tm_s.conv, tm_s.sender {{ win }}) AS tb_own{% endif %}

  FROM tm_s1 tm_s
),
tm_d AS {{ materialized }} (
  SELECT tm_v.conv, tm_v.usr, tm_v.stored, tm_v.recomputed, tm_v.last_read_id, tm_v.source,
         tm_v.is_member, tm_v.join_pos, tm_v.own_after, tm_v.excluded_after{% if msg.restricted %}, tm_v.adm{% endif %}

  FROM (SELECT tm_w.conv AS conv, tm_w.sender AS usr, tm_w.stored AS stored,
               CASE WHEN tm_w.is_member = 1 THEN {% if ctr.mentions %}tm_w.a_own{{ rd.adjust(rmsg, "tm_w", "ra_own", none, "to_c") }}{% else %}tm_w.a_all - tm_w.a_own{{ rd.adjust(rmsg, "tm_w", "ra_all", "ra_own", "to_c") }}{% endif %} ELSE 0 END AS recomputed,
               tm_w.last_read_id AS last_read_id, tm_w.source AS source, tm_w.is_member AS is_member,
               tm_w.join_pos AS join_pos,
               CASE WHEN tm_w.sender IS NULL THEN 0 ELSE tm_w.l_own{{ rd.adjust(rmsg, "tm_w", "rl_own", none, "to_l") }} END AS own_after,
               {{ "tm_w.x_own" ~ rd.mention_hidden(rmsg, "tm_w") if ctr.mentions else "tm_w.x_all - tm_w.x_own" ~ rd.hidden(rmsg, "tm_w") }} AS excluded_after{% if msg.restricted %},
               tm_w.adm AS adm{% endif %}

        FROM tm_w1 tm_w
        WHERE tm_w.kind = 0) tm_v
  WHERE tm_v.stored IS NULL
     OR {{ m.clamp("tm_v.stored", cap) }} <> {{ m.clamp("tm_v.recomputed", cap) }}
)
,
tm_dc AS (
  SELECT DISTINCT tm_d.conv AS tm_conv FROM tm_d
),
tm_s2 AS (
  SELECT tm_d.conv AS conv, tm_d.join_pos AS pos, CASE WHEN tm_d.join_pos IS NULL THEN 1 ELSE 0 END AS tail,
         0 AS kind, tm_d.usr AS sender, 0 AS c, tm_d.stored AS stored, tm_d.recomputed AS recomputed,
         tm_d.last_read_id AS last_read_id, tm_d.source AS source, tm_d.is_member AS is_member,
         tm_d.own_after AS own_after, tm_d.excluded_after AS excluded_after{{ rd.reader_cols(rmsg, "tm_d.adm", "tm_d.usr", ["rc"], ["tc"]) }}
  FROM tm_d
  UNION ALL
  SELECT tm_f.conv, tm_f.pos, 0, 1, tm_f.sender, {% if readers %}{{ rd.gen(rmsg, "tm_f", "c") }}{% else %}1{% endif %}, NULL, NULL, NULL, NULL, NULL, NULL, NULL{{ rd.message_cols(rmsg, "tm_f", ["c"], [["c", false]]) }}
{% if ctr.mentions %}
  FROM ({{ mm.stream(m, msg, ctr, int, range3, true) }}) tm_f
{% else %}
  FROM (SELECT {{ m.out("this." ~ msg.conv, msg.conv_k) }} AS conv, CAST(this.{{ msg.id }} AS {{ int }}) AS pos, {{ m.out("this." ~ msg.sender, msg.sender_k) }} AS sender{% if readers %}, 1 AS c{{ rd.msg_cols(msg) }}{% endif %}

        FROM {{ m.own(msg.table, msg.joins, msg.conv, msg.sender) }}
        WHERE {{ m.pred(msg.countable) }}{{ m.range("this." ~ msg.conv, range3, msg.conv_k) }}) tm_f
{% endif %}
  JOIN tm_dc ON tm_dc.tm_conv = tm_f.conv
),
tm_w2 AS (
  SELECT tm_s.conv, tm_s.kind, tm_s.sender, tm_s.stored, tm_s.recomputed, tm_s.last_read_id, tm_s.source,
         tm_s.is_member, tm_s.own_after, tm_s.excluded_after,
         SUM(tm_s.c) OVER (PARTITION BY tm_s.conv ORDER BY tm_s.tail, tm_s.pos DESC, tm_s.kind ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS t_all,
         SUM(tm_s.c) OVER (PARTITION BY tm_s.conv, tm_s.sender ORDER BY tm_s.tail, tm_s.pos DESC, tm_s.kind ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS t_own{% if msg.restricted %}, tm_s.adm,
         SUM(tm_s.rc) OVER (PARTITION BY tm_s.conv ORDER BY tm_s.tail, tm_s.pos DESC, tm_s.kind ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS tr_all,
         SUM(tm_s.rc) OVER (PARTITION BY tm_s.conv, tm_s.sender ORDER BY tm_s.tail, tm_s.pos DESC, tm_s.kind ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS tr_own{% endif %}{% if rmsg.recipient %},
         {{ rd.to_sum("tm_s", "tc", "ORDER BY tm_s.tail, tm_s.pos DESC, tm_s.kind ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW") }} AS t_to{% endif %}

  FROM tm_s2 tm_s
)
SELECT tm_r.conv AS conv, tm_r.sender AS usr, tm_r.stored AS stored,
       CAST({{ m.clamp("tm_r.recomputed", cap) }} AS {{ int }}) AS recomputed,
       CAST(tm_r.last_read_id AS {{ int }}) AS last_read_id, tm_r.source AS source,
       CAST(tm_r.is_member AS {{ int }}) AS is_member,
       CAST({{ m.clamp("tm_r.own_after", cap) }} AS {{ int }}) AS own_after,
       CAST({{ m.clamp("tm_r.excluded_after", cap) }} AS {{ int }}) AS excluded_after,
       CAST({{ m.clamp("tm_r.t_own" ~ rd.adjust(rmsg, "tm_r", "tr_own", none, "t_to") if ctr.mentions else "tm_r.t_all - tm_r.t_own" ~ rd.adjust(rmsg, "tm_r", "tr_all", "tr_own", "t_to"), cap) }} AS {{ int }}) AS total_countable{% if shape == "read_flags" %},
       CAST(COALESCE(tm_o.rd, 0) AS {{ int }}) AS read_after,
       CAST(COALESCE(tm_o.ur, 0) AS {{ int }}) AS unread_before{% endif %}

FROM tm_w2 tm_r
{% if shape == "read_flags" %}
LEFT JOIN (SELECT tm_z.conv AS conv, tm_z.usr AS usr,
                  SUM(CASE WHEN tm_fl.unread = 0 AND tm_fl.pos > tm_z.t AND tm_mm.c = 1
                            AND (tm_mm.sender IS NULL OR tm_mm.sender <> tm_z.usr) THEN 1 ELSE 0 END) AS rd,
                  SUM(CASE WHEN tm_fl.unread = 1 AND tm_fl.pos <= tm_z.t THEN 1 ELSE 0 END) AS ur
           FROM (SELECT tm_d.conv AS conv, tm_d.usr AS usr,
                        CASE WHEN tm_d.join_pos IS NOT NULL AND tm_d.join_pos > COALESCE(tm_d.last_read_id, 0)
                             THEN tm_d.join_pos ELSE COALESCE(tm_d.last_read_id, 0) END AS t
                 FROM tm_d) tm_z
           JOIN (SELECT {{ m.out("this." ~ ctr.conv, ctr.conv_k) }} AS conv, {{ m.out("this." ~ ctr.user, ctr.user_k) }} AS usr,
                        this.{{ ctr.pos }} AS pos, this.{{ ctr.unread }} AS unread
                 FROM {{ ctr.table }} this
                 WHERE 1 = 1{{ m.range("this." ~ ctr.conv, range_fl, ctr.conv_k) }}) tm_fl
             ON tm_fl.conv = tm_z.conv AND tm_fl.usr = tm_z.usr
           LEFT JOIN (SELECT {{ m.out("this." ~ msg.conv, msg.conv_k) }} AS conv, CAST(this.{{ msg.id }} AS {{ int }}) AS pos,
                             {{ m.out("this." ~ msg.sender, msg.sender_k) }} AS sender,
                             CASE WHEN {{ m.pred(msg.countable) }} THEN 1 ELSE 0 END AS c
                      FROM {{ m.own(msg.table, msg.joins, msg.conv, msg.sender) }}
                      WHERE 1 = 1{{ m.range("this." ~ msg.conv, range_fm, msg.conv_k) }}) tm_mm
             ON tm_mm.conv = tm_fl.conv AND tm_mm.pos = tm_fl.pos
           GROUP BY tm_z.conv, tm_z.usr) tm_o
       ON tm_o.conv = tm_r.conv AND tm_o.usr = tm_r.sender
{% endif %}
WHERE tm_r.kind = 0
ORDER BY {{ m.in_order("tm_r.conv", ctr.conv_k) }}, tm_r.sender
{% endif %}
