{#- The next conversations after the last batch (lo, exclusive) with how many rows each
    holds, in key order: the runner closes a batch on a conversation boundary once it holds
    batch_size rows, so a conversation is never split. `unit` is what a batch counts:
    members (backfill), counter rows (per_member audit), members plus the conversations of
    messages as empty ones (read_flags audit: a conversation without members may still hold
    flag rows, orphans to report), or messages (per_message audit). The keys are in their
    column's order (macros.sql `ord`: the column's own when its collation compares bytes, so
    its index gives them in order), the range compared in the same order. -#}
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
{% elif unit == "subjects_and_messages" %}
{#- The first `limit` conversations of the union are among the first `limit` of each side. -#}
{% set bounds = true %}
{% set c = m.ord("tm_r." ~ msg.conv, msg.conv_k) %}
SELECT tm_u.conv AS conv, CAST(SUM(tm_u.n) AS {{ int }}) AS n
FROM (
  SELECT tm_a.conv, tm_a.n FROM (
    SELECT tm_s.conv AS conv, COUNT(*) AS n
    FROM ({% include "subjects.sql" %}) tm_s
    GROUP BY tm_s.conv
    ORDER BY tm_s.conv
    LIMIT {{ limit }}
  ) tm_a
  UNION ALL
  SELECT tm_b.conv, tm_b.n FROM (
    SELECT {{ c }} AS conv, 0 AS n
    FROM {{ msg.table }} tm_r
    WHERE 1 = 1{{ m.range("tm_r." ~ msg.conv, range2, msg.conv_k) }}
    GROUP BY {{ c }}
    ORDER BY {{ c }}
    LIMIT {{ limit }}
  ) tm_b
) tm_u
GROUP BY tm_u.conv
ORDER BY tm_u.conv
LIMIT {{ limit }}
{% else %}
{% set bounds = true %}
SELECT tm_s.conv AS conv, COUNT(*) AS n
FROM ({% include "subjects.sql" %}) tm_s
GROUP BY tm_s.conv
ORDER BY tm_s.conv
LIMIT {{ limit }}
{% endif %}
