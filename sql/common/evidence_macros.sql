{#- The per-kind fragments of `position` and `timestamp` evidence (semantics.md "Backfill"),
    for backfill_evidence.sql. Every argument is passed in. The evidence row is named `this`
    (an evidence `filter` may say `this.receipt_type`), the conversation and user rows `conv`
    and `usr` (joined only when the filter reads them, as macros.sql `own`); a lookup's row is
    `tm_l`. -#}

{#- FROM of one evidence entry `e`: its table as `this`, the `conv` / `usr` rows its filter
    reads, and the lookup row its key names (a key that names no row is no evidence; with the
    lookup's `conversation`, a row of the same conversation only). -#}
{% macro from(e) %}FROM {{ e.table }} this{% if e.joins.conv %} LEFT JOIN {{ e.joins.conv.table }} conv ON conv.{{ e.joins.conv.key }} = this.{{ e.conv }}{% endif %}{% if e.joins.usr %} LEFT JOIN {{ e.joins.usr.table }} usr ON usr.{{ e.joins.usr.key }} = this.{{ e.user }}{% endif %}{% if e.lookup %} JOIN {{ e.lookup.table }} tm_l ON tm_l.{{ e.lookup.key }} = this.{{ e.column }}{% if e.lookup.conv %} AND tm_l.{{ e.lookup.conv }} = this.{{ e.conv }}{% endif %}{% endif %}{% endmacro %}

{#- The entry's row filter as ` AND (…)`, or nothing. -#}
{% macro filter(e) %}{% if e.filter %} AND ({{ e.filter }}){% endif %}{% endmacro %}

{#- The value one evidence row gives: the looked-up position, or the column itself. -#}
{% macro value(e) %}{% if e.lookup %}tm_l.{{ e.lookup.position }}{% else %}this.{{ e.column }}{% endif %}{% endmacro %}

{#- FROM … WHERE of the member's evidence rows (`conv`, `usr`: SQL for the member's keys). Without
    `e.conv` (a timestamp keyed by the user alone) every row of the user counts, in each of the
    user's conversations. -#}
{% macro rows(e, conv, usr) %}{{ from(e) +}}
         WHERE {% if e.conv %}this.{{ e.conv }} = {{ conv }} AND {% endif %}this.{{ e.user }} = {{ usr }}{{ filter(e) }}{% endmacro %}

{#- `position`: the highest read position among the member's evidence rows (NULL: none). -#}
{% macro position(e, conv, usr, int) %}(SELECT CAST(MAX({{ value(e) }}) AS {{ int }}) {{ rows(e, conv, usr) }}){% endmacro %}

{#- `timestamp`: the highest position of the member's conversation created at or before the
    latest "read at" time, 0 when nothing existed yet; NULL when the member has no time. -#}
{% macro timestamp(e, msg, conv, usr, int) %}CASE WHEN (SELECT MAX(this.{{ e.column }}) {{ rows(e, conv, usr) }}) IS NULL THEN NULL
            ELSE (SELECT CAST(COALESCE(MAX(tm_m.{{ msg.id }}), 0) AS {{ int }}) FROM {{ msg.table }} tm_m
                   WHERE tm_m.{{ msg.conv }} = {{ conv }}
                     AND tm_m.{{ msg.created_at }} <= (SELECT MAX(this.{{ e.column }}) {{ rows(e, conv, usr) }}))
       END{% endmacro %}
