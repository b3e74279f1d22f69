{#- One zero-row query of the preflight (src/schema/sections.rs): the database parses and
    resolves it, and reads no row. `select`: the columns (qualified with `this.`) or the
    expression; `t`: the own table, quoted, aliased `this`; `j`: the rows its text reads
    (a Joins), joined by the own row's `conv_col` / `user_col` as every stage joins them
    (macros.sql `own`); `conds`: the mapping's predicates, each `none` when not given. -#}
{% import "macros.sql" as m %}
SELECT {{ select }} FROM {{ m.own(t, j, conv_col, user_col) }}
{%- if lk is defined and lk %} JOIN {{ lk.table }} lookup ON lookup.{{ lk.key }} = this.{{ lk.column }}{% endif %}
 WHERE {% for c in conds %}{{ m.pred(c) }} AND {% endfor %}1 = 0
