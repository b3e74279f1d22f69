{#- The members of an audit batch with no watermark (issue 25, row 10), in the batch's
    snapshot: per_member, its counter rows (counter_rows: one per member) whose (conversation,
    user) has no row in the watermark table; per_message, the active members of its
    conversations with none (the readers the audit counts). One row, `n`. Each is a lookup
    of the watermark table's primary key, the keys compared byte for byte (macros.sql `eq`).
    `range`: the batch's conversations. -#}
{% import "macros.sql" as m %}
{% if shape_is.per_message %}
{% if mem %}
SELECT COUNT(*) AS n FROM {{ m.own(mem.table, mem.joins, mem.conv, mem.user) }}
WHERE {{ m.pred(mem.active) }}{{ m.range("this." ~ mem.conv, range, mem.conv_k) }}
  AND NOT EXISTS (SELECT 1 FROM {{ wm }} tm_w
                  WHERE {{ m.eq("tm_w.user_id", wm_user_k, "this." ~ mem.user) }}
                    AND {{ m.eq("tm_w.conversation_id", wm_conv_k, "this." ~ mem.conv) }})
{% else %}
SELECT 0 AS n
{% endif %}
{% else %}
SELECT COUNT(*) AS n FROM ({{ m.counter_rows(ctr, int, m.range("this." ~ ctr.conv, range, ctr.conv_k)) }}) tm_r
WHERE NOT EXISTS (SELECT 1 FROM {{ wm }} tm_w
                  WHERE {{ m.eq("tm_w.user_id", wm_user_k, "tm_r.usr") }}
                    AND {{ m.eq("tm_w.conversation_id", wm_conv_k, "tm_r.conv") }})
{% endif %}
