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
