{#- Shared fragments for the stage SQL. Every argument is passed in: imported macros do not see
    the caller's variables. -#}

{#- A batch's conversation range: lo exclusive, hi inclusive, then the run's scope: from and
    to inclusive (bind placeholders, in that order), the deterministic sample and the
    quiescence filter (--min-age). `col` must be qualified with its table's alias: the sample
    and quiescence predicates hold subqueries of their own. -#}
{% macro range(col, r) %}{% if r.lo %} AND {{ col }} > {{ r.lo }}{% endif %}{% if r.hi %} AND {{ col }} <= {{ r.hi }}{% endif %}{% if r.from %} AND {{ col }} >= {{ r.from }}{% endif %}{% if r.to %} AND {{ col }} <= {{ r.to }}{% endif %}{% if r.sample %} AND {{ r.sample | replace("{col}", col) }}{% endif %}{% if r.quiet %} AND {{ r.quiet | replace("{col}", col) }}{% endif %}{% endmacro %}

{#- A value clamped to cap+1 (seed 000 §5: "99+"); unchanged without a cap. -#}
{% macro clamp(x, cap) %}{% if cap is not none %}CASE WHEN {{ x }} > {{ cap + 1 }} THEN {{ cap + 1 }} ELSE {{ x }} END{% else %}{{ x }}{% endif %}{% endmacro %}

{#- A predicate of the mapping, or TRUE when none is given. -#}
{% macro pred(p) %}{% if p %}({{ p }}){% else %}1 = 1{% endif %}{% endmacro %}

{#- A member's join position (NULL when none; positions at or below it are not the member's):
    `members.join_position`, or from `members.join_time` the highest message position of the
    member's conversation created at or before that time (0 when none; NULL when the time is
    NULL). `row`: the members row's alias, or none for an unaliased members table. -#}
{% macro join_pos(mem, msg, int, row) %}{% if mem.join %}{% if row %}{{ row }}.{% endif %}{{ mem.join }}{% elif mem.join_time %}{% set r = row or mem.table %}CASE WHEN {{ r }}.{{ mem.join_time }} IS NULL THEN NULL ELSE (SELECT CAST(COALESCE(MAX(tm_j.{{ msg.id }}), 0) AS {{ int }}) FROM {{ msg.table }} tm_j WHERE tm_j.{{ msg.conv }} = {{ r }}.{{ mem.conv }} AND tm_j.{{ msg.created_at }} <= {{ r }}.{{ mem.join_time }}) END{% else %}CAST(NULL AS {{ int }}){% endif %}{% endmacro %}
