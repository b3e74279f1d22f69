{#- Counter evidence with 0 < k (semantics.md "Backfill", 3): with L the positions of the
    messages countable for the member, newest first, the watermark is L[k] (0-based: the newest
    message that was read); k >= |L| gives 0. One window over the batch's members and their
    conversations' countable messages; `countable_n` is |L| (a counter above it cannot be
    true and is reported). -#}
{% import "macros.sql" as m %}
SELECT tm_r.conv AS conv, tm_r.usr AS usr,
       CAST(MAX(CASE WHEN tm_r.rn = tm_r.k + 1 THEN tm_r.pos END) AS {{ int }}) AS pos,
       CAST(COUNT(*) AS {{ int }}) AS countable_n
FROM (
  SELECT tm_c.conv AS conv, tm_c.usr AS usr, tm_c.k AS k, tm_m.pos AS pos,
         ROW_NUMBER() OVER (PARTITION BY tm_c.conv, tm_c.usr ORDER BY tm_m.pos DESC) AS rn
  FROM (SELECT tm_s.conv AS conv, tm_s.usr AS usr, tm_s.join_pos AS join_pos,
               (SELECT MAX(tm_k.{{ ctr.column }}) FROM {{ ctr.table }} tm_k
                 WHERE tm_k.{{ ctr.conv }} = tm_s.conv AND tm_k.{{ ctr.user }} = tm_s.usr) AS k
        FROM ({% include "subjects.sql" %}) tm_s) tm_c
  JOIN (SELECT {{ msg.conv }} AS conv, {{ msg.id }} AS pos, {{ msg.sender }} AS sender
        FROM {{ msg.table }} WHERE {{ m.pred(msg.countable) }}) tm_m
    ON tm_m.conv = tm_c.conv AND tm_m.sender <> tm_c.usr
   AND (tm_c.join_pos IS NULL OR tm_m.pos > tm_c.join_pos)
  WHERE tm_c.k > 0
) tm_r
GROUP BY tm_r.conv, tm_r.usr
