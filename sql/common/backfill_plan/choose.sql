{#- backfill_plan.sql, after tm_ev: each value as the policy may use it (tm_ef), the policy's
    choice (tm_ch), and the plan's rows. Included: sees the parent's variables (the imports
    `m`, `ev`). -#}
{% import "backfill_plan/macros.sql" as pm %}
{# Each value as the policy may use it (e<i>), whether it is held back (h<i>), the counter's
   unrepresentable flag (u<i>), and the no-position (np<i>) and no-time (nt<i>) flags. #}
tm_ef AS (
  SELECT tm_v.conv AS conv, tm_v.usr AS usr, tm_v.act AS act, tm_v.ex AS ex,
{% for e in evidence %}
{% set i = loop.index %}
{% if e.is.position %}
         tm_v.ev{{ i }} AS e{{ i }},
         tm_v.np{{ i }} AS np{{ i }},
{% elif e.is.timestamp or e.is.read_flags %}
         CASE WHEN {{ pm.young("tm_v.ev" ~ i) }} THEN NULL ELSE tm_v.ev{{ i }} END AS e{{ i }},
         CASE WHEN {{ pm.young("tm_v.ev" ~ i) }} THEN 1 ELSE 0 END AS h{{ i }},
{% if e.is.timestamp %}
         tm_v.nt{{ i }} AS nt{{ i }},
{% endif %}
{% elif e.is.counter %}
         CASE WHEN tm_v.act = 0 OR tm_v.ev{{ i }} IS NULL THEN NULL
              WHEN tm_v.ex IS NULL AND {{ pm.young(pm.counter_value(i)) }} THEN NULL
              ELSE {{ pm.counter_value(i) }} END AS e{{ i }},
         CASE WHEN tm_v.act = 1 AND tm_v.ev{{ i }} IS NOT NULL AND tm_v.ex IS NULL
                   AND {{ pm.young(pm.counter_value(i)) }} THEN 1 ELSE 0 END AS h{{ i }},
         CASE WHEN tm_v.ev{{ i }} < 0 OR (tm_v.ev{{ i }} > 0 AND COALESCE(tm_v.rk_rep, 0) = 0)
              THEN 1 ELSE 0 END AS u{{ i }},
{% elif e.is.own_message %}
         CASE WHEN tm_v.act = 1 AND NOT {{ pm.young("tm_v.ev" ~ i) }} THEN tm_v.ev{{ i }} END AS e{{ i }},
         CASE WHEN tm_v.act = 1 AND {{ pm.young("tm_v.ev" ~ i) }} THEN 1 ELSE 0 END AS h{{ i }},
{% endif %}
{% endfor %}
         0 AS tm_end
  FROM tm_ev tm_v
),
{# The policy's choice: value (cv), source (cs), unrepresentable (unrep); and the flags any
   entry raised: held, no time, no position; the own-message lower bound (own). #}
tm_ch AS (
  SELECT tm_f.conv AS conv, tm_f.usr AS usr, tm_f.act AS act, tm_f.ex AS ex,
         CASE WHEN {% for e in evidence %}{% if e.holds %}tm_f.h{{ loop.index }} = 1 OR {% endif %}{% endfor %}
         {{- "1 = 0" }} THEN 1 ELSE 0 END AS held,
         {{ pm.chain(evidence, highest, "value") }} AS cv,
         {{ pm.chain(evidence, highest, "source") }} AS cs,
         {{ pm.chain(evidence, highest, "unrep") }} AS unrep,
         {% if kinds.timestamp %}CASE WHEN
         {%- for e in evidence %}{% if e.is.timestamp %} tm_f.nt{{ loop.index }} = 1 OR{% endif %}{% endfor %}
         {{- " 1 = 0" }} THEN 1 ELSE 0 END{% else %}0{% endif %} AS notime,

         {{ pm.own_column(evidence, int) }} AS own,
         CASE WHEN {% for e in evidence %}{% if e.is.position %}tm_f.np{{ loop.index }} = 1 OR {% endif %}{% endfor %}
         {{- "1 = 0" }} THEN 1 ELSE 0 END AS nopos

  FROM tm_ef tm_f
)
{% if kinds.read_flags %}
, tm_pl AS (
{% endif %}
{# The plan's rows: the own message raises the choice; the counter never advances an
   existing watermark (kept). #}
SELECT tm_c.conv AS conv, tm_c.usr AS usr, tm_c.ex AS ex, tm_c.act AS act,
       CASE WHEN tm_c.own IS NOT NULL AND (tm_c.cv IS NULL OR tm_c.own > tm_c.cv) THEN tm_c.own
            WHEN tm_c.cs = 'counter' AND tm_c.ex IS NOT NULL THEN NULL
            ELSE tm_c.cv END AS v,
       CASE WHEN tm_c.own IS NOT NULL AND (tm_c.cv IS NULL OR tm_c.own > tm_c.cv) THEN 'own_message'
            WHEN tm_c.cs = 'counter' AND tm_c.ex IS NOT NULL THEN NULL
            ELSE tm_c.cs END AS src,
       CASE WHEN tm_c.own IS NOT NULL AND (tm_c.cv IS NULL OR tm_c.own > tm_c.cv) THEN 0
            WHEN tm_c.cs = 'counter' AND tm_c.ex IS NOT NULL THEN 1
            ELSE 0 END AS kept,
       tm_c.held AS held, tm_c.unrep AS unrep, tm_c.nopos AS nopos, tm_c.notime AS notime
FROM tm_ch tm_c{% if kinds.read_flags %}
)
{% include "backfill_flags.sql" %}{% endif %}
