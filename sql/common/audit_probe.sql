{#- Audit, shape per_member (semantics.md "Shape A", "Drift classes"), one batch of conversations, in
    the index-probe form (issue 30, "Choose the form by the data"): every fact is one count per member
    through the messages' (conversation, position) index, from the member's own threshold up. It
    gives the same rows, values and order as the one-pass form (audit_per_member.sql); which of the
    two a batch runs is decided in src/stages/audit/form.rs. Only the unread counter: a mention
    counter, `restricted`, `recipient` and read_flags run the one-pass form.

    Each counter row gets a threshold t = max(watermark, join position) (watermark 0 when none):
      recomputed      : countable messages after t not sent by the member (0 when the member row
                        is missing or not active)
    and, for the drifting rows only:
      own_after       : the member's own legacy-countable messages after t
      excluded_after  : legacy-countable but not countable messages after t, not the member's own
      total_countable : countable messages not the member's own after its join position; without
                        one, every one: the conversation's countable messages, counted once per
                        (conversation, sender) for the drifting rows' conversations (`tm_tot`,
                        read by `range2`), less the member's own
    A message whose sender is NULL (a deleted account) is nobody's own (scenario S12). Under
    `--cap` a count stops at cap+1 (seed 000 §5): the (cap+1)-th message found ends it.

    Range placeholders: `range` on the counter rows, `range_wm` on the watermarks, `range_mem` on
    the members (when mapped), `range2` on the messages for `tm_tot` (not with `count_only`); the
    probes read the messages per member by its conversation.
    `count_only`: only the number of drifting rows (the backfill's change count). -#}
{% import "macros.sql" as m %}

{#- The messages of conversation `conv` above position `after` (none: every one) that satisfy
    `cond`, counted; under a cap, cap+1 as soon as a (cap+1)-th one exists. -#}
{% macro count(m, msg, cap, conv, after, cond) -%}
{% set rows -%}
FROM {{ m.own(msg.table, msg.joins, msg.conv, msg.sender) }}
             WHERE {{ m.eq("this." ~ msg.conv, msg.conv_k, conv) }}
               AND {% if after %}this.{{ msg.id }} > {{ after }}{% else %}1 = 1{% endif %} AND {{ cond }}
{%- endset %}
{% if cap is none -%}
(SELECT COUNT(*)
             {{ rows }})
{%- else -%}
CASE WHEN (SELECT this.{{ msg.id }}
             {{ rows }}
             ORDER BY this.{{ msg.id }} LIMIT 1 OFFSET {{ cap }}) IS NOT NULL
            THEN {{ cap + 1 }}
            ELSE (SELECT COUNT(*)
             {{ rows }}) END
{%- endif %}
{%- endmacro %}

{#- The message's sender is not `usr` (NULL is nobody's, and a NULL `usr` owns the NULL
    senders, as the one-pass form's (conversation, sender) partitions do). -#}
{% macro not_own(s, usr) -%}
({{ s }} IS NULL AND {{ usr }} IS NOT NULL OR {{ usr }} IS NULL AND {{ s }} IS NOT NULL OR {{ s }} <> {{ usr }})
{%- endmacro %}

{% set sender = m.out("this." ~ msg.sender, msg.sender_k) %}
{% set excluded %}{% if msg.countable %}{{ m.pred(msg.legacy) }} AND NOT COALESCE({{ m.pred(msg.countable) }}, FALSE)
{%- else %}1 = 0{% endif %}{% endset %}
WITH tm_t AS (
  SELECT tm_k.conv AS conv, tm_k.usr AS usr, tm_k.stored AS stored,
         CAST(tm_w.last_read_id AS {{ int }}) AS last_read_id, tm_w.source AS source,
{% if mem %}
         CASE WHEN tm_mb.usr IS NULL THEN 0 ELSE tm_mb.is_active END AS is_member,
         CAST(tm_mb.join_pos AS {{ int }}) AS join_pos,
         CAST(CASE WHEN tm_mb.join_pos IS NOT NULL AND tm_mb.join_pos > COALESCE(tm_w.last_read_id, 0)
                   THEN tm_mb.join_pos ELSE COALESCE(tm_w.last_read_id, 0) END AS {{ int }}) AS t1
{% else %}
         1 AS is_member,
         CAST(NULL AS {{ int }}) AS join_pos,
         CAST(COALESCE(tm_w.last_read_id, 0) AS {{ int }}) AS t1
{% endif %}
  FROM ({{ m.counter_rows(ctr, int, m.range("this." ~ ctr.conv, range, ctr.conv_k)) }}) tm_k
  LEFT JOIN {{ m.watermarks_read(wm, range_wm, wm_conv_k, wm_user_k) }} tm_w
         ON tm_w.conversation_id = tm_k.conv AND tm_w.user_id = tm_k.usr
{% if mem %}
  LEFT JOIN (SELECT {{ m.out("this." ~ mem.conv, mem.conv_k) }} AS conv,
                    {{ m.out("this." ~ mem.user, mem.user_k) }} AS usr,
                    {{ m.join_pos(mem, msg, int, "this") }} AS join_pos,
                    CASE WHEN {{ m.pred(mem.active) }} THEN 1 ELSE 0 END AS is_active
             FROM {{ m.own(mem.table, mem.joins, mem.conv, mem.user) }}
             WHERE 1 = 1{{ m.range("this." ~ mem.conv, range_mem, mem.conv_k) }}) tm_mb
         ON tm_mb.conv = tm_k.conv AND tm_mb.usr = tm_k.usr
{% endif %}
),
tm_c AS {{ materialized }} (
  SELECT tm_t.conv, tm_t.usr, tm_t.stored, tm_t.last_read_id, tm_t.source, tm_t.is_member,
         tm_t.join_pos, tm_t.t1,
         CASE WHEN tm_t.is_member = 1
              THEN {{ count(m, msg, cap, "tm_t.conv", "tm_t.t1",
                            m.pred(msg.countable) ~ " AND " ~ not_own(sender, "tm_t.usr")) }}
              ELSE 0 END AS recomputed
  FROM tm_t
)
{% if count_only %}
SELECT COUNT(*) AS n
FROM tm_c
WHERE tm_c.stored IS NULL OR {{ m.clamp("tm_c.stored", cap) }} <> tm_c.recomputed
{% else %}
,
tm_d AS {{ materialized }} (
  SELECT tm_c.conv, tm_c.usr, tm_c.stored, tm_c.recomputed, tm_c.last_read_id, tm_c.source,
         tm_c.is_member, tm_c.join_pos, tm_c.t1
  FROM tm_c
  WHERE tm_c.stored IS NULL OR {{ m.clamp("tm_c.stored", cap) }} <> tm_c.recomputed
),
tm_tot AS (
  SELECT tm_m.conv AS conv, tm_m.sender AS sender, COUNT(*) AS n
  FROM (SELECT {{ m.out("this." ~ msg.conv, msg.conv_k) }} AS conv, {{ sender }} AS sender
        FROM {{ m.own(msg.table, msg.joins, msg.conv, msg.sender) }}
        WHERE {{ m.pred(msg.countable) }}{{ m.range("this." ~ msg.conv, range2, msg.conv_k) }}) tm_m
  JOIN (SELECT DISTINCT tm_d.conv AS conv FROM tm_d WHERE tm_d.join_pos IS NULL) tm_dc ON tm_dc.conv = tm_m.conv
  GROUP BY tm_m.conv, tm_m.sender
),
tm_all AS (
  SELECT tm_tot.conv AS conv, SUM(tm_tot.n) AS n FROM tm_tot GROUP BY tm_tot.conv
)
SELECT tm_d.conv AS conv, tm_d.usr AS usr, tm_d.stored AS stored,
       CAST(tm_d.recomputed AS {{ int }}) AS recomputed,
       tm_d.last_read_id AS last_read_id, tm_d.source AS source,
       CAST(tm_d.is_member AS {{ int }}) AS is_member,
       CAST(CASE WHEN tm_d.usr IS NULL THEN 0
                 ELSE {{ count(m, msg, cap, "tm_d.conv", "tm_d.t1",
                               m.pred(msg.legacy) ~ " AND " ~ sender ~ " = tm_d.usr") }} END
            AS {{ int }}) AS own_after,
       CAST({{ count(m, msg, cap, "tm_d.conv", "tm_d.t1", excluded ~ " AND " ~ not_own(sender, "tm_d.usr")) }}
            AS {{ int }}) AS excluded_after,
       CAST(CASE WHEN tm_d.join_pos IS NULL
                 THEN {{ m.clamp("COALESCE(tm_all.n, 0) - COALESCE(tm_own.n, 0)", cap) }}
                 ELSE {{ count(m, msg, cap, "tm_d.conv", "tm_d.join_pos",
                               m.pred(msg.countable) ~ " AND " ~ not_own(sender, "tm_d.usr")) }} END
            AS {{ int }}) AS total_countable
FROM tm_d
LEFT JOIN tm_all ON tm_all.conv = tm_d.conv
LEFT JOIN tm_tot tm_own
       ON tm_own.conv = tm_d.conv AND (tm_own.sender = tm_d.usr OR tm_own.sender IS NULL AND tm_d.usr IS NULL)
ORDER BY {{ m.in_order("tm_d.conv", ctr.conv_k) }}, tm_d.usr
{% endif %}
