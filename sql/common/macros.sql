{#- Shared fragments for the stage SQL. Every argument is passed in: imported macros do not see
    the caller's variables. -#}

{#- A batch's conversation range: lo exclusive, hi inclusive, then the run's scope: from and
    to inclusive (bind placeholders, in that order), the deterministic sample and the
    quiescence filter (--min-age). `col` must be qualified with its table's alias: the sample
    and quiescence predicates hold subqueries of their own. -#}
{% macro range(col, r) %}{% if r.lo %} AND {{ col }} > {{ r.lo }}{% endif %}{% if r.hi %} AND {{ col }} <= {{ r.hi }}{% endif %}{% if r.from %} AND {{ col }} >= {{ r.from }}{% endif %}{% if r.to %} AND {{ col }} <= {{ r.to }}{% endif %}{% if r.sample %} AND {{ r.sample | replace("{col}", col) }}{% endif %}{% if r.quiet %} AND {{ r.quiet | replace("{col}", col) }}{% endif %}{% endmacro %}

{#- A value clamped to cap+1 (seed 000 §5: "99+"); unchanged without a cap. -#}
{% macro clamp(x, cap) %}{% if cap is not none %}CASE WHEN {{ x }} > {{ cap + 1 }} THEN {{ cap + 1 }} ELSE {{ x }} END{% else %}{{ x }}{% endif %}{% endmacro %}

{#- COUNT(*) of `from_where` ("FROM t alias WHERE …"). With a cap, counting stops at cap+1
    (seed 000 §5): `LIMIT cap+1` inside the count, one index range scan of at most cap+1 rows.
    MariaDB cannot refer to an outer row from a derived table, so there a probe for the
    (cap+1)-th row (LIMIT 1 OFFSET cap) answers cap+1 and only a shorter range is counted. -#}
{% macro count(from_where, cap, dialect) %}{% if cap is none %}(SELECT COUNT(*) {{ from_where }}){% elif dialect == "mysql" %}CASE WHEN (SELECT 1 {{ from_where }} LIMIT 1 OFFSET {{ cap }}) IS NOT NULL THEN {{ cap + 1 }} ELSE (SELECT COUNT(*) {{ from_where }}) END{% else %}(SELECT COUNT(*) FROM (SELECT 1 AS one {{ from_where }} LIMIT {{ cap + 1 }}) tm_capped){% endif %}{% endmacro %}

{#- A predicate of the mapping, or TRUE when none is given. -#}
{% macro pred(p) %}{% if p %}({{ p }}){% else %}1 = 1{% endif %}{% endmacro %}

{#- `a` is not `b`, with NULL a value like any other: a message whose sender is NULL (an account
    that no longer exists) is nobody's own message (semantics.md "countable message"; scenario
    S12). `a <> b` would be NULL there and drop the message from every count. -#}
{% macro distinct(a, b, dialect) %}{% if dialect == "postgres" %}{{ a }} IS DISTINCT FROM {{ b }}{% elif dialect == "mysql" %}NOT ({{ a }} <=> {{ b }}){% else %}{{ a }} IS NOT {{ b }}{% endif %}{% endmacro %}
