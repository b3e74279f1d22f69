{#- Fragments of the application statements (`tidemark sql app`). Every argument is passed in. -#}

{#- The members of the conversations as (conv, usr, join_pos, is_active): the [members] table,
    or without one the counter rows (every counter row a member, active, no join position).
    Predicates and the join expression stay inside the subquery, where their unqualified
    column names mean the members table's; the own row is `this` (and `conv`, `usr` joined
    when the predicate reads them, as sql/common/macros.sql `own` does). With `members.join_time`
    (and `msg` given) the join position is the highest message position created at or before
    it (0 when none). -#}
{% macro own(t, j, conv_col, user_col) %}{{ t }} this
  {%- if j.conv %} LEFT JOIN {{ j.conv.table }} conv ON conv.{{ j.conv.key }} = this.{{ conv_col }}{% endif %}
  {% if j.usr %} LEFT JOIN {{ j.usr.table }} usr ON usr.{{ j.usr.key }} = this.{{ user_col }}{% endif %}
{% endmacro %}
{% macro members(mem, ctr, int, msg=none) %}
{% if mem %}
(SELECT this.{{ mem.conv }} AS conv, this.{{ mem.user }} AS usr,
  {% if mem.join %} CAST(this.{{ mem.join }} AS {{ int }})
  {%- elif mem.join_time and msg %}
 CASE WHEN this.{{ mem.join_time }} IS NULL THEN NULL
      ELSE (SELECT CAST(COALESCE(MAX(amj.{{ msg.id }}), 0) AS {{ int }}) FROM {{ msg.table }} amj
            WHERE amj.{{ msg.conv }} = this.{{ mem.conv }} AND amj.{{ msg.created_at }} <= this.{{ mem.join_time }}) END
  {%- else %} CAST(NULL AS {{ int }}){% endif %} AS join_pos,
 CASE WHEN {% if mem.active %}({{ mem.active }}){% else %}1 = 1{% endif %} THEN 1 ELSE 0 END AS is_active
 FROM {{ own(mem.table, mem.joins, mem.conv, mem.user) }})
{%- else %}
(SELECT {{ ctr.conv }} AS conv, {{ ctr.user }} AS usr, CAST(NULL AS {{ int }}) AS join_pos, 1 AS is_active
 FROM {{ ctr.table }})
{%- endif %}
{% endmacro %}

{#- One member's unread messages in one conversation, stopped at 100 rows (seed 000 §5: the UI
    shows "99+"): countable messages after max(watermark, join position), not the member's own
    (a NULL sender is nobody's own), counted only while the member is active. A mention
    counter (`ctr.mentions`, issue 32) counts only the messages that mention the member: a
    row of its mentions table, or its `mentioned` predicate over the message `this` and the
    member's `[users]` row `usr`. -#}
{% macro mentioned(ctr, user) -%}
{%- set mn = ctr.mentions -%}
{%- if mn and mn.predicate -%}
{%- if mn.usr -%}
EXISTS (SELECT 1 FROM {{ mn.usr.table }} usr WHERE usr.{{ mn.usr.key }} = {{ user }} AND ({{ mn.predicate }}))
{%- else -%}
({{ mn.predicate }})
{%- endif -%}
{%- elif mn -%}
EXISTS (SELECT 1 FROM {{ mn.table }} amn
        WHERE amn.{{ mn.message }} = this.{{ mn.key }} AND amn.{{ mn.user }} = {{ user }})
{%- endif -%}
{%- endmacro %}
{% macro capped(msg, mem, ctr, wm, int, conv, user) %}SELECT COUNT(*) FROM (
    SELECT 1 AS one FROM {{ own(msg.table, msg.joins, msg.conv, msg.sender) }}
    WHERE this.{{ msg.conv }} = {{ conv }}
      AND {% if msg.countable %}({{ msg.countable }}){% else %}1 = 1{% endif +%}
      AND (this.{{ msg.sender }} <> {{ user }} OR this.{{ msg.sender }} IS NULL){% if ctr.mentions %}
      AND {{ mentioned(ctr, user) }}{% endif %}
      AND this.{{ msg.id }} > COALESCE((SELECT aw.last_read_id FROM {{ wm }} aw
                                     WHERE aw.conversation_id = {{ conv }} AND aw.user_id = {{ user }}), 0)
      AND EXISTS (SELECT 1 FROM {{ members(mem, ctr, int, msg) }} amb
                  WHERE amb.conv = {{ conv }} AND amb.usr = {{ user }} AND amb.is_active = 1
                    AND (amb.join_pos IS NULL OR this.{{ msg.id }} > amb.join_pos))
    LIMIT 100) at1{% endmacro %}
