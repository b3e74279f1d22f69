{#- Issue 22, "Messages only some readers count" (semantics.md): the pieces the one-pass
    statements add when the mapping has `[messages] restricted` (with `restricted_readers`)
    or `recipient`. A message counts for reader u when it is not addressed to another reader
    (recipient NULL or u) and, unless addressed, not restricted or u admitted. The passes keep
    their running counts over the conversation and over (conversation, sender) for the
    messages every reader counts, and add:
      - restricted: the same counts over the restricted (unaddressed) messages, subtracted
        for a reader the predicate does not admit (`adm` = 0);
      - addressed: running counts over (conversation, recipient): at a reader's threshold row
        (whose `rcp` is the reader) they count the messages addressed to that reader.
    A message row carries `rs` (1: restricted) and `rcp` (its recipient, NULL for everyone)
    beside its flags; `f` is its alias. Every argument is passed in. -#}
{% import "macros.sql" as m %}

{#- The message row's own columns: `, rs, rcp` over the messages row `this`. -#}
{% macro msg_cols(msg) %}
  {% if msg.restricted %}, CASE WHEN {{ m.pred(msg.restricted) }} THEN 1 ELSE 0 END AS rs{% endif %}
  {% if msg.recipient %}, {{ m.out("(" ~ msg.recipient ~ ")", msg.sender_k) }} AS rcp{% endif %}
{% endmacro %}

{#- A flag `v` of the message row `f` for the messages every reader counts (unaddressed). -#}
{% macro gen(msg, f, v) %}
  {% if msg.recipient %}CASE WHEN {{ f }}.rcp IS NULL THEN {{ f }}.{{ v }} ELSE 0 END
  {%- else %}{{ f }}.{{ v }}{% endif %}
{% endmacro %}

{#- The flag `v` of a restricted, unaddressed message (else 0). -#}
{% macro res(msg, f, v) %}
CASE WHEN {{ f }}.rs = 1{% if msg.recipient %} AND {{ f }}.rcp IS NULL{% endif %} THEN {{ f }}.{{ v }} ELSE 0 END
{%- endmacro %}

{#- The flag `v` of an addressed message: `own` false: addressed to another than its sender;
    true: addressed to its own sender; "any": addressed, whoever sent it. -#}
{% macro adr(f, v, own) %}CASE WHEN {{ f }}.rcp IS NOT NULL
  {%- if own == "any" %}
  {% elif own %} AND {{ f }}.sender = {{ f }}.rcp
  {%- else %} AND ({{ f }}.sender IS NULL OR {{ f }}.sender <> {{ f }}.rcp)
  {%- endif %} THEN {{ f }}.{{ v }} ELSE 0 END
{%- endmacro %}

{#- A threshold row's extra columns (`names`: each restricted or addressed flag, all 0),
    with its admission `adm` and its reader as `rcp`. -#}
{% macro reader_cols(msg, adm, usr, rflags, tflags) %}
  {% if msg.restricted %}, {{ adm }} AS adm{% for n in rflags %}, 0 AS {{ n }}{% endfor %}{% endif %}
  {% if msg.recipient %}, {{ usr }} AS rcp{% for n in tflags %}, 0 AS {{ n }}{% endfor %}{% endif %}
{% endmacro %}

{#- A message row's extra columns in the same order: NULL admission, each restricted flag
    from `rsrc` (the flags' sources), its recipient, each addressed flag from `tsrc` (each a
    [flag, own] pair). -#}
{% macro message_cols(msg, f, rsrc, tsrc) %}
  {% if msg.restricted %}, NULL{% for v in rsrc %}, {{ res(msg, f, v) }}{% endfor %}{% endif %}
  {% if msg.recipient %}, {{ f }}.rcp{% for p in tsrc %}, {{ adr(f, p[0], p[1]) }}{% endfor %}{% endif %}
{% endmacro %}

{#- A running sum of `v` over the addressed messages of the row's reader (`s`: the stream's
    alias, `order`: the window's ORDER BY and frame). -#}
{% macro to_sum(s, v, order) %}
SUM({{ s }}.{{ v }}) OVER (PARTITION BY {{ s }}.conv, {{ s }}.rcp {{ order }})
{%- endmacro %}

{#- What a reader-dependent count adds at a threshold row `w`: minus the restricted count
    (`all` - `own`, or `all` alone) for a reader not admitted, plus the count addressed to the
    reader (`to`). Empty without the keys. -#}
{% macro adjust(msg, w, all, own, to) %}
  {% if msg.restricted %} - (1 - {{ w }}.adm) * ({{ w }}.{{ all }}
    {%- if own %} - {{ w }}.{{ own }}{% endif %}){% endif %}
  {% if msg.recipient %} + {{ w }}.{{ to }}{% endif %}
{% endmacro %}

{#- Issue 29 row 15 (semantics.md "Messages only some readers count"): what the excluded
    count (`x_all - x_own`, the messages every reader counts that the legacy counter counted
    but are not countable) adds at a threshold row `w` for the messages the rule keeps from
    the reader, which are, for that reader, not countable: a restricted message's legacy
    count (`rl_all - rl_own`) in place of its not-countable count (`rx_all - rx_own`) for a
    reader not admitted; the addressed messages' not-countable count of the reader (`to_x`),
    and every legacy-counted message addressed to another reader and not the reader's own
    (`ta_all - ta_to - tb_own`: all addressed, minus those addressed to the reader, minus the
    reader's own addressed to another). Empty without the keys. -#}
{% macro hidden(msg, w) %}
  {% if msg.restricted %}
 + (1 - {{ w }}.adm) * (({{ w }}.rl_all - {{ w }}.rl_own) - ({{ w }}.rx_all - {{ w }}.rx_own))
  {%- endif %}
  {% if msg.recipient %} + {{ w }}.to_x + ({{ w }}.ta_all - {{ w }}.ta_to - {{ w }}.tb_own){% endif %}
{% endmacro %}

{#- The same for a mention counter (issue 29 row 16): its stream already counts a mention of
    a message addressed to another reader as excluded (mention_macros.sql), so only the
    restricted rows that were countable and legacy-counted (`rk_own`) are added for a reader
    not admitted. Empty without `restricted`. -#}
{% macro mention_hidden(msg, w) %}
  {% if msg.restricted %} + (1 - {{ w }}.adm) * {{ w }}.rk_own{% endif %}
{% endmacro %}
