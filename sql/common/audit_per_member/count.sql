{#- audit_per_member.sql, `count_only` (the backfill's change count): the number of drifting
    rows, from the one pass over the countable messages alone. Included after tm_lo: sees its
    variables (`rmsg`, `readers`, `win`, the imports `m`, `rd`, `st`). -#}
{# The thresholds (kind 0) merged with the countable rows above each conversation's lowest. #}
tm_s1 AS (
  SELECT tm_t.conv AS conv, tm_t.t1 AS pos, 0 AS kind, tm_t.usr AS sender, 0 AS c,
         tm_t.stored AS stored, tm_t.is_member AS is_member
{{- rd.reader_cols(rmsg, "tm_t.adm", "tm_t.usr", ["rc"], ["tc"]) }}
  FROM tm_t
  UNION ALL
{% set c = rd.gen(rmsg, "tm_f", "c") if readers else "1" %}
  SELECT tm_f.conv, tm_f.pos, 1, tm_f.sender, {{ c }}, NULL, NULL
{{- rd.message_cols(rmsg, "tm_f", ["c"], [["c", false]]) }}
{{ st.countable(msg, ctr, int, readers, range2) }}
  JOIN tm_lo ON tm_lo.tm_conv = tm_f.conv AND tm_f.pos > tm_lo.tm_min
),
{# Running sums at each row: countable rows after it, in its conversation and its sender's own. #}
tm_w1 AS (
  SELECT tm_s.kind, tm_s.stored, tm_s.is_member,
         SUM(tm_s.c) OVER (PARTITION BY tm_s.conv {{ win }}) AS a_all,
         SUM(tm_s.c) OVER (PARTITION BY tm_s.conv, tm_s.sender {{ win }}) AS a_own
{%- if msg.restricted %}, tm_s.adm,
         SUM(tm_s.rc) OVER (PARTITION BY tm_s.conv {{ win }}) AS ra_all,
         SUM(tm_s.rc) OVER (PARTITION BY tm_s.conv, tm_s.sender {{ win }}) AS ra_own
{%- endif %}
{% if rmsg.recipient %},
         {{ rd.to_sum("tm_s", "tc", win) }} AS to_c
{%- endif %}

  FROM tm_s1 tm_s
)
{# The thresholds whose stored value differs from the recomputed one (capped alike). #}
{% if ctr.mentions %}
{% set recomputed = "tm_w.a_own" ~ rd.adjust(rmsg, "tm_w", "ra_own", none, "to_c") %}
{% else %}
{% set recomputed = "tm_w.a_all - tm_w.a_own" ~ rd.adjust(rmsg, "tm_w", "ra_all", "ra_own", "to_c") %}
{% endif %}
SELECT COUNT(*) AS n
FROM tm_w1 tm_w
WHERE tm_w.kind = 0
  AND (tm_w.stored IS NULL
       OR {{ m.clamp("tm_w.stored", cap) }}
          <> {{ m.clamp("CASE WHEN tm_w.is_member = 1 THEN " ~ recomputed ~ " ELSE 0 END", cap) }})
