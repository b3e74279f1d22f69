{#- The mapping proven on the data (issue 24; src/schema/evidence_share.rs): on a sample of one
    evidence entry's values, how many there are (`measured`) and how many fit the messages
    table's position space (`fits`). One row.

    - position (`e`, kind "position"): a value v of conversation c fits when c has a message at
      position v, or v is 0 ("nothing read"). A value below 0 is no position (issue 29 row 23)
      and is not sampled, as NULL is not. A global message id beside a per-conversation
      number (or the reverse) fits in few conversations: another position space.
    - timestamp: a time t of conversation c fits when c has a message created at or before t
      (the watermark it gives is a position of c, not 0). Times in other units (milliseconds
      beside seconds) fit nowhere.
    - counter (`e` none): a stored value k fits when 0 <= k <= the number of messages of its
      conversation (the range a watermark can represent: semantics.md "Backfill" 3).

    The sample (`tm_v`) is the first `sample` rows the engine reads whose value is not NULL (no
    sort: one bounded read of the evidence table). Cost (issue 30, "the share measurement at a
    small cost"): a position is one indexed probe of the messages table per sampled row
    ((conversation, position) index); a counter and a timestamp read each distinct sampled
    conversation's messages once (its count, its first message's time), not once per sampled
    row: a channel of 10,000 sampled members is counted once. They measure the sampled rows of
    at most `conversations` of the sampled conversations (`tm_c`, the first the engine finds):
    where every sampled row is a conversation of its own (direct messages), that many
    conversations are read, not `sample`. Citus (issue 29 row 20): no
    correlated subquery over the sample (Citus refuses one whose FROM holds a subquery with a
    LIMIT); the sample is a CTE, joined to the messages table and then LEFT JOINed by key.
    Keys are compared as macros.sql `eq` says; the sample's keys are passed on by `out`. -#}
{% import "macros.sql" as m %}
{% import "evidence_macros.sql" as evf %}
{% if e is none %}
{% set cond = " AND " ~ ctr.value ~ " IS NOT NULL" %}
WITH tm_v AS ({{ m.counter_rows(ctr, int, cond) }}
      LIMIT {{ sample }}),
tm_c AS (SELECT DISTINCT tm_v.conv FROM tm_v LIMIT {{ conversations }}),
tm_n AS (SELECT tm_c.conv, COUNT(*) AS n
         FROM tm_c
         JOIN {{ msg.table }} tm_m ON {{ m.eq("tm_m." ~ msg.conv, msg.conv_k, "tm_c.conv") }}
         GROUP BY tm_c.conv)
SELECT CAST(COUNT(*) AS {{ int }}) AS measured,
       CAST(COALESCE(SUM(CASE WHEN tm_v.stored >= 0 AND tm_v.stored <= COALESCE(tm_n.n, 0)
                     THEN 1 ELSE 0 END), 0) AS {{ int }}) AS fits
FROM tm_v
JOIN tm_c ON tm_c.conv = tm_v.conv
LEFT JOIN tm_n ON tm_n.conv = tm_v.conv
{% else %}
{% set cv = m.out("this." ~ e.conv, e.conv_k) %}
{% if e.is.position %}
WITH tm_v AS (SELECT {{ cv }} AS conv, CAST({{ evf.value(e) }} AS {{ int }}) AS v
      {{ evf.from(e) }}
      WHERE {{ evf.value(e) }} >= 0{{ evf.filter(e) }}
      LIMIT {{ sample }}),
tm_hit AS (SELECT DISTINCT tm_v.conv, tm_v.v
           FROM tm_v
           JOIN {{ msg.table }} tm_m
             ON {{ m.eq("tm_m." ~ msg.conv, msg.conv_k, "tm_v.conv") }} AND tm_m.{{ msg.id }} = tm_v.v)
SELECT CAST(COUNT(*) AS {{ int }}) AS measured,
       CAST(COALESCE(SUM(CASE WHEN tm_v.v = 0 OR tm_hit.v IS NOT NULL THEN 1 ELSE 0 END), 0) AS {{ int }}) AS fits
FROM tm_v LEFT JOIN tm_hit ON tm_hit.conv = tm_v.conv AND tm_hit.v = tm_v.v
{% else %}
{% set tv = e.time | replace("{v}", "this." ~ e.column) %}
WITH tm_v AS (SELECT {{ cv }} AS conv, {{ tv }} AS t
      {{ evf.from(e) }}
      WHERE {{ tv }} IS NOT NULL{{ evf.filter(e) }}
      LIMIT {{ sample }}),
tm_c AS (SELECT DISTINCT tm_v.conv FROM tm_v LIMIT {{ conversations }}),
tm_first AS (SELECT tm_c.conv, MIN({{ msg.time | replace("{v}", "tm_m." ~ msg.created_at) }}) AS first_at
             FROM tm_c
             JOIN {{ msg.table }} tm_m ON {{ m.eq("tm_m." ~ msg.conv, msg.conv_k, "tm_c.conv") }}
             GROUP BY tm_c.conv)
SELECT CAST(COUNT(*) AS {{ int }}) AS measured,
       CAST(COALESCE(SUM(CASE WHEN tm_first.first_at <= tm_v.t THEN 1 ELSE 0 END), 0) AS {{ int }}) AS fits
FROM tm_v
JOIN tm_c ON tm_c.conv = tm_v.conv
LEFT JOIN tm_first ON tm_first.conv = tm_v.conv
{% endif %}
{% endif %}
