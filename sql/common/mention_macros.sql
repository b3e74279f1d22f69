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
    (macros.sql imported as `m`).

    Under reader rules (issue 29 row 16, semantics.md: a mention counts for a reader only where
    the message counts for that reader), the row of a message addressed (`recipient`) to
    another reader than the mentioned one counts for nobody (`c`, `l`: 0) and is, when
    legacy-countable and not the reader's own, one of the reader's excluded messages (`x`);
    with `restricted`, the row carries `rs` (restricted and not addressed to the mentioned
    reader) and `k` (legacy-countable, countable, not own: what the legacy counter counted
    of a message kept from a reader not admitted), which the audit subtracts and adds per
    reader at the reader's threshold (its `adm`); `only` rows then carry `c` (1) and `rs`. -#}
{% macro stream(m, msg, ctr, int, rng, only) %}
{% set mn = ctr.mentions %}
{% set reader = m.out("tm_mn.usr", msg.sender_k) %}
{# The row's message is the mentioned reader's own. #}
{% set own = "(this." ~ msg.sender ~ " IS NOT NULL AND " ~ m.out("this." ~ msg.sender, msg.sender_k) ~ " = "
   ~ reader ~ ")" %}
{% if msg.recipient %}
  {# The message is addressed to another reader than the mentioned one. #}
  {% set rcp = m.out("(" ~ msg.recipient ~ ")", msg.sender_k) %}
  {% set elsewhere = "(" ~ rcp ~ " IS NOT NULL AND " ~ rcp ~ " <> " ~ reader ~ ")" %}
  {% set away = " AND NOT " ~ elsewhere %}
  {% set hidden = " OR " ~ elsewhere %}
{% else %}
  {% set away = "" %}
  {% set hidden = "" %}
{% endif %}
SELECT {{ m.out("this." ~ msg.conv, msg.conv_k) }} AS conv, CAST(this.{{ msg.id }} AS {{ int }}) AS pos,
{{- " " ~ reader }} AS sender
{%- if not only %},
               CASE WHEN {{ m.pred(msg.countable) }} AND NOT {{ own }}{{ away }} THEN 1 ELSE 0 END AS c,
               CASE WHEN {{ m.pred(msg.legacy) }} AND {{ own }}{{ away }} THEN 1 ELSE 0 END AS l,
               CASE WHEN {{ m.pred(msg.legacy) }}
                     AND (NOT COALESCE({{ m.pred(msg.countable) }}, FALSE){{ hidden }})
                     AND NOT {{ own }} THEN 1 ELSE 0 END AS x
  {%- if msg.restricted %},
               CASE WHEN {{ m.pred(msg.legacy) }} AND {{ m.pred(msg.countable) }} AND NOT {{ own }}{{ away }}
                    THEN 1 ELSE 0 END AS k
  {%- endif %}
{% elif msg.restricted or msg.recipient %}, 1 AS c{% endif %}
{% if msg.restricted %},
               CASE WHEN {{ m.pred(msg.restricted) }}
  {%- if msg.recipient %} AND NOT ({{ rcp }} IS NOT NULL AND {{ rcp }} = {{ reader }}){% endif %}
 THEN 1 ELSE 0 END AS rs
{%- endif %}

        FROM {{ m.own(msg.table, msg.joins, msg.conv, msg.sender) }}
        {{ readers(mn, msg) }}
        WHERE {% if only %}{{ m.pred(msg.countable) }} AND NOT {{ own }}{{ away }}{% else %}1 = 1{% endif %}
        {%- if mn.predicate %} AND ({{ mn.predicate }}){% endif %}
        {{- m.range("this." ~ msg.conv, rng, msg.conv_k) }}
{%- endmacro %}

{#- The (message, mentioned user) pairs as `tm_mn` (`usr`: the mentioned user), joined to the
    messages row `this`: the mentions table's distinct pairs on `mentions.message =
    messages.key`; or, with a mention predicate (`[counter] mentioned`, issue 29 row 16), every
    reader of the message's conversation (the distinct (conversation, user) pairs of
    `[members]`, else of the counter table), its `[users]` row joined as `usr` when the
    predicate reads it; the caller's WHERE then keeps the pairs the predicate holds for. -#}
{% macro readers(mn, msg) %}
  {% if mn.predicate %}
JOIN (SELECT DISTINCT tm_m0.{{ mn.readers_conv }} AS conv, tm_m0.{{ mn.readers_user }} AS usr
      FROM {{ mn.readers }} tm_m0) tm_mn ON tm_mn.conv = this.{{ msg.conv }}
    {%- if mn.usr %}

        LEFT JOIN {{ mn.usr.table }} usr ON usr.{{ mn.usr.key }} = tm_mn.usr
    {%- endif %}
  {% else %}
JOIN (SELECT DISTINCT tm_m0.{{ mn.message }} AS msg, tm_m0.{{ mn.user }} AS usr
      FROM {{ mn.table }} tm_m0) tm_mn ON tm_mn.msg = this.{{ mn.key }}
  {%- endif %}
{% endmacro %}
