{#- Backfill evidence, one block per kind (semantics.md "Backfill: where each last_read_id comes
    from"). Each kind has two macros, used by backfill_plan.sql:

      <kind>_join(e, i, ...)  : the LEFT JOIN(s) that bring the kind's evidence to the batch's
                                members (tm_s: conv, usr), as grouped derived tables restricted
                                to the batch's conversation range (one pass over the evidence
                                table's index range, joined on equality: no per-member
                                correlated subquery where a join does it); aliases tm_e<i>…
      <kind>_value(e, i, ...) : the kind's raw evidence value for the member, a BIGINT or NULL
                                when the member has none:
        position   : the highest read position (a column, or the maximum over receipts; a
                     key resolved through the entry's lookup), over the rows its filter keeps;
                     values below 0 are no position (`tm_e<i>.np`: the member had only such)
        timestamp  : the highest position created at or before the latest "read at" time, 0
                     when nothing existed yet (a time keyed by the user alone applies in each
                     of the user's conversations) (a non-equality join, so a correlated MAX per
                     member that has a time, on the (conversation, created_at) index)
        counter    : the stored counter k; k <= 0 reads up to max_pos, 0 < k is resolved by the
                     counter rank (backfill_counter_rank.sql)
        own_message: the member's own newest message (a lower bound)
        read_flags : the greatest position of the conversation below the member's lowest
                     unread flagged message (0 when none is below it), or the conversation's
                     greatest position when no flag row is unread; NULL without flag rows

    `e` is one entry of `evidence` (quoted table, user, conv, column), `i` its 1-based index in
    the mapping; `msg`, `ctr`, `int` and the batch `range` are passed in (imported macros do not
    see the caller's variables). A new kind, or a variant of one (a row filter, a lookup), is a
    new block here and an arm in backfill_plan.sql's dispatch macros below. -#}
{% import "macros.sql" as m %}
{% import "evidence_macros.sql" as evf %}

{# ==== kind: position ==== #}
{#- The rows of `e` (its table as `this`, the rows its filter reads, its lookup row:
    evidence_macros.sql `from`), kept by its filter; the value is the looked-up position or the
    column. A value below 0 is no position (issue 29 row 23: −1, −2 written as "nothing read"
    markers): `v` is the highest value at or above 0 (0: the application says nothing was
    read, a watermark of 0 as shared/spec/scenarios.json S7 and K1 expect; NULL when none, so
    the next source applies), and `np` is 1 when the member's rows hold values, all below 0
    (counted by the tally). -#}
{% macro position_join(e, i, range, int) %}
{% set cv = m.out("this." ~ e.conv, e.conv_k) %}{% set uv = m.out("this." ~ e.user, e.user_k) %}
LEFT JOIN (SELECT {{ cv }} AS conv, {{ uv }} AS usr,
                  CAST(MAX(CASE WHEN {{ evf.value(e) }} >= 0 THEN {{ evf.value(e) }} END) AS {{ int }}) AS v,
                  CASE WHEN MAX({{ evf.value(e) }}) < 0 THEN 1 ELSE 0 END AS np
           {{ evf.from(e) }}
           WHERE 1 = 1{{ m.range("this." ~ e.conv, range, e.conv_k) }}{{ evf.filter(e) }}
           GROUP BY {{ cv }}, {{ uv }}) tm_e{{ i }}
       ON tm_e{{ i }}.conv = tm_s.conv AND tm_e{{ i }}.usr = tm_s.usr
{% endmacro %}
{% macro position_value(e, i) %}tm_e{{ i }}.v{% endmacro %}

{# ==== kind: timestamp ==== #}
{#- Keyed by the user alone (no `e.conv`: a users table's "mark all as read" time), the time is
    not a grouped join over the whole table per batch but the user's own rows, read per member
    on the user key (a correlated MAX), and applies in each of the user's conversations. -#}
{% macro timestamp_join(e, i, range) %}
{% if e.conv %}
{% set cv = m.out("this." ~ e.conv, e.conv_k) %}{% set uv = m.out("this." ~ e.user, e.user_k) %}
{% set tv = e.time | replace("{v}", "this." ~ e.column) %}
LEFT JOIN (SELECT {{ cv }} AS conv, {{ uv }} AS usr, MAX({{ tv }}) AS t,
                  CASE WHEN COUNT(this.{{ e.column }}) > 0 AND COUNT({{ tv }}) = 0 THEN 1 ELSE 0 END AS nt
           {{ evf.from(e) }}
           WHERE 1 = 1{{ m.range("this." ~ e.conv, range, e.conv_k) }}{{ evf.filter(e) }}
           GROUP BY {{ cv }}, {{ uv }}) tm_e{{ i }}
       ON tm_e{{ i }}.conv = tm_s.conv AND tm_e{{ i }}.usr = tm_s.usr
{% endif %}
{% endmacro %}
{#- The highest position of the member's conversation created at or before its latest
    "read at" time `t` (the joined tm_e<i>.t, or, keyed by the user alone, the user's rows). -#}
{% macro timestamp_value(e, i, msg, int) %}
{% if e.conv %}
  {% set t = "tm_e" ~ i ~ ".t" %}
{% else %}
  {% set t = "(SELECT MAX(" ~ (e.time | replace("{v}", "this." ~ e.column)) ~ ") " ~ evf.from(e)
     ~ " WHERE " ~ m.eq("this." ~ e.user, e.user_k, "tm_s.usr") ~ evf.filter(e) ~ ")" %}
{% endif %}
CASE WHEN {{ t }} IS NULL THEN NULL
            ELSE (SELECT CAST(COALESCE(MAX(tm_m.{{ msg.id }}), 0) AS {{ int }}) FROM {{ msg.table }} tm_m
                   WHERE {{ m.eq("tm_m." ~ msg.conv, msg.conv_k, "tm_s.conv") }}
                     AND {{ msg.time | replace("{v}", "tm_m." ~ msg.created_at) }} <= {{ t }})
       END
{%- endmacro %}

{#- 1 when the member's "read at" values are all no time (issue 29 rows 3 and 5: a zero
    date, a text that does not parse; the value is then NULL and the next source applies),
    else 0: the backfill counts such members (backfill_tally.sql `no_time`). -#}
{% macro timestamp_notime(e, i) %}
{% if e.conv %}COALESCE(tm_e{{ i }}.nt, 0)
{%- else %}
COALESCE((SELECT CASE WHEN COUNT(this.{{ e.column }}) > 0
                       AND COUNT({{ e.time | replace("{v}", "this." ~ e.column) }}) = 0 THEN 1 ELSE 0 END
          {{ evf.from(e) }} WHERE {{ m.eq("this." ~ e.user, e.user_k, "tm_s.usr") }}{{ evf.filter(e) }}), 0)
{%- endif %}
{% endmacro %}

{# ==== kind: counter ==== #}
{% macro counter_join(e, i, range, ctr, int) %}
LEFT JOIN ({{ m.counter_rows(ctr, int, m.range("this." ~ ctr.conv, range, ctr.conv_k)) }}) tm_e{{ i }}
       ON tm_e{{ i }}.conv = tm_s.conv AND tm_e{{ i }}.usr = tm_s.usr
{% endmacro %}
{% macro counter_value(e, i) %}tm_e{{ i }}.stored{% endmacro %}

{# ==== kind: own_message ==== #}
{% macro own_message_join(e, i, range, msg, int) %}
{% set cv = m.out("tm_m." ~ msg.conv, msg.conv_k) %}{% set uv = m.out("tm_m." ~ msg.sender, msg.sender_k) %}
LEFT JOIN (SELECT {{ cv }} AS conv, {{ uv }} AS usr, CAST(MAX(tm_m.{{ msg.id }}) AS {{ int }}) AS v
           FROM {{ msg.table }} tm_m
           WHERE 1 = 1{{ m.range("tm_m." ~ msg.conv, range, msg.conv_k) }}
           GROUP BY {{ cv }}, {{ uv }}) tm_e{{ i }}
       ON tm_e{{ i }}.conv = tm_s.conv AND tm_e{{ i }}.usr = tm_s.usr
{% endmacro %}
{% macro own_message_value(e, i) %}tm_e{{ i }}.v{% endmacro %}

{# ==== kind: read_flags ==== #}
{#- Issue 22, semantics.md "Shape C": the flag rows (`e.table` as `this`, kept by its filter)
    of the batch's messages (`tm_fm`, read by the messages' conversation range; a flag row's
    conversation is its message's; with `conversation` (issue 29 row 11) the flag row joins
    its message on the conversation too), grouped per member: the lowest position whose flag is
    not read (`read` not true: NULL counts as unread). Below it, the greatest position is a
    non-equality, so a correlated MAX per member with an unread flag on the messages'
    (conversation, position) index, as timestamp evidence does; none unread: the
    conversation's greatest position (one grouped pass over the batch's messages). -#}
{% macro read_flags_join(e, i, range, msg, int) %}
{% set cv = m.out("tm_fm." ~ msg.conv, msg.conv_k) %}
{% set uv = m.out("this." ~ e.user, e.user_k) %}
{% set xv = m.out("tm_x." ~ msg.conv, msg.conv_k) %}
LEFT JOIN (SELECT tm_g.conv AS conv, tm_g.usr AS usr,
                  CASE WHEN tm_g.lo IS NULL THEN tm_gx.v
                       ELSE (SELECT CAST(COALESCE(MAX(tm_m.{{ msg.id }}), 0) AS {{ int }})
                             FROM {{ msg.table }} tm_m
                             WHERE {{ m.eq("tm_m." ~ msg.conv, msg.conv_k, "tm_g.conv") }}
                               AND tm_m.{{ msg.id }} < tm_g.lo)
                  END AS v
           FROM (SELECT {{ cv }} AS conv, {{ uv }} AS usr,
                        MIN(CASE WHEN ({{ e.read }}) THEN NULL ELSE CAST(tm_fm.{{ msg.id }} AS {{ int }}) END) AS lo
                 {{ evf.from(e) }}
                 JOIN {{ msg.table }} tm_fm ON tm_fm.{{ msg.id }} = this.{{ e.column }}
                   {%- if e.conv %} AND tm_fm.{{ msg.conv }} = this.{{ e.conv }}{% endif %}
                 WHERE 1 = 1{{ m.range("tm_fm." ~ msg.conv, range, msg.conv_k) }}{{ evf.filter(e) }}
                 GROUP BY {{ cv }}, {{ uv }}) tm_g
           LEFT JOIN (SELECT {{ xv }} AS conv, CAST(MAX(tm_x.{{ msg.id }}) AS {{ int }}) AS v
                      FROM {{ msg.table }} tm_x
                      WHERE 1 = 1{{ m.range("tm_x." ~ msg.conv, range, msg.conv_k) }}
                      GROUP BY {{ xv }}) tm_gx
                  ON tm_gx.conv = tm_g.conv) tm_e{{ i }}
       ON tm_e{{ i }}.conv = tm_s.conv AND tm_e{{ i }}.usr = tm_s.usr
{% endmacro %}
{% macro read_flags_value(e, i) %}tm_e{{ i }}.v{% endmacro %}

{# ==== dispatch: one arm per kind ==== #}
{#- `e.is` says the entry's kind (SqlContext EvIdents: one flag per EvidenceKind). -#}
{% macro join(e, i, range, msg, ctr, int) %}
{% if e.is.position %}{{ position_join(e, i, range, int) }}
{% elif e.is.timestamp %}{{ timestamp_join(e, i, range) }}
{% elif e.is.counter %}{{ counter_join(e, i, range, ctr, int) }}
{% elif e.is.own_message %}{{ own_message_join(e, i, range, msg, int) }}
{% elif e.is.read_flags %}{{ read_flags_join(e, i, range, msg, int) }}
{% endif %}
{% endmacro %}
{% macro value(e, i, msg, int) %}
{% if e.is.position %}{{ position_value(e, i) }}
{%- elif e.is.timestamp %}{{ timestamp_value(e, i, msg, int) }}
{%- elif e.is.counter %}{{ counter_value(e, i) }}
{%- elif e.is.own_message %}{{ own_message_value(e, i) }}
{%- elif e.is.read_flags %}{{ read_flags_value(e, i) }}
{%- endif %}
{% endmacro %}

{# ==== shared: the conversation's highest position ==== #}
{% macro max_pos_join(range, msg, int) %}
{% set cv = m.out("tm_m." ~ msg.conv, msg.conv_k) %}
LEFT JOIN (SELECT {{ cv }} AS conv, CAST(MAX(tm_m.{{ msg.id }}) AS {{ int }}) AS v
           FROM {{ msg.table }} tm_m
           WHERE 1 = 1{{ m.range("tm_m." ~ msg.conv, range, msg.conv_k) }}
           GROUP BY {{ cv }}) tm_mp
       ON tm_mp.conv = tm_s.conv
{% endmacro %}
