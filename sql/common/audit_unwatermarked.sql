{#- The members of an audit batch with no watermark (issue 25, row 10), in the batch's
    snapshot: per_member, its counter rows (counter_rows: one per member) whose (conversation,
    user) has no row in the watermark table; per_message, the active members of its
    conversations with none (the readers the audit counts). One row, `n`. Each is a lookup
    of the watermark table's primary key. `range`: the batch's conversations. -#}
{% import "macros.sql" as m %}
{% if shape == "per_message" %}
{% if mem %}
SELECT COUNT(*) AS n FROM {{ m.own(mem.table, mem.joins, mem.conv, mem.user) }}
WHERE {{ m.pred(mem.active) }}{{ m.range("this." ~ mem.conv, range) }}
  AND NOT EXISTS (SELECT 1 FROM {{ wm }} tm_w WHERE tm_w.user_id = this.{{ mem.user }} AND tm_w.conversation_id = this.{{ mem.conv }})
{% else %}
SELECT 0 AS n
{% endif %}
{% else %}
SELECT COUNT(*) AS n FROM ({{ m.counter_rows(ctr, int, m.range("this." ~ ctr.conv, range)) }}) tm_r
WHERE NOT EXISTS (SELECT 1 FROM {{ wm }} tm_w WHERE tm_w.user_id = tm_r.usr AND tm_w.conversation_id = tm_r.conv)
{% endif %}
