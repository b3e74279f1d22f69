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
    evidence.sql), the conversation's highest position (mp, read only for counter evidence),
    the lowest young position (yp) and the counter's rank (rk_pos, rk_rep); with timestamp
    evidence it is MATERIALIZED where the engine has the hint, so the correlated timestamp
    lookup is not repeated by the layers above, and without it left to the planner to inline
    (PostgreSQL 15, 5 000 members, position evidence: 37 ms -> 27 ms a batch, most of the rest
    the insert itself; SQLite, 100 000 members: 0.36 s -> 0.26 s for the plan).
    backfill_plan/choose.sql: tm_ef turns each value into the value the policy may use (e<i>)
    and whether it is held back (h<i>):
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
    messages raise the choice (ow). The counter never advances an existing watermark. The
    policy's macros are in backfill_plan/macros.sql. -#}
{% import "macros.sql" as m %}
{% import "evidence.sql" as ev %}
{% import "backfill_counter_rank.sql" as rank %}
{% set has_quiet = quiet is defined and quiet %}
{# The batch's members (subjects.sql). #}
WITH tm_subj AS (
{% include "subjects.sql" %}
)
{% if has_quiet %}
{# The settle guard: each conversation's lowest position created after the cutoff. #}
, tm_u AS (
  SELECT {{ m.out("tm_recent." ~ msg.conv, msg.conv_k) }} AS conv, CAST(MIN(tm_recent.{{ msg.id }}) AS {{ int }}) AS yp
  FROM {{ msg.table }} tm_recent
  WHERE {{ msg.time | replace("{v}", "tm_recent." ~ msg.created_at) }} > {{ quiet }}
  {{- m.range("tm_recent." ~ msg.conv, range, msg.conv_k) }}
  GROUP BY {{ m.out("tm_recent." ~ msg.conv, msg.conv_k) }}
)
{% endif %}
{% if kinds.counter %}
, {{ rank.ctes(msg, ctr, range, int) }}
{% endif %}
{# Every evidence value of each member, with its existing watermark (ex) and activity (act). #}
, tm_ev AS {{ materialized if kinds.timestamp else "" }} (
  SELECT tm_s.conv AS conv, tm_s.usr AS usr,
         CAST(tm_s.is_active AS {{ int }}) AS act,
         CAST(tm_x.last_read_id AS {{ int }}) AS ex,
{% for e in evidence %}
         {{ ev.value(e, loop.index, msg, int) }} AS ev{{ loop.index }},
{% if e.is.position %}
         COALESCE(tm_e{{ loop.index }}.np, 0) AS np{{ loop.index }},
{% elif e.is.timestamp %}
         {{ ev.timestamp_notime(e, loop.index) }} AS nt{{ loop.index }},
{% endif %}
{% endfor %}
{% if kinds.counter %}
         tm_r.pos AS rk_pos, tm_r.representable AS rk_rep,
{% endif %}
         {{ "tm_u.yp" if has_quiet else "CAST(NULL AS " ~ int ~ ")" }} AS yp,
{% if kinds.counter %}
         COALESCE(tm_mp.v, 0) AS mp
{% else %}
         0 AS mp
{% endif %}
  FROM tm_subj tm_s
  LEFT JOIN (SELECT {{ m.out("tm_w.conversation_id", wm_conv_k) }} AS conv,
                    {{ m.out("tm_w.user_id", wm_user_k) }} AS usr, tm_w.last_read_id AS last_read_id
             FROM {{ wm }} tm_w
             WHERE 1 = 1{{ m.range("tm_w.conversation_id", range, wm_conv_k) }}) tm_x
         ON tm_x.conv = tm_s.conv AND tm_x.usr = tm_s.usr
{% for e in evidence %}
  {{ ev.join(e, loop.index, range, msg, ctr, int) }}
{% endfor %}
{% if kinds.counter %}
  {{ ev.max_pos_join(range, msg, int) }}
{% endif %}
{% if kinds.counter %}
  LEFT JOIN tm_rank tm_r ON tm_r.conv = tm_s.conv AND tm_r.usr = tm_s.usr
{% endif %}
{% if has_quiet %}
  LEFT JOIN tm_u ON tm_u.conv = tm_s.conv
{% endif %}
),
{% include "backfill_plan/choose.sql" %}
