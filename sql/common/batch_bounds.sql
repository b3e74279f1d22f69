{#- The next conversations after the last batch (lo, exclusive) with how many rows each
    holds, in key order: the runner closes a batch on a conversation boundary once it holds
    batch_size rows, so a conversation is never split. `unit` is what a batch counts:
    members (backfill, per_member audit) or messages (per_message audit). -#}
{% import "macros.sql" as m %}
{% if unit == "messages" %}
SELECT {{ msg.conv }} AS conv, COUNT(*) AS n
FROM {{ msg.table }} tm_r
WHERE 1 = 1{{ m.range("tm_r." ~ msg.conv, range) }}
GROUP BY {{ msg.conv }}
ORDER BY {{ msg.conv }}
LIMIT {{ limit }}
{% elif unit == "counters" %}
SELECT {{ ctr.conv }} AS conv, COUNT(*) AS n
FROM {{ ctr.table }} tm_r
WHERE 1 = 1{{ m.range("tm_r." ~ ctr.conv, range) }}
GROUP BY {{ ctr.conv }}
ORDER BY {{ ctr.conv }}
LIMIT {{ limit }}
{% else %}
SELECT tm_s.conv AS conv, COUNT(*) AS n
FROM ({% include "subjects.sql" %}) tm_s
GROUP BY tm_s.conv
ORDER BY tm_s.conv
LIMIT {{ limit }}
{% endif %}
