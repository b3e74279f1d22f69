{#- The pieces of `position` and `timestamp` evidence that depend on the mapping's evidence
    forms (semantics.md "Backfill"), for evidence.sql's per-kind blocks. Every argument is passed
    in. The evidence row is named `this` (an evidence `filter` may say `this.receipt_type`), the
    conversation and user rows `conv` and `usr` (joined only when the filter reads them, as
    macros.sql `own`); the looked-up row `lookup` (issue 22: a filter may read it). -#}
{% import "macros.sql" as m %}

{#- FROM of one evidence entry `e`: its table as `this`, the `conv` / `usr` rows its filter
    reads, and the lookup row its key names (a key that names no row is no evidence; with the
    lookup's `conversation`, a row of the same conversation only). Conversation and user keys
    are compared as macros.sql `eq` says (issue 25). -#}
{% macro from(e) %}FROM {{ m.own(e.table, e.joins, e.conv, e.user) }}
  {%- if e.lookup %} JOIN {{ e.lookup.table }} lookup ON lookup.{{ e.lookup.key }} = this.{{ e.column }}
    {%- if e.lookup.conv %} AND {{ m.eq("lookup." ~ e.lookup.conv, e.lookup.conv_k, "this." ~ e.conv) -}}
    {% endif %}
  {%- endif %}
{% endmacro %}

{#- The entry's row filter as ` AND (…)`, or nothing. -#}
{% macro filter(e) %}{% if e.filter %} AND ({{ e.filter }}){% endif %}{% endmacro %}

{#- The value one evidence row gives: the looked-up position, or the column itself. -#}
{% macro value(e) %}
  {% if e.lookup %}lookup.{{ e.lookup.position }}{% else %}this.{{ e.column }}{% endif %}
{% endmacro %}

