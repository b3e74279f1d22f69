{#- audit_per_member.sql, the classifying pass: every fact at each threshold, and the rows
    that drift (tm_d). Included after tm_lo: sees its variables (`rmsg`, `readers`, `win`, the
    imports `m`, `rd`, `st`). -#}
{# The thresholds (kind 0, carrying the row's facts) merged with every message row above
   each conversation's lowest threshold (kind 1, carrying its flags c, l, x). #}
{% set rflags = ["rc", "rl", "rx", "rk"] if ctr.mentions else ["rc", "rl", "rx"] %}
tm_s1 AS (
  SELECT tm_t.conv AS conv, tm_t.t1 AS pos, 0 AS kind, tm_t.usr AS sender, 0 AS c, 0 AS l, 0 AS x,
         tm_t.stored AS stored, tm_t.last_read_id AS last_read_id, tm_t.source AS source,
         tm_t.is_member AS is_member, tm_t.join_pos AS join_pos
{{- rd.reader_cols(rmsg, "tm_t.adm", "tm_t.usr", rflags, ["tc", "tl", "tx", "ta", "tb"]) }}
  FROM tm_t
  UNION ALL
  SELECT tm_f.conv, tm_f.pos, 1, tm_f.sender, {{ rd.gen(rmsg, "tm_f", "c") }}, {{ rd.gen(rmsg, "tm_f", "l") }},
{{- " " ~ rd.gen(rmsg, "tm_f", "x") }}, NULL, NULL, NULL, NULL, NULL
{{- rd.message_cols(rmsg, "tm_f", ["c", "l", "x", "k"] if ctr.mentions else ["c", "l", "x"],
                    [["c", false], ["l", true], ["x", false], ["l", "any"], ["l", false]]) }}
{{ st.flagged(msg, ctr, int, range2) }}
  JOIN tm_lo ON tm_lo.tm_conv = tm_f.conv AND tm_f.pos > tm_lo.tm_min
),
{# Running sums at each row over the rows after it: in its conversation (_all) and its
   sender's own (_own); the restricted (r*) and addressed (t*, to_*) ones under reader rules. #}
tm_w1 AS (
  SELECT tm_s.conv, tm_s.pos, tm_s.kind, tm_s.sender, tm_s.stored, tm_s.last_read_id, tm_s.source,
         tm_s.is_member, tm_s.join_pos,
         SUM(tm_s.c) OVER (PARTITION BY tm_s.conv {{ win }}) AS a_all,
         SUM(tm_s.c) OVER (PARTITION BY tm_s.conv, tm_s.sender {{ win }}) AS a_own,
         SUM(tm_s.l) OVER (PARTITION BY tm_s.conv, tm_s.sender {{ win }}) AS l_own,
         SUM(tm_s.x) OVER (PARTITION BY tm_s.conv {{ win }}) AS x_all,
         SUM(tm_s.x) OVER (PARTITION BY tm_s.conv, tm_s.sender {{ win }}) AS x_own
{%- if msg.restricted %}, tm_s.adm,
         SUM(tm_s.rc) OVER (PARTITION BY tm_s.conv {{ win }}) AS ra_all,
         SUM(tm_s.rc) OVER (PARTITION BY tm_s.conv, tm_s.sender {{ win }}) AS ra_own,
         SUM(tm_s.rl) OVER (PARTITION BY tm_s.conv {{ win }}) AS rl_all,
         SUM(tm_s.rl) OVER (PARTITION BY tm_s.conv, tm_s.sender {{ win }}) AS rl_own,
         SUM(tm_s.rx) OVER (PARTITION BY tm_s.conv {{ win }}) AS rx_all,
         SUM(tm_s.rx) OVER (PARTITION BY tm_s.conv, tm_s.sender {{ win }}) AS rx_own
  {%- if ctr.mentions %},
         SUM(tm_s.rk) OVER (PARTITION BY tm_s.conv, tm_s.sender {{ win }}) AS rk_own
  {%- endif %}
{%- endif %}
{% if rmsg.recipient %},
         {{ rd.to_sum("tm_s", "tc", win) }} AS to_c,
         {{ rd.to_sum("tm_s", "tl", win) }} AS to_l,
         {{ rd.to_sum("tm_s", "tx", win) }} AS to_x,
         SUM(tm_s.ta) OVER (PARTITION BY tm_s.conv {{ win }}) AS ta_all,
         {{ rd.to_sum("tm_s", "ta", win) }} AS ta_to,
         SUM(tm_s.tb) OVER (PARTITION BY tm_s.conv, tm_s.sender {{ win }}) AS tb_own
{%- endif %}

  FROM tm_s1 tm_s
),
{# The facts at each threshold row, kept where the stored value drifts (capped alike). #}
{% if ctr.mentions %}
{% set recomputed = "tm_w.a_own" ~ rd.adjust(rmsg, "tm_w", "ra_own", none, "to_c") %}
{% set excluded = "tm_w.x_own" ~ rd.mention_hidden(rmsg, "tm_w") %}
{% else %}
{% set recomputed = "tm_w.a_all - tm_w.a_own" ~ rd.adjust(rmsg, "tm_w", "ra_all", "ra_own", "to_c") %}
{% set excluded = "tm_w.x_all - tm_w.x_own" ~ rd.hidden(rmsg, "tm_w") %}
{% endif %}
tm_d AS {{ materialized }} (
  SELECT tm_v.conv, tm_v.usr, tm_v.stored, tm_v.recomputed, tm_v.last_read_id, tm_v.source,
         tm_v.is_member, tm_v.join_pos, tm_v.own_after, tm_v.excluded_after
{%- if msg.restricted %}, tm_v.adm{% endif %}

  FROM (SELECT tm_w.conv AS conv, tm_w.sender AS usr, tm_w.stored AS stored,
               CASE WHEN tm_w.is_member = 1 THEN {{ recomputed }} ELSE 0 END AS recomputed,
               tm_w.last_read_id AS last_read_id, tm_w.source AS source, tm_w.is_member AS is_member,
               tm_w.join_pos AS join_pos,
               CASE WHEN tm_w.sender IS NULL THEN 0
                    ELSE tm_w.l_own{{ rd.adjust(rmsg, "tm_w", "rl_own", none, "to_l") }} END AS own_after,
               {{ excluded }} AS excluded_after
{%- if msg.restricted %},
               tm_w.adm AS adm
{%- endif %}

        FROM tm_w1 tm_w
        WHERE tm_w.kind = 0) tm_v
  WHERE tm_v.stored IS NULL
     OR {{ m.clamp("tm_v.stored", cap) }} <> {{ m.clamp("tm_v.recomputed", cap) }}
)
