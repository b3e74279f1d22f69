{#- `inspect` measuring a column against a messages table on a sample (issue 24,
    src/inspect/checks.rs): one row, `measured` (values sampled, not NULL) and `fits`.
    Identifiers come quoted from the catalog; the sample is the first `sample` rows the engine
    reads (no sort), as a CTE joined to the messages table (no correlated subquery: Citus refuses
    one over a sample with a LIMIT, issue 29 row 20): a position is one probe of the messages
    table per sampled value; a range and a time read each distinct sampled conversation's
    messages once (their count, their first creation time: issue 30), not once per value, and
    measure the values of at most `conversations` of them (evidence_share.sql says why).

    - mode "position": the value v of conversation c is a position of c in `mp` (c has a
      message there) or 0;
    - mode "range": 0 <= v <= the number of messages of c (a counter's representable range);
    - mode "time": c has a message created (`mt_created`) at or before the value (its first
      message is);
    - mode "order": over the messages table itself, the rows whose `created` is not earlier
      than the row before them in `mp` order within the conversation (one LAG window over the
      sampled conversations' rows). -#}
{% if mode == "order" %}
SELECT CAST(COUNT(*) AS {{ int }}) AS measured,
       CAST(COALESCE(SUM(CASE WHEN tm_o.previous IS NULL OR tm_o.previous <= tm_o.created THEN 1 ELSE 0 END), 0)
            AS {{ int }}) AS fits
FROM (SELECT tm_m.{{ mt_created }} AS created,
             LAG(tm_m.{{ mt_created }}) OVER (PARTITION BY tm_m.{{ mc }} ORDER BY tm_m.{{ mp }}) AS previous
      FROM {{ mt }} tm_m
      WHERE tm_m.{{ mp }} IS NOT NULL AND tm_m.{{ mt_created }} IS NOT NULL) tm_o
{% else %}
WITH tm_v AS (SELECT this.{{ ec }} AS conv,
                     {%- if mode == "time" %} this.{{ ev }}{% else %} CAST(this.{{ ev }} AS {{ int }}){% endif %} AS v
      FROM {{ et }} this
      WHERE this.{{ ev }} IS NOT NULL
      LIMIT {{ sample }}),
{% if mode == "position" %}
tm_k AS (SELECT DISTINCT tm_v.conv, tm_v.v
         FROM tm_v JOIN {{ mt }} tm_m ON tm_m.{{ mc }} = tm_v.conv AND tm_m.{{ mp }} = tm_v.v)
SELECT CAST(COUNT(*) AS {{ int }}) AS measured,
       CAST(COALESCE(SUM(CASE WHEN tm_v.v = 0 OR tm_k.v IS NOT NULL THEN 1 ELSE 0 END), 0)
            AS {{ int }}) AS fits
FROM tm_v LEFT JOIN tm_k ON tm_k.conv = tm_v.conv AND tm_k.v = tm_v.v
{% else %}
tm_c AS (SELECT DISTINCT tm_v.conv FROM tm_v LIMIT {{ conversations }}),
tm_k AS (SELECT tm_c.conv,
                {%- if mode == "range" %} COUNT(*) AS n{% else %} MIN(tm_m.{{ mt_created }}) AS first_at{% endif %}

         FROM tm_c
         JOIN {{ mt }} tm_m ON tm_m.{{ mc }} = tm_c.conv
         GROUP BY tm_c.conv)
SELECT CAST(COUNT(*) AS {{ int }}) AS measured,
       CAST(COALESCE(SUM(CASE WHEN
                     {%- if mode == "range" %} tm_v.v >= 0 AND tm_v.v <= COALESCE(tm_k.n, 0)
                     {%- else %} tm_k.first_at <= tm_v.v{% endif %}

                     THEN 1 ELSE 0 END), 0) AS {{ int }}) AS fits
FROM tm_v
JOIN tm_c ON tm_c.conv = tm_v.conv
LEFT JOIN tm_k ON tm_k.conv = tm_v.conv
{% endif %}
{% endif %}
