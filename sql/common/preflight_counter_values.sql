{#- The first value of a counter that is not a whole number within the 64-bit integer range
    (issue 25 rows 2 and 3; src/schema/counter_values.rs): every stage reads the counter through
    `CAST(… AS {{ int }})` (macros.sql counter_rows) and the contract archives it as an
    integer, so such a value would fail, be rounded or wrap. One row, or none when every value
    is one: the row's conversation and subject keys (the user, or the message's position; NULL
    for a table keyed by the conversation alone) and the value, as text.

    `t`: the own table, quoted, aliased `this`, with the rows `j` reads (macros.sql `own`,
    joined by `conv_col` / `user_col`); `sub_col`: the subject key column (empty: none);
    `value`: the value over `this`; `keep`: the predicate of the rows kept (none: all); `grouped`: the
    members' sums (`combine = "sum"`) instead of the rows' values, summed by the dialect's
    `wide_sum` (exact, or not failing). `not_int64` is the dialect's predicate over `{x}`.

    Cost: one pass over the table that stops at the first bad row (no ORDER BY: the first
    found, in the order the engine reads; a table whose values are all good is read once,
    whole, as a stream); grouped, one aggregation of it. The caller skips it where the
    declared type holds nothing else (Catalog::holds_only_int64). -#}
{% import "macros.sql" as m %}
SELECT CAST(tm_v.conv AS {{ text_type }}) AS conv, CAST(tm_v.sub AS {{ text_type }}) AS sub,
       CAST(tm_v.v AS {{ text_type }}) AS v
FROM (SELECT this.{{ conv_col }} AS conv, {% if sub_col %}this.{{ sub_col }}{% else %}NULL{% endif %} AS sub,
             {% if grouped %}{{ wide_sum }}({{ value }}){% else %}{{ value }}{% endif %} AS v
      FROM {{ m.own(t, j, conv_col, user_col) }}
      WHERE {{ m.pred(keep) }}{% if grouped %}
      GROUP BY this.{{ conv_col }}{% if sub_col %}, this.{{ sub_col }}{% endif %}{% endif %}) tm_v
WHERE tm_v.v IS NOT NULL AND {{ not_int64 | replace("{x}", "tm_v.v") }}
LIMIT 1
