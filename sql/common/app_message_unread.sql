{#- For a page of messages of one conversation, how many active members have not read each one
    yet, in one grouped query (seed 003 "배치 최적화 — N+1 방지"): a member counts for a message
    when active, not its sender, joined before it, and their watermark is below it; a message
    the mapping's `countable` predicate leaves out (deleted, system) is unread by nobody (0, as
    the audit's per-message count has it). Binds: the conversation, then each message id of
    the page. -#}
{% import "app_macros.sql" as a %}
SELECT am.id AS message_id,
       COUNT(CASE WHEN am.is_countable = 1 AND amb.usr IS NOT NULL AND COALESCE(aw.last_read_id, 0) < am.id
                  THEN 1 END) AS unread_by
FROM (SELECT this.{{ msg.id }} AS id, this.{{ msg.conv }} AS conv, this.{{ msg.sender }} AS sender,
             CASE WHEN {% if msg.countable %}({{ msg.countable }}){% else %}1 = 1{% endif %}
                  THEN 1 ELSE 0 END AS is_countable
      FROM {{ a.own(msg.table, msg.joins, msg.conv, msg.sender) }}
      WHERE this.{{ msg.conv }} = {{ bind.conv }}
        AND this.{{ msg.id }} IN ({% for m in bind.messages %}{{ m }}{{ ", " if not loop.last }}{% endfor %})) am
LEFT JOIN {{ a.members(mem, ctr, int, msg) }} amb
  ON amb.conv = am.conv AND amb.is_active = 1
 AND (am.sender IS NULL OR amb.usr <> am.sender)
 AND (amb.join_pos IS NULL OR am.id > amb.join_pos)
LEFT JOIN {{ wm }} aw ON aw.conversation_id = amb.conv AND aw.user_id = amb.usr
GROUP BY am.id
ORDER BY am.id
