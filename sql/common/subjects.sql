{#- The members a backfill writes watermarks for, in one batch: every member when [members] is
    mapped (a member who left keeps the read position its position or timestamp evidence gives:
    semantics.md "Backfill"), else the rows of the per-member counter table. Columns: conv, usr,
    join_pos, is_active (1 or 0). -#}
{% import "macros.sql" as m %}
{% if mem %}
SELECT {{ mem.conv }} AS conv, {{ mem.user }} AS usr, {{ m.join_pos(mem, msg, int, none) }} AS join_pos,
       CASE WHEN {{ m.pred(mem.active) }} THEN 1 ELSE 0 END AS is_active
FROM {{ mem.table }}
WHERE 1 = 1{{ m.range(mem.conv, range) }}
{% else %}
SELECT {{ ctr.conv }} AS conv, {{ ctr.user }} AS usr, CAST(NULL AS {{ int }}) AS join_pos, 1 AS is_active
FROM {{ ctr.table }}
WHERE 1 = 1{{ m.range(ctr.conv, range) }}
{% endif %}
