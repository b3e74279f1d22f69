{#- A mention counter's stream (issue 22, semantics.md "Several counters per member"): the rows
    the one-pass audit merges with the members' thresholds in place of the messages, one per
    (message, mentioned user) of the batch's messages (the mentions table's distinct pairs
    joined on `mentions.message = messages.key`), with the mentioned user as `sender`, so that
    the running sums partitioned by (conversation, sender) count, at a member's threshold, the
    messages after it that mention the member. Own messages never mention-count: a row is
    `c` (countable, and sent by someone else or by nobody), `l` (legacy-countable and the
    member's own: what `own_messages_counted` names) or `x` (legacy-countable, not
    countable, someone else's: `excluded_counted`). `only`: only the `c` rows, as (conv,
    pos, sender) (the count-only pass and the second pass). Arguments as the audit template's
    (macros.sql imported as `m`). -#}
{% macro stream(m, msg, ctr, int, rng, only) %}{% set mn = ctr.mentions %}{% set own = "(this." ~ msg.sender ~ " IS NOT NULL AND " ~ m.out("this." ~ msg.sender, msg.sender_k) ~ " = " ~ m.out("tm_mn.usr", msg.sender_k) ~ ")" %}SELECT {{ m.out("this." ~ msg.conv, msg.conv_k) }} AS conv, CAST(this.{{ msg.id }} AS {{ int }}) AS pos, {{ m.out("tm_mn.usr", msg.sender_k) }} AS sender{% if not only %},
               CASE WHEN {{ m.pred(msg.countable) }} AND NOT {{ own }} THEN 1 ELSE 0 END AS c,
               CASE WHEN {{ m.pred(msg.legacy) }} AND {{ own }} THEN 1 ELSE 0 END AS l,
               CASE WHEN {{ m.pred(msg.legacy) }} AND NOT COALESCE({{ m.pred(msg.countable) }}, FALSE) AND NOT {{ own }} THEN 1 ELSE 0 END AS x{% endif %}
        FROM {{ m.own(msg.table, msg.joins, msg.conv, msg.sender) }}
        JOIN (SELECT DISTINCT tm_m0.{{ mn.message }} AS msg, tm_m0.{{ mn.user }} AS usr FROM {{ mn.table }} tm_m0) tm_mn ON tm_mn.msg = this.{{ mn.key }}
        WHERE {% if only %}{{ m.pred(msg.countable) }} AND NOT {{ own }}{% else %}1 = 1{% endif %}{{ m.range("this." ~ msg.conv, rng, msg.conv_k) }}{% endmacro %}
