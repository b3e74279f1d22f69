{#- The mapping proven on the data (issue 24; src/schema/evidence_share.rs): on a sample of one
    evidence entry's values, how many there are (`measured`) and how many fit the messages
    table's position space (`fits`). One row.

    - position (`e`, kind "position"): a value v of conversation c fits when c has a message at
      position v, or v is 0 ("nothing read"). A global message id beside a per-conversation
      number (or the reverse) fits in few conversations: another position space.
    - timestamp: a time t of conversation c fits when c has a message created at or before t
      (the watermark it gives is a position of c, not 0). Times in other units (milliseconds
      beside seconds) fit nowhere.
    - counter (`e` none): a stored value k fits when 0 <= k <= the number of messages of its
      conversation (the range a watermark can represent: semantics.md "Backfill" 3).

    The sample is the first `sample` rows the engine reads whose value is not NULL (no sort: one
    bounded read of the evidence table); each is checked by one indexed probe of the messages
    table (its (conversation, position) or (conversation, created_at) index; the counter's count
    per conversation by the conversation index). Keys are compared as macros.sql `eq` says. -#}
{% import "macros.sql" as m %}
{% import "evidence_macros.sql" as evf %}
{% if e is none %}
{% set cond = " AND " ~ ctr.value ~ " IS NOT NULL" %}
SELECT CAST(COUNT(*) AS {{ int }}) AS measured,
       CAST(COALESCE(SUM(CASE WHEN tm_v.stored >= 0 AND tm_v.stored <= (SELECT COUNT(*) FROM {{ msg.table }} tm_m
                          WHERE {{ m.eq("tm_m." ~ msg.conv, msg.conv_k, "tm_v.conv") }}) THEN 1 ELSE 0 END), 0) AS {{ int }}) AS fits
FROM ({{ m.counter_rows(ctr, int, cond) }}
      LIMIT {{ sample }}) tm_v
{% else %}
{% set cv = m.out("this." ~ e.conv, e.conv_k) %}
{% if e.kind == "position" %}
SELECT CAST(COUNT(*) AS {{ int }}) AS measured,
       CAST(COALESCE(SUM(CASE WHEN tm_v.v = 0 OR EXISTS (SELECT 1 FROM {{ msg.table }} tm_m
                          WHERE {{ m.eq("tm_m." ~ msg.conv, msg.conv_k, "tm_v.conv") }} AND tm_m.{{ msg.id }} = tm_v.v)
                     THEN 1 ELSE 0 END), 0) AS {{ int }}) AS fits
FROM (SELECT {{ cv }} AS conv, CAST({{ evf.value(e) }} AS {{ int }}) AS v
      {{ evf.from(e) }}
      WHERE {{ evf.value(e) }} IS NOT NULL{{ evf.filter(e) }}
      LIMIT {{ sample }}) tm_v
{% else %}
SELECT CAST(COUNT(*) AS {{ int }}) AS measured,
       CAST(COALESCE(SUM(CASE WHEN EXISTS (SELECT 1 FROM {{ msg.table }} tm_m
                          WHERE {{ m.eq("tm_m." ~ msg.conv, msg.conv_k, "tm_v.conv") }} AND {{ msg.time | replace("{v}", "tm_m." ~ msg.created_at) }} <= tm_v.t)
                     THEN 1 ELSE 0 END), 0) AS {{ int }}) AS fits
{% set tv = e.time | replace("{v}", "this." ~ e.column) %}
FROM (SELECT {{ cv }} AS conv, {{ tv }} AS t
      {{ evf.from(e) }}
      WHERE {{ tv }} IS NOT NULL{{ evf.filter(e) }}
      LIMIT {{ sample }}) tm_v
{% endif %}
{% endif %}
