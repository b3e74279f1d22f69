{#- The next conversations after the last batch (lo, exclusive) with how many rows each
    holds, in key order: the runner closes a batch on a conversation boundary once it holds
    batch_size rows, so a conversation is never split. `unit` is what a batch counts:
    members (backfill, per_member audit) or messages (per_message audit). The keys are in
    their column's order (macros.sql `ord`: the column's own when its collation compares
    bytes, so its index gives them in order), the range compared in the same order. -#}
{% import "macros.sql" as m %}
{% if unit == "messages" %}
{% set c = m.ord("tm_r." ~ msg.conv, msg.conv_k) %}
SELECT {{ c }} AS conv, COUNT(*) AS n
FROM {{ msg.table }} tm_r
WHERE 1 = 1{{ m.range("tm_r." ~ msg.conv, range, msg.conv_k) }}
GROUP BY {{ c }}
ORDER BY {{ c }}
LIMIT {{ limit }}
{% elif unit == "counters" %}
{% set c = m.ord("tm_r." ~ ctr.conv, ctr.conv_k) %}
SELECT {{ c }} AS conv, COUNT(*) AS n
FROM {{ ctr.table }} tm_r
WHERE 1 = 1{{ m.range("tm_r." ~ ctr.conv, range, ctr.conv_k) }}
GROUP BY {{ c }}
ORDER BY {{ c }}
LIMIT {{ limit }}
{% else %}
{% set bounds = true %}
SELECT tm_s.conv AS conv, COUNT(*) AS n
FROM ({% include "subjects.sql" %}) tm_s
GROUP BY tm_s.conv
ORDER BY tm_s.conv
LIMIT {{ limit }}
{% endif %}
