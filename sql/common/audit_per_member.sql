{#- Audit, shape per_member (semantics.md "Shape A", "Drift classes"), one batch of
    conversations. One set-based statement: each counter row's recomputed unread is the number of
    countable messages after its watermark, not sent by the member, after the join position;
    a counter whose member row is missing or not active is owed 0. Returns only drifting rows,
    with the counts tidemark classifies them by (own, excluded, total). -#}
{% import "macros.sql" as m %}
WITH tm_base AS (
  SELECT tm_k.conv AS conv, tm_k.usr AS usr, tm_k.stored AS stored,
         tm_w.last_read_id AS last_read_id, tm_w.source AS source,
{% if mem %}
         CASE WHEN tm_mb.usr IS NULL THEN 0 ELSE tm_mb.is_active END AS is_member,
         tm_mb.join_pos AS join_pos
{% else %}
         1 AS is_member,
         CAST(NULL AS {{ int }}) AS join_pos
{% endif %}
  FROM (SELECT {{ ctr.conv }} AS conv, {{ ctr.user }} AS usr, CAST({{ ctr.column }} AS {{ int }}) AS stored
        FROM {{ ctr.table }} tm_r
        WHERE 1 = 1{{ m.range("tm_r." ~ ctr.conv, range) }}) tm_k
  LEFT JOIN {{ wm }} tm_w ON tm_w.conversation_id = tm_k.conv AND tm_w.user_id = tm_k.usr
{% if mem %}
  LEFT JOIN (SELECT {{ mem.conv }} AS conv, {{ mem.user }} AS usr,
                    {% if mem.join %}{{ mem.join }}{% else %}CAST(NULL AS {{ int }}){% endif %} AS join_pos,
                    CASE WHEN {{ m.pred(mem.active) }} THEN 1 ELSE 0 END AS is_active
             FROM {{ mem.table }}) tm_mb ON tm_mb.conv = tm_k.conv AND tm_mb.usr = tm_k.usr
{% endif %}
),
tm_rows AS {{ materialized }} (
  SELECT tm_b.conv, tm_b.usr, tm_b.stored, tm_b.last_read_id, tm_b.source, tm_b.is_member, tm_b.join_pos,
         CASE WHEN tm_b.is_member = 1 THEN
           {{ m.count("FROM " ~ msg.table ~ " tm_m WHERE tm_m." ~ msg.conv ~ " = tm_b.conv AND tm_m." ~ msg.id ~ " > COALESCE(tm_b.last_read_id, 0) AND " ~ m.distinct("tm_m." ~ msg.sender, "tm_b.usr", dialect) ~ " AND (tm_b.join_pos IS NULL OR tm_m." ~ msg.id ~ " > tm_b.join_pos) AND " ~ m.pred(msg.countable), cap, dialect) }}
         ELSE 0 END AS recomputed
  FROM tm_base tm_b
)
SELECT tm_r.conv AS conv, tm_r.usr AS usr, tm_r.stored AS stored,
       CAST(tm_r.recomputed AS {{ int }}) AS recomputed,
       CAST(tm_r.last_read_id AS {{ int }}) AS last_read_id, tm_r.source AS source,
       CAST(tm_r.is_member AS {{ int }}) AS is_member,
       CAST({{ m.count("FROM " ~ msg.table ~ " tm_m WHERE tm_m." ~ msg.conv ~ " = tm_r.conv AND tm_m." ~ msg.id ~ " > COALESCE(tm_r.last_read_id, 0) AND tm_m." ~ msg.sender ~ " = tm_r.usr AND (tm_r.join_pos IS NULL OR tm_m." ~ msg.id ~ " > tm_r.join_pos) AND " ~ m.pred(msg.legacy), cap, dialect) }} AS {{ int }}) AS own_after,
{% if msg.countable %}
       CAST({{ m.count("FROM " ~ msg.table ~ " tm_m WHERE tm_m." ~ msg.conv ~ " = tm_r.conv AND tm_m." ~ msg.id ~ " > COALESCE(tm_r.last_read_id, 0) AND " ~ m.distinct("tm_m." ~ msg.sender, "tm_r.usr", dialect) ~ " AND (tm_r.join_pos IS NULL OR tm_m." ~ msg.id ~ " > tm_r.join_pos) AND " ~ m.pred(msg.legacy) ~ " AND NOT COALESCE(" ~ m.pred(msg.countable) ~ ", FALSE)", cap, dialect) }} AS {{ int }}) AS excluded_after,
{% else %}
       CAST(0 AS {{ int }}) AS excluded_after,
{% endif %}
       CAST({{ m.count("FROM " ~ msg.table ~ " tm_m WHERE tm_m." ~ msg.conv ~ " = tm_r.conv AND " ~ m.distinct("tm_m." ~ msg.sender, "tm_r.usr", dialect) ~ " AND (tm_r.join_pos IS NULL OR tm_m." ~ msg.id ~ " > tm_r.join_pos) AND " ~ m.pred(msg.countable), cap, dialect) }} AS {{ int }}) AS total_countable
FROM tm_rows tm_r
WHERE tm_r.stored IS NULL
   OR {{ m.clamp("tm_r.stored", cap) }} <> {{ m.clamp("tm_r.recomputed", cap) }}
ORDER BY tm_r.conv, tm_r.usr
