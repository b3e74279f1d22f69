{#- Backfill, one batch: for each member the batch covers (subjects.sql), the watermark it
    already has and every evidence value of the mapping, best first (semantics.md "Backfill:
    where each last_read_id comes from"). Read inside the batch's REPEATABLE READ snapshot;
    tidemark takes the first non-NULL value and writes it with upsert_watermarks.sql.
      position   : the highest read position (a column, or the maximum over receipts; a key
                   resolved through the entry's lookup), over the rows its filter keeps
      timestamp  : the highest position created at or before the latest "read at" time,
                   0 when nothing existed yet (a time keyed by the user alone applies in
                   each of the user's conversations)
    The per-kind fragments are evidence_macros.sql.
      counter    : the stored counter k; k <= 0 means read up to max_pos, the conversation's
                   highest position; 0 < k is resolved by backfill_counter_rank.sql
      own_message: the member's own newest message (a lower bound)
    A member who is not active (left) keeps only position and timestamp evidence: tidemark
    ignores their counter and own messages (semantics.md "Backfill").
    With a settle time (`quiet`: the audit's --min-age predicate over tm_c.conv), `unsettled`
    is 1 for a conversation with a message younger than it: tidemark derives no "everything up
    to the newest message" watermark there in this run (semantics.md "Backfill", settle time).
    The predicate runs once per conversation of the batch (tm_u), not once per member: in a
    channel of thousands of members it would otherwise read the channel's messages per member. -#}
{% import "macros.sql" as m %}
{% import "evidence_macros.sql" as ev %}
WITH tm_subj AS (
{% include "subjects.sql" %}
)
{% if quiet is defined and quiet %}
, tm_u AS (
  SELECT tm_c.conv AS conv, CASE WHEN {{ quiet }} THEN 0 ELSE 1 END AS unsettled
  FROM (SELECT DISTINCT tm_subj.conv AS conv FROM tm_subj) tm_c
)
{% endif %}
SELECT tm_s.conv AS conv, tm_s.usr AS usr,
       CAST(tm_w.last_read_id AS {{ int }}) AS existing,
{% for e in evidence %}
{% if e.kind == "position" %}
       {{ ev.position(e, "tm_s.conv", "tm_s.usr", int) }} AS ev{{ loop.index }},
{% elif e.kind == "timestamp" %}
       {{ ev.timestamp(e, msg, "tm_s.conv", "tm_s.usr", int) }} AS ev{{ loop.index }},
{% elif e.kind == "counter" %}
       {{ m.counter_value_of(ctr, int, "tm_s.conv", "tm_s.usr") }} AS ev{{ loop.index }},
{% elif e.kind == "own_message" %}
       (SELECT CAST(MAX(tm_m.{{ msg.id }}) AS {{ int }}) FROM {{ msg.table }} tm_m
         WHERE tm_m.{{ msg.conv }} = tm_s.conv AND tm_m.{{ msg.sender }} = tm_s.usr) AS ev{{ loop.index }},
{% endif %}
{% endfor %}
       (SELECT CAST(COALESCE(MAX(tm_m.{{ msg.id }}), 0) AS {{ int }}) FROM {{ msg.table }} tm_m
         WHERE tm_m.{{ msg.conv }} = tm_s.conv) AS max_pos,
       CAST(tm_s.is_active AS {{ int }}) AS is_active
{% if quiet is defined and quiet %}
       , tm_u.unsettled AS unsettled
{% endif %}
FROM tm_subj tm_s
LEFT JOIN {{ wm }} tm_w ON tm_w.conversation_id = tm_s.conv AND tm_w.user_id = tm_s.usr
{% if quiet is defined and quiet %}
JOIN tm_u ON tm_u.conv = tm_s.conv
{% endif %}
ORDER BY tm_s.conv, tm_s.usr
