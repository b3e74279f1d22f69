{#- Audit, shape per_message (semantics.md "Shape B", seed 003), one batch of conversations.
    recomputed(m) = active members x of m's conversation, x <> sender, joined before m, whose
    watermark is below m; 0 for a message that is not countable. Returns only drifting
    messages with the counts they are classified by: orphans (members who left or joined after
    m and have not read it), own (the sender is an active member), excluded (what a
    not-countable message would count), total (every member but the sender). -#}
{% import "macros.sql" as m %}
{% set wm_of_x = "COALESCE((SELECT tm_w.last_read_id FROM " ~ wm ~ " tm_w WHERE tm_w.user_id = tm_x." ~ mem.user ~ " AND tm_w.conversation_id = tm_x." ~ mem.conv ~ "), 0)" %}
{% set join_x = mem.join and ("tm_x." ~ mem.join) or none %}
WITH tm_base AS (
  SELECT {{ msg.conv }} AS conv, CAST({{ msg.id }} AS {{ int }}) AS pos, {{ msg.sender }} AS sender,
         CAST({{ ctr.column }} AS {{ int }}) AS stored,
         CASE WHEN {{ m.pred(msg.countable) }} THEN 1 ELSE 0 END AS is_countable,
         CASE WHEN {{ m.pred(msg.legacy) }} THEN 1 ELSE 0 END AS is_legacy
  FROM {{ msg.table }} tm_r
  WHERE 1 = 1{{ m.range("tm_r." ~ msg.conv, range) }}
),
tm_rows AS {{ materialized }} (
  SELECT tm_b.conv, tm_b.pos, tm_b.sender, tm_b.stored, tm_b.is_countable, tm_b.is_legacy,
         CASE WHEN tm_b.is_countable = 1 THEN
           {{ m.count("FROM " ~ mem.table ~ " tm_x WHERE tm_x." ~ mem.conv ~ " = tm_b.conv AND " ~ m.distinct("tm_x." ~ mem.user, "tm_b.sender", dialect) ~ " AND " ~ m.pred(mem.active) ~ (join_x and (" AND (" ~ join_x ~ " IS NULL OR " ~ join_x ~ " < tm_b.pos)") or "") ~ " AND " ~ wm_of_x ~ " < tm_b.pos", cap, dialect) }}
         ELSE 0 END AS recomputed
  FROM tm_base tm_b
)
SELECT tm_r.conv AS conv, tm_r.pos AS pos, tm_r.stored AS stored,
       CAST(tm_r.recomputed AS {{ int }}) AS recomputed,
       CAST({{ m.count("FROM " ~ mem.table ~ " tm_x WHERE tm_x." ~ mem.conv ~ " = tm_r.conv AND " ~ m.distinct("tm_x." ~ mem.user, "tm_r.sender", dialect) ~ " AND (NOT COALESCE(" ~ m.pred(mem.active) ~ ", FALSE)" ~ (join_x and (" OR " ~ join_x ~ " >= tm_r.pos") or "") ~ ") AND " ~ wm_of_x ~ " < tm_r.pos", cap, dialect) }} AS {{ int }}) AS orphans,
       CAST(CASE WHEN EXISTS (SELECT 1 FROM {{ mem.table }} tm_x WHERE tm_x.{{ mem.conv }} = tm_r.conv AND tm_x.{{ mem.user }} = tm_r.sender AND {{ m.pred(mem.active) }}{% if join_x %} AND ({{ join_x }} IS NULL OR {{ join_x }} < tm_r.pos){% endif %}) THEN 1 ELSE 0 END AS {{ int }}) AS own_after,
       CAST(CASE WHEN tm_r.is_countable = 0 AND tm_r.is_legacy = 1 THEN
         {{ m.count("FROM " ~ mem.table ~ " tm_x WHERE tm_x." ~ mem.conv ~ " = tm_r.conv AND " ~ m.distinct("tm_x." ~ mem.user, "tm_r.sender", dialect) ~ " AND " ~ m.pred(mem.active) ~ (join_x and (" AND (" ~ join_x ~ " IS NULL OR " ~ join_x ~ " < tm_r.pos)") or "") ~ " AND " ~ wm_of_x ~ " < tm_r.pos", cap, dialect) }}
       ELSE 0 END AS {{ int }}) AS excluded_after,
       CAST({{ m.count("FROM " ~ mem.table ~ " tm_x WHERE tm_x." ~ mem.conv ~ " = tm_r.conv AND " ~ m.distinct("tm_x." ~ mem.user, "tm_r.sender", dialect) ~ "", cap, dialect) }} AS {{ int }}) AS total_countable
FROM tm_rows tm_r
WHERE tm_r.stored IS NULL
   OR {{ m.clamp("tm_r.stored", cap) }} <> {{ m.clamp("tm_r.recomputed", cap) }}
ORDER BY tm_r.conv, tm_r.pos
