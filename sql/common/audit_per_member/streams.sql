{#- The rows the one-pass audit (audit_per_member.sql) merges with the members' thresholds, as
    `FROM (…) tm_f` with the columns (conv, pos, sender, …): the batch's messages, or a mention
    counter's (message, mentioned user) rows (mention_macros.sql `stream`). `rng` is the
    messages' range placeholders (`range2`, `range3`); `readers` whether reader rules apply
    (reader_macros.sql: then each row carries `rs` and `rcp`). -#}
{% import "macros.sql" as m %}
{% import "reader_macros.sql" as rd %}
{% import "mention_macros.sql" as mm %}

{#- The countable rows alone (the change count and the second pass): `c` is 1 on every row
    and carried only under reader rules. -#}
{% macro countable(msg, ctr, int, readers, rng) %}
{% if ctr.mentions %}
  FROM ({{ mm.stream(m, msg, ctr, int, rng, true) }}) tm_f
{% else %}
  FROM (SELECT {{ m.out("this." ~ msg.conv, msg.conv_k) }} AS conv, CAST(this.{{ msg.id }} AS {{ int }}) AS pos,
               {{ m.out("this." ~ msg.sender, msg.sender_k) }} AS sender
{%- if readers %}, 1 AS c{{ rd.msg_cols(msg) }}{% endif %}

        FROM {{ m.own(msg.table, msg.joins, msg.conv, msg.sender) }}
        WHERE {{ m.pred(msg.countable) }}{{ m.range("this." ~ msg.conv, rng, msg.conv_k) }}) tm_f
{% endif %}
{% endmacro %}

{#- Every row of the batch with its three flags (the classifying pass): `c` countable, `l`
    legacy-countable, `x` legacy-countable but not countable. -#}
{% macro flagged(msg, ctr, int, rng) %}
{% if ctr.mentions %}
  FROM ({{ mm.stream(m, msg, ctr, int, rng, false) }}) tm_f
{% else %}
  FROM (SELECT {{ m.out("this." ~ msg.conv, msg.conv_k) }} AS conv, CAST(this.{{ msg.id }} AS {{ int }}) AS pos,
               {{ m.out("this." ~ msg.sender, msg.sender_k) }} AS sender,
               CASE WHEN {{ m.pred(msg.countable) }} THEN 1 ELSE 0 END AS c,
               CASE WHEN {{ m.pred(msg.legacy) }} THEN 1 ELSE 0 END AS l,
{% if msg.countable %}
               CASE WHEN {{ m.pred(msg.legacy) }} AND NOT COALESCE({{ m.pred(msg.countable) }}, FALSE)
                    THEN 1 ELSE 0 END AS x
{% else %}
               0 AS x
{% endif %}
               {{ rd.msg_cols(msg) }}
        FROM {{ m.own(msg.table, msg.joins, msg.conv, msg.sender) }}
        WHERE 1 = 1{{ m.range("this." ~ msg.conv, rng, msg.conv_k) }}) tm_f
{% endif %}
{% endmacro %}
