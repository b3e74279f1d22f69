{#- The members a backfill writes watermarks for, in one batch: the active members when
    [members] is mapped, else the rows of the per-member counter table. Columns: conv, usr,
    join_pos. -#}
{% import "macros.sql" as m %}
{% if mem %}
SELECT {{ mem.conv }} AS conv, {{ mem.user }} AS usr, {% if mem.join %}{{ mem.join }}{% else %}CAST(NULL AS {{ int }}){% endif %} AS join_pos
FROM {{ mem.table }}
WHERE {{ m.pred(mem.active) }}{{ m.range(mem.conv, range) }}
{% else %}
SELECT {{ ctr.conv }} AS conv, {{ ctr.user }} AS usr, CAST(NULL AS {{ int }}) AS join_pos
FROM {{ ctr.table }}
WHERE 1 = 1{{ m.range(ctr.conv, range) }}
{% endif %}
