{#- The members a backfill writes watermarks for, in one batch: every member when [members] is
    mapped (a member who left keeps the read position its position or timestamp evidence gives:
    semantics.md "Backfill"), else the members of the per-member counter table (counter_rows: one row per
    member). The members row is `this` for the `active` predicate. Columns: conv, usr,
    join_pos, is_active (1 or 0); with `[messages] restricted` (issue 22) also adm (1: the
    member's `restricted_readers` admits it). The keys are passed on as macros.sql `out` gives
    them; with `bounds` set (batch_bounds.sql), the conversation in its order (`ord`) instead. -#}
{% import "macros.sql" as m %}
{% set ordered = bounds is defined and bounds %}
{% if mem %}
SELECT {{ m.ord("this." ~ mem.conv, mem.conv_k) if ordered else m.out("this." ~ mem.conv, mem.conv_k) }} AS conv,
       {{ m.out("this." ~ mem.user, mem.user_k) }} AS usr, {{ m.join_pos(mem, msg, int, "this") }} AS join_pos,
       CASE WHEN {{ m.pred(mem.active) }} THEN 1 ELSE 0 END AS is_active{% if msg.restricted %},
       CASE WHEN {{ m.pred(mem.readers) }} THEN 1 ELSE 0 END AS adm{% endif %}

FROM {{ m.own(mem.table, mem.joins, mem.conv, mem.user) }}
WHERE 1 = 1{{ m.range("this." ~ mem.conv, range, mem.conv_k) }}
{% else %}
SELECT tm_k.conv AS conv, tm_k.usr AS usr, CAST(NULL AS {{ int }}) AS join_pos, 1 AS is_active
FROM ({{ m.counter_rows(ctr, int, m.range("this." ~ ctr.conv, range, ctr.conv_k), ordered) }}) tm_k
{% endif %}
