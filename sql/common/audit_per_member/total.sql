{#- audit_per_member.sql, the second pass: for the drifting rows (tm_d) only, total_countable
    (every countable message of the conversation not the member's own after its join
    position; none: after every message), then the report's rows. Included after facts.sql and a comma:
    sees the parent's variables (`rmsg`, `readers`, the imports `m`, `rd`, `st`). -#}
{# The second pass's window: thresholds with no join position (tail 1) after every message. #}
{% set win2 = "ORDER BY tm_s.tail, tm_s.pos DESC, tm_s.kind ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW" %}
{# The conversations that hold a drifting row. #}
tm_dc AS (
  SELECT DISTINCT tm_d.conv AS tm_conv FROM tm_d
),
{# The drifting rows at their join positions (kind 0) merged with their conversations'
   countable rows (kind 1). #}
tm_s2 AS (
  SELECT tm_d.conv AS conv, tm_d.join_pos AS pos, CASE WHEN tm_d.join_pos IS NULL THEN 1 ELSE 0 END AS tail,
         0 AS kind, tm_d.usr AS sender, 0 AS c, tm_d.stored AS stored, tm_d.recomputed AS recomputed,
         tm_d.last_read_id AS last_read_id, tm_d.source AS source, tm_d.is_member AS is_member,
         tm_d.own_after AS own_after, tm_d.excluded_after AS excluded_after
{{- rd.reader_cols(rmsg, "tm_d.adm", "tm_d.usr", ["rc"], ["tc"]) }}
  FROM tm_d
  UNION ALL
{% set c = rd.gen(rmsg, "tm_f", "c") if readers else "1" %}
  SELECT tm_f.conv, tm_f.pos, 0, 1, tm_f.sender, {{ c }}, NULL, NULL, NULL, NULL, NULL, NULL, NULL
{{- rd.message_cols(rmsg, "tm_f", ["c"], [["c", false]]) }}
{{ st.countable(msg, ctr, int, readers, range3) }}
  JOIN tm_dc ON tm_dc.tm_conv = tm_f.conv
),
{# Running sums at each row: countable rows after it, in its conversation and its sender's own. #}
tm_w2 AS (
  SELECT tm_s.conv, tm_s.kind, tm_s.sender, tm_s.stored, tm_s.recomputed, tm_s.last_read_id, tm_s.source,
         tm_s.is_member, tm_s.own_after, tm_s.excluded_after,
         SUM(tm_s.c) OVER (PARTITION BY tm_s.conv {{ win2 }}) AS t_all,
         SUM(tm_s.c) OVER (PARTITION BY tm_s.conv, tm_s.sender {{ win2 }}) AS t_own
{%- if msg.restricted %}, tm_s.adm,
         SUM(tm_s.rc) OVER (PARTITION BY tm_s.conv {{ win2 }}) AS tr_all,
         SUM(tm_s.rc) OVER (PARTITION BY tm_s.conv, tm_s.sender {{ win2 }}) AS tr_own
{%- endif %}
{% if rmsg.recipient %},
         {{ rd.to_sum("tm_s", "tc", win2) }} AS t_to
{%- endif %}

  FROM tm_s2 tm_s
)
{# The report's rows: each drifting row with its facts, capped. #}
{% if ctr.mentions %}
{% set total = "tm_r.t_own" ~ rd.adjust(rmsg, "tm_r", "tr_own", none, "t_to") %}
{% else %}
{% set total = "tm_r.t_all - tm_r.t_own" ~ rd.adjust(rmsg, "tm_r", "tr_all", "tr_own", "t_to") %}
{% endif %}
SELECT tm_r.conv AS conv, tm_r.sender AS usr, tm_r.stored AS stored,
       CAST({{ m.clamp("tm_r.recomputed", cap) }} AS {{ int }}) AS recomputed,
       CAST(tm_r.last_read_id AS {{ int }}) AS last_read_id, tm_r.source AS source,
       CAST(tm_r.is_member AS {{ int }}) AS is_member,
       CAST({{ m.clamp("tm_r.own_after", cap) }} AS {{ int }}) AS own_after,
       CAST({{ m.clamp("tm_r.excluded_after", cap) }} AS {{ int }}) AS excluded_after,
       CAST({{ m.clamp(total, cap) }} AS {{ int }}) AS total_countable
{%- if shape_is.read_flags %},
       CAST(COALESCE(tm_o.rd, 0) AS {{ int }}) AS read_after,
       CAST(COALESCE(tm_o.ur, 0) AS {{ int }}) AS unread_before
{%- endif %}

FROM tm_w2 tm_r
{% if shape_is.read_flags %}
{% include "audit_per_member/read_flags.sql" %}

{% endif %}
WHERE tm_r.kind = 0
ORDER BY {{ m.in_order("tm_r.conv", ctr.conv_k) }}, tm_r.sender
