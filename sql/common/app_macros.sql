{#- Fragments of the application statements (`tidemark sql app`). Every argument is passed in. -#}

{#- The members of the conversations as (conv, usr, join_pos, is_active): the [members] table,
    or without one the counter rows (every counter row a member, active, no join position).
    Predicates and the join expression stay inside the subquery, where their unqualified
    column names mean the members table's. With `members.join_time` (and `msg` given) the join
    position is the highest message position created at or before it (0 when none). -#}
{% macro members(mem, ctr, int, msg=none) %}{% if mem %}(SELECT {{ mem.conv }} AS conv, {{ mem.user }} AS usr, {% if mem.join %}CAST({{ mem.join }} AS {{ int }}){% elif mem.join_time and msg %}CASE WHEN {{ mem.table }}.{{ mem.join_time }} IS NULL THEN NULL ELSE (SELECT CAST(COALESCE(MAX(amj.{{ msg.id }}), 0) AS {{ int }}) FROM {{ msg.table }} amj WHERE amj.{{ msg.conv }} = {{ mem.table }}.{{ mem.conv }} AND amj.{{ msg.created_at }} <= {{ mem.table }}.{{ mem.join_time }}) END{% else %}CAST(NULL AS {{ int }}){% endif %} AS join_pos, CASE WHEN {% if mem.active %}({{ mem.active }}){% else %}1 = 1{% endif %} THEN 1 ELSE 0 END AS is_active FROM {{ mem.table }}){% else %}(SELECT {{ ctr.conv }} AS conv, {{ ctr.user }} AS usr, CAST(NULL AS {{ int }}) AS join_pos, 1 AS is_active FROM {{ ctr.table }}){% endif %}{% endmacro %}

{#- One member's unread messages in one conversation, stopped at 100 rows (seed 000 §5: the UI
    shows "99+"): countable messages after max(watermark, join position), not the member's own
    (a NULL sender is nobody's own), counted only while the member is active. -#}
{% macro capped(msg, mem, ctr, wm, int, conv, user) %}SELECT COUNT(*) FROM (
    SELECT 1 AS one FROM {{ msg.table }} am
    WHERE am.{{ msg.conv }} = {{ conv }}
      AND {% if msg.countable %}({{ msg.countable }}){% else %}1 = 1{% endif +%}
      AND (am.{{ msg.sender }} <> {{ user }} OR am.{{ msg.sender }} IS NULL)
      AND am.{{ msg.id }} > COALESCE((SELECT aw.last_read_id FROM {{ wm }} aw
                                     WHERE aw.conversation_id = {{ conv }} AND aw.user_id = {{ user }}), 0)
      AND EXISTS (SELECT 1 FROM {{ members(mem, ctr, int, msg) }} amb
                  WHERE amb.conv = {{ conv }} AND amb.usr = {{ user }} AND amb.is_active = 1
                    AND (amb.join_pos IS NULL OR am.{{ msg.id }} > amb.join_pos))
    LIMIT 100) at1{% endmacro %}
