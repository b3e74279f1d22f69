{#- Audit, shape per_message (semantics.md "Shape B", seed 003), one batch of conversations,
    in one pass (issue 11, "The one-pass form": the mirror of the per_member form).

    recomputed(m) = active members x of m's conversation, x <> sender, joined before m, whose
    watermark is below m; 0 for a message that is not countable. Each member enters the stream
    of the conversation's messages (ascending position, a member after the messages of its own
    position: it counts for a message when its threshold < position) twice:
      at its watermark w (0 when none):      o1 = 1 when not active or it has a join position;
                                             t = 1 when it has no join position
      at max(w, join position):              r = 1 when active; o2 = 1 when active with a join
                                             position
      at its join position (when it has one): tj = 1
    Running sums over the conversation minus the same over (conversation, sender) leave out
    the sender's own member row (a NULL sender is nobody, as `IS DISTINCT FROM` had it):
      r             : recomputed (not countable: excluded_after when legacy-countable)
      o1 - o2       : orphans, members who left or joined after m and have not read it
      t + tj        : every reader m ever had (total_countable, for exceeds_history: semantics.md
                      shape B, issue 25 row 17): the members but the sender who joined before
                      m, active or not; t over the whole conversation (no join position: a
                      reader of every message), tj running (joined before m)
    own_after: 1 when the sender is an active member who joined before m, from the batch's
    members already read (tm_x: its active rows per member, any without a join position, the
    earliest join position), LEFT JOINed: not a correlated EXISTS over tm_d, which Citus cannot
    run (a correlated subquery whose FROM holds a CTE, issue 21). Counts are exact, then
    clamped at cap+1 under `--cap` (seed 000 §5).

    Range placeholders: `range` on the messages, `range2` on the members, `range_wm` on the
    watermarks (the same batch): each table read by its own index range, never joined whole (a
    watermark table joined whole is hashed in every batch, as the per_member form found).
    `count_only`: return only the number of drifting messages (the backfill's change count). -#}
{% import "macros.sql" as m %}
{% set win = "ORDER BY tm_s.pos, tm_s.kind ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW" %}
{#- The whole partition, in the same order as `win`: MariaDB 10.11 computed a window without
    ORDER BY (`OVER (PARTITION BY conv, sender)`) as a running sum once the tj windows stood
    beside it (the audit_model property on the servers found it); with the same ORDER BY and
    an explicit frame every engine sums the partition. -#}
{% set whole = "ORDER BY tm_s.pos, tm_s.kind ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING" %}
{# A running sum of column `c` over the conversation, less the same over the row's sender:
   the sum over the members but the sender (`w` the window's order and frame). #}
{% macro others(c, w) %}
SUM(tm_s.{{ c }}) OVER (PARTITION BY tm_s.conv {{ w }})
 - SUM(tm_s.{{ c }}) OVER (PARTITION BY tm_s.conv, tm_s.sender {{ w }})
{%- endmacro %}
{% set join_x = (mem.join or mem.join_time) and m.join_pos(mem, msg, int, "this") or none %}
{# The batch's member rows with their watermarks (0 when none) and join positions. #}
WITH tm_x AS (
  SELECT tm_y.conv AS conv, tm_y.usr AS usr, tm_y.is_active AS is_active, tm_y.join_pos AS join_pos,
         CAST(COALESCE(tm_w.last_read_id, 0) AS {{ int }}) AS wm
  FROM (SELECT {{ m.out("this." ~ mem.conv, mem.conv_k) }} AS conv,
               {{ m.out("this." ~ mem.user, mem.user_k) }} AS usr,
               CASE WHEN {{ m.pred(mem.active) }} THEN 1 ELSE 0 END AS is_active,
               CAST({% if join_x %}{{ join_x }}{% else %}NULL{% endif %} AS {{ int }}) AS join_pos
        FROM {{ m.own(mem.table, mem.joins, mem.conv, mem.user) }}
        WHERE 1 = 1{{ m.range("this." ~ mem.conv, range2, mem.conv_k) }}) tm_y
  LEFT JOIN (SELECT {{ m.out("tm_w0.conversation_id", wm_conv_k) }} AS conversation_id,
                    {{ m.out("tm_w0.user_id", wm_user_k) }} AS user_id, tm_w0.last_read_id AS last_read_id
             FROM {{ wm }} tm_w0
             WHERE 1 = 1{{ m.range("tm_w0.conversation_id", range_wm, wm_conv_k) }}) tm_w
         ON tm_w.user_id = tm_y.usr AND tm_w.conversation_id = tm_y.conv
),
{# The batch's messages (kind 0) merged with each member at its watermark, at max(watermark,
   join position) and at its join position (kind 1). #}
tm_s1 AS (
  SELECT tm_b.conv AS conv, tm_b.pos AS pos, 0 AS kind, tm_b.sender AS sender,
         0 AS r, 0 AS o1, 0 AS o2, 0 AS t, 0 AS tj,
         tm_b.stored AS stored, tm_b.is_countable AS is_countable, tm_b.is_legacy AS is_legacy
  FROM (SELECT {{ m.out("this." ~ msg.conv, msg.conv_k) }} AS conv, CAST(this.{{ msg.id }} AS {{ int }}) AS pos,
               {{ m.out("this." ~ msg.sender, msg.sender_k) }} AS sender,
               CAST(this.{{ ctr.column }} AS {{ int }}) AS stored,
               CASE WHEN {{ m.pred(msg.countable) }} THEN 1 ELSE 0 END AS is_countable,
               CASE WHEN {{ m.pred(msg.legacy) }} THEN 1 ELSE 0 END AS is_legacy
        FROM {{ m.own(msg.table, msg.joins, msg.conv, msg.sender) }}
        WHERE 1 = 1{{ m.range("this." ~ msg.conv, range, msg.conv_k) }}) tm_b
  UNION ALL
  SELECT tm_x.conv, tm_x.wm, 1, tm_x.usr,
         0, CASE WHEN tm_x.is_active = 0 OR tm_x.join_pos IS NOT NULL THEN 1 ELSE 0 END, 0,
         CASE WHEN tm_x.join_pos IS NULL THEN 1 ELSE 0 END, 0,
         NULL, NULL, NULL
  FROM tm_x
  UNION ALL
  SELECT tm_x.conv,
         CASE WHEN tm_x.join_pos IS NOT NULL AND tm_x.join_pos > tm_x.wm THEN tm_x.join_pos ELSE tm_x.wm END,
         1, tm_x.usr,
         tm_x.is_active, 0, CASE WHEN tm_x.is_active = 1 AND tm_x.join_pos IS NOT NULL THEN 1 ELSE 0 END,
         0, 0,
         NULL, NULL, NULL
  FROM tm_x
{% if join_x %}
  UNION ALL
  SELECT tm_x.conv, tm_x.join_pos, 1, tm_x.usr, 0, 0, 0, 0, 1, NULL, NULL, NULL
  FROM tm_x
  WHERE tm_x.join_pos IS NOT NULL
{% endif %}
),
{# At each message: recomputed (r), orphans and total readers, the members but the sender. #}
tm_w1 AS (
  SELECT tm_s.conv, tm_s.pos, tm_s.kind, tm_s.sender, tm_s.stored, tm_s.is_countable, tm_s.is_legacy,
         {{ others("r", win) }} AS r,
         {{ others("o1", win) }}
           - SUM(tm_s.o2) OVER (PARTITION BY tm_s.conv {{ win }})
           + SUM(tm_s.o2) OVER (PARTITION BY tm_s.conv, tm_s.sender {{ win }}) AS orphans,
         {{ others("t", whole) }}
{%- if join_x %}

           + {{ others("tj", win) }}
{%- endif %} AS total
  FROM tm_s1 tm_s
),
{# The messages whose stored value drifts (capped alike), with their facts. #}
tm_d AS (
  SELECT tm_v.conv, tm_v.pos, tm_v.sender, tm_v.stored, tm_v.recomputed, tm_v.orphans, tm_v.excluded_after,
         tm_v.total
  FROM (SELECT tm_w.conv AS conv, tm_w.pos AS pos, tm_w.sender AS sender, tm_w.stored AS stored,
               CASE WHEN tm_w.is_countable = 1 THEN tm_w.r ELSE 0 END AS recomputed,
               tm_w.orphans AS orphans,
               CASE WHEN tm_w.is_countable = 0 AND tm_w.is_legacy = 1 THEN tm_w.r ELSE 0 END AS excluded_after,
               tm_w.total AS total
        FROM tm_w1 tm_w
        WHERE tm_w.kind = 0) tm_v
  WHERE tm_v.stored IS NULL
     OR {{ m.clamp("tm_v.stored", cap) }} <> {{ m.clamp("tm_v.recomputed", cap) }}
)
{% if count_only %}
SELECT COUNT(*) AS n FROM tm_d
{% else %}
SELECT tm_r.conv AS conv, tm_r.pos AS pos, tm_r.stored AS stored,
       CAST({{ m.clamp("tm_r.recomputed", cap) }} AS {{ int }}) AS recomputed,
       CAST({{ m.clamp("tm_r.orphans", cap) }} AS {{ int }}) AS orphans,
       CAST(CASE WHEN tm_own.conv IS NOT NULL
  {%- if join_x %} AND (tm_own.no_join = 1 OR tm_own.first_join < tm_r.pos){% endif %}
 THEN 1 ELSE 0 END AS {{ int }}) AS own_after,
       CAST({{ m.clamp("tm_r.excluded_after", cap) }} AS {{ int }}) AS excluded_after,
       CAST({{ m.clamp("tm_r.total", cap) }} AS {{ int }}) AS total_countable
FROM tm_d tm_r
LEFT JOIN (SELECT tm_o.conv AS conv, tm_o.usr AS usr,
                  MAX(CASE WHEN tm_o.join_pos IS NULL THEN 1 ELSE 0 END) AS no_join,
                  MIN(tm_o.join_pos) AS first_join
           FROM tm_x tm_o
           WHERE tm_o.is_active = 1
           GROUP BY tm_o.conv, tm_o.usr) tm_own
       ON tm_own.conv = tm_r.conv AND tm_own.usr = tm_r.sender
ORDER BY {{ m.in_order("tm_r.conv", msg.conv_k) }}, tm_r.pos
{% endif %}
