{#- The counter's own rows as every stage reads them (macros.sql `own`, `pred`), for the
    preflight's type check of `[counter] value` (src/schema/column_types.rs): a FROM clause
    with its WHERE, to which the engine's check appends its own condition. -#}
{% import "macros.sql" as m %}
{{ m.own(ctr.table, ctr.joins, ctr.conv or msg.conv, ctr.user) }} WHERE {{ m.pred(ctr.rows) }}
