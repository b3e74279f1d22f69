{#- Backfill, one batch, inside the database: each member's watermark from the best evidence
    (semantics.md "Backfill: where each last_read_id comes from"), one row per member the batch
    covers (subjects.sql), never sent to the client: backfill_write.sql writes the rows with a
    value and tallies them all (backfill_tally.sql).

    Columns: conv, usr; ex (the watermark the member has, or NULL); act (1 active, 0 left);
    v (the watermark to write, NULL for none) and src (its provenance); kept (1: the counter was
    the only evidence and a watermark exists, left alone); held (1: evidence was left for a
    later run by the settle time); unrep (1: the counter chosen is negative or exceeds the
    countable messages); nopos (1: a position evidence held values, all below 0: no position,
    issue 29 row 23); notime (1: the member's timestamp evidence held only values that are
    no time, issue 29 rows 3 and 5).

    The watermark table is read through the batch's range too (its (conversation_id, user_id)
    index): joined whole, PostgreSQL hashed the entire table once per batch, a cost that grows
    with the table (78 400 rows read for a 4 000-member batch at 4N on the large workload).

    The settle guard (tm_u, with a settle time: `quiet` is the expression of its cutoff, the
    time the settle time ago) gives each of the batch's conversations with a message newer
    than the cutoff the lowest position of those young messages (`yp`; one grouped range read
    of the messages, LEFT JOINed, rather than a correlated subquery per member: Citus cannot
    run a correlated subquery whose FROM holds a CTE or a subquery, issue 21). Both sides pass
    the key on as `out` gives it, so the join compares bytes where the key columns' collations
    differ. A derived value w (a counter of any value, a timestamp, an own message, read
    flags) is young, and held back for a later run, when it newly covers a young message
    (issue 29 row 19, semantics.md "Backfill", settle time): w >= yp and w above the
    member's existing watermark (none: 0). Per member, not per conversation: a member whose
    derived watermark stays below the young messages is written now. Exact where the
    existing watermark is below yp (the young message at yp is one w newly covers); above
    it, every position w newly covers is above yp, so young where positions follow creation
    time, and otherwise held too (the safe side). A transaction still open holds a position
    below the young messages that committed after it, so a watermark below yp covers no
    open position allocated within the settle time.

    Layers: tm_ev brings every evidence value (ev1..evN, mapping order, from the kind's block in
    evidence.sql), the conversation's highest position (mp, read only for counter evidence), the lowest young position (yp) and the
    counter's rank (rk_pos, rk_rep); with timestamp evidence it is MATERIALIZED where the engine
    has the hint, so the correlated timestamp lookup is not repeated by the layers above, and
    without it left to the planner to inline (PostgreSQL 15, 5 000 members, position evidence:
    37 ms -> 27 ms a batch, most of the rest the insert itself; SQLite, 100 000 members: 0.36 s
    -> 0.26 s for the plan). tm_ef turns each value into
    the value the policy may use (e<i>) and whether it is held back (h<i>):
      position   : as it is (the application's own: never held);
      timestamp  : held when young;
      counter    : only for an active member; k <= 0 reads up to mp, 0 < k the rank's L[k]
                   (0 when k >= |L|); held when young unless a watermark exists (which the
                   counter then cannot move);
      own_message: only for an active member, a lower bound; held when young;
      read_flags : as timestamp (a member who left keeps it too).
    tm_ch chooses: policy "first": the first source in mapping order with a value, where a held
    source stops the search (the later run chooses as a settled one would); policy "highest":
    the highest position or timestamp value (the first of equal ones), else the counter. Own
    messages raise the choice (ow). The counter never advances an existing watermark. -#}
{% import "macros.sql" as m %}
{% import "evidence.sql" as ev %}
{% import "backfill_counter_rank.sql" as rank %}
{% set has_counter = evidence | selectattr("kind", "equalto", "counter") | list | length > 0 %}
{% set has_quiet = quiet is defined and quiet %}
{% set has_timestamp = evidence | selectattr("kind", "equalto", "timestamp") | list | length > 0 %}
{% set has_flags = evidence | selectattr("kind", "equalto", "read_flags") | list | length > 0 %}
{#- The policy's choice among tm_ef's values: `what` is the chosen value, its source, or
    whether it is an unrepresentable counter (0 when nothing is chosen). -#}
{#- Whether the derived value `w` is young (see the settle guard above): it newly covers a
    message younger than the settle time. -#}
{% macro young(w) %}(tm_v.yp IS NOT NULL AND {{ w }} >= tm_v.yp AND (tm_v.ex IS NULL OR {{ w }} > tm_v.ex)){% endmacro %}
{#- Counter evidence's value before the settle guard: k <= 0 the newest position, else L[k]. -#}
{% macro counter_value(i) %}CASE WHEN tm_v.ev{{ i }} <= 0 THEN tm_v.mp ELSE COALESCE(tm_v.rk_pos, 0) END{% endmacro %}
{% macro pick(e, i, what) %}{% if what == "value" %}tm_f.e{{ i }}{% elif what == "source" %}'{{ e.kind }}'{% elif e.kind == "counter" %}tm_f.u{{ i }}{% else %}0{% endif %}{% endmacro %}
{#- The own-message lower bound among tm_ef's values (NULL without the source). -#}
{% macro own_column(evidence, int) %}{% set ns = namespace(col="CAST(NULL AS " ~ int ~ ")") %}{% for e in evidence %}{% if e.kind == "own_message" %}{% set ns.col = "tm_f.e" ~ loop.index %}{% endif %}{% endfor %}{{ ns.col }}{% endmacro %}
{% macro chain(evidence, policy, what) %}
CASE
{% if policy == "highest" %}
{% for e in evidence %}
{% set i = loop.index %}
{% if e.kind in ["position", "timestamp", "read_flags"] %}
           WHEN tm_f.e{{ i }} IS NOT NULL{% for f in evidence %}{% if f.kind in ["position", "timestamp", "read_flags"] and loop.index != i %} AND (tm_f.e{{ loop.index }} IS NULL OR tm_f.e{{ i }} {{ ">" if loop.index < i else ">=" }} tm_f.e{{ loop.index }}){% endif %}{% endfor %} THEN {{ pick(e, i, what) }}
{% endif %}
{% endfor %}
{% for e in evidence %}
{% if e.kind == "counter" %}
           WHEN tm_f.e{{ loop.index }} IS NOT NULL THEN {{ pick(e, loop.index, what) }}
{% endif %}
{% endfor %}
{% else %}
{% for e in evidence %}
{% if e.kind != "own_message" %}
           WHEN tm_f.e{{ loop.index }} IS NOT NULL THEN {{ pick(e, loop.index, what) }}
{% if e.kind != "position" %}
           WHEN tm_f.h{{ loop.index }} = 1 THEN {{ "0" if what == "unrep" else "NULL" }}
{% endif %}
{% endif %}
{% endfor %}
{% endif %}
           ELSE {{ "0" if what == "unrep" else "NULL" }}
         END{% endmacro %}
WITH tm_subj AS (
{% include "subjects.sql" %}
)
{% if has_quiet %}
, tm_u AS (
  SELECT {{ m.out("tm_recent." ~ msg.conv, msg.conv_k) }} AS conv, CAST(MIN(tm_recent.{{ msg.id }}) AS {{ int }}) AS yp
  FROM {{ msg.table }} tm_recent
  WHERE {{ msg.time | replace("{v}", "tm_recent." ~ msg.created_at) }} > {{ quiet }}{{ m.range("tm_recent." ~ msg.conv, range, msg.conv_k) }}
  GROUP BY {{ m.out("tm_recent." ~ msg.conv, msg.conv_k) }}
)
{% endif %}
{% if has_counter %}
, {{ rank.ctes(msg, ctr, range, int) }}
{% endif %}
, tm_ev AS {{ materialized if has_timestamp else "" }} (
  SELECT tm_s.conv AS conv, tm_s.usr AS usr,
         CAST(tm_s.is_active AS {{ int }}) AS act,
         CAST(tm_x.last_read_id AS {{ int }}) AS ex,
{% for e in evidence %}
         {{ ev.value(e, loop.index, msg, int) }} AS ev{{ loop.index }},
{% if e.kind == "position" %}
         COALESCE(tm_e{{ loop.index }}.np, 0) AS np{{ loop.index }},
{% elif e.kind == "timestamp" %}
         {{ ev.timestamp_notime(e, loop.index) }} AS nt{{ loop.index }},
{% endif %}
{% endfor %}
{% if has_counter %}
         tm_r.pos AS rk_pos, tm_r.representable AS rk_rep,
{% endif %}
         {{ "tm_u.yp" if has_quiet else "CAST(NULL AS " ~ int ~ ")" }} AS yp,
{% if has_counter %}
         COALESCE(tm_mp.v, 0) AS mp
{% else %}
         0 AS mp
{% endif %}
  FROM tm_subj tm_s
  LEFT JOIN (SELECT {{ m.out("tm_w.conversation_id", wm_conv_k) }} AS conv, {{ m.out("tm_w.user_id", wm_user_k) }} AS usr, tm_w.last_read_id AS last_read_id
             FROM {{ wm }} tm_w
             WHERE 1 = 1{{ m.range("tm_w.conversation_id", range, wm_conv_k) }}) tm_x
         ON tm_x.conv = tm_s.conv AND tm_x.usr = tm_s.usr
{% for e in evidence %}
  {{ ev.join(e, loop.index, range, msg, ctr, int) }}
{% endfor %}
{% if has_counter %}
  {{ ev.max_pos_join(range, msg, int) }}
{% endif %}
{% if has_counter %}
  LEFT JOIN tm_rank tm_r ON tm_r.conv = tm_s.conv AND tm_r.usr = tm_s.usr
{% endif %}
{% if has_quiet %}
  LEFT JOIN tm_u ON tm_u.conv = tm_s.conv
{% endif %}
),
tm_ef AS (
  SELECT tm_v.conv AS conv, tm_v.usr AS usr, tm_v.act AS act, tm_v.ex AS ex,
{% for e in evidence %}
{% set i = loop.index %}
{% if e.kind == "position" %}
         tm_v.ev{{ i }} AS e{{ i }},
         tm_v.np{{ i }} AS np{{ i }},
{% elif e.kind == "timestamp" or e.kind == "read_flags" %}
         CASE WHEN {{ young("tm_v.ev" ~ i) }} THEN NULL ELSE tm_v.ev{{ i }} END AS e{{ i }},
         CASE WHEN {{ young("tm_v.ev" ~ i) }} THEN 1 ELSE 0 END AS h{{ i }},
{% if e.kind == "timestamp" %}
         tm_v.nt{{ i }} AS nt{{ i }},
{% endif %}
{% elif e.kind == "counter" %}
         CASE WHEN tm_v.act = 0 OR tm_v.ev{{ i }} IS NULL THEN NULL
              WHEN tm_v.ex IS NULL AND {{ young(counter_value(i)) }} THEN NULL
              ELSE {{ counter_value(i) }} END AS e{{ i }},
         CASE WHEN tm_v.act = 1 AND tm_v.ev{{ i }} IS NOT NULL AND tm_v.ex IS NULL AND {{ young(counter_value(i)) }} THEN 1 ELSE 0 END AS h{{ i }},
         CASE WHEN tm_v.ev{{ i }} < 0 OR (tm_v.ev{{ i }} > 0 AND COALESCE(tm_v.rk_rep, 0) = 0) THEN 1 ELSE 0 END AS u{{ i }},
{% elif e.kind == "own_message" %}
         CASE WHEN tm_v.act = 1 AND NOT {{ young("tm_v.ev" ~ i) }} THEN tm_v.ev{{ i }} END AS e{{ i }},
         CASE WHEN tm_v.act = 1 AND {{ young("tm_v.ev" ~ i) }} THEN 1 ELSE 0 END AS h{{ i }},
{% endif %}
{% endfor %}
         0 AS tm_end
  FROM tm_ev tm_v
),
tm_ch AS (
  SELECT tm_f.conv AS conv, tm_f.usr AS usr, tm_f.act AS act, tm_f.ex AS ex,
         CASE WHEN {% for e in evidence %}{% if e.kind != "position" %}tm_f.h{{ loop.index }} = 1 OR {% endif %}{% endfor %}1 = 0 THEN 1 ELSE 0 END AS held,
         {{ chain(evidence, policy, "value") }} AS cv,
         {{ chain(evidence, policy, "source") }} AS cs,
         {{ chain(evidence, policy, "unrep") }} AS unrep,
         {% if has_timestamp %}CASE WHEN {% for e in evidence %}{% if e.kind == "timestamp" %}tm_f.nt{{ loop.index }} = 1 OR {% endif %}{% endfor %}1 = 0 THEN 1 ELSE 0 END{% else %}0{% endif %} AS notime,

         {{ own_column(evidence, int) }} AS own,
         CASE WHEN {% for e in evidence %}{% if e.kind == "position" %}tm_f.np{{ loop.index }} = 1 OR {% endif %}{% endfor %}1 = 0 THEN 1 ELSE 0 END AS nopos

  FROM tm_ef tm_f
)
{% if has_flags %}
, tm_pl AS (
{% endif %}
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
FROM tm_ch tm_c{% if has_flags %}
)
{% include "backfill_flags.sql" %}{% endif %}
