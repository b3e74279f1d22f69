{#- `inspect` measuring a column against a messages table on a sample (issue 24,
    src/inspect/checks.rs): one row, `measured` (values sampled, not NULL) and `fits`.
    Identifiers come quoted from the catalog; the sample is the first `sample` rows the engine
    reads (no sort), each checked by one probe of the messages table.

    - mode "position": the value v of conversation c is a position of c in `mp` (c has a
      message there) or 0;
    - mode "range": 0 <= v <= the number of messages of c (a counter's representable range);
    - mode "time": c has a message created (`mt_created`) at or before the value;
    - mode "order": over the messages table itself, the rows whose `created` is not earlier
      than the row before them in `mp` order within the conversation (one LAG window over the
      sampled conversations' rows). -#}
{% if mode == "order" %}
SELECT CAST(COUNT(*) AS {{ int }}) AS measured,
       CAST(COALESCE(SUM(CASE WHEN tm_o.previous IS NULL OR tm_o.previous <= tm_o.created THEN 1 ELSE 0 END), 0) AS {{ int }}) AS fits
FROM (SELECT tm_m.{{ mt_created }} AS created,
             LAG(tm_m.{{ mt_created }}) OVER (PARTITION BY tm_m.{{ mc }} ORDER BY tm_m.{{ mp }}) AS previous
      FROM {{ mt }} tm_m
      WHERE tm_m.{{ mp }} IS NOT NULL AND tm_m.{{ mt_created }} IS NOT NULL) tm_o
{% else %}
SELECT CAST(COUNT(*) AS {{ int }}) AS measured,
       CAST(COALESCE(SUM(CASE WHEN {% if mode == "position" %}tm_v.v = 0 OR EXISTS (SELECT 1 FROM {{ mt }} tm_m WHERE tm_m.{{ mc }} = tm_v.conv AND tm_m.{{ mp }} = tm_v.v){% elif mode == "range" %}tm_v.v >= 0 AND tm_v.v <= (SELECT COUNT(*) FROM {{ mt }} tm_m WHERE tm_m.{{ mc }} = tm_v.conv){% else %}EXISTS (SELECT 1 FROM {{ mt }} tm_m WHERE tm_m.{{ mc }} = tm_v.conv AND tm_m.{{ mt_created }} <= tm_v.v){% endif %}
                     THEN 1 ELSE 0 END), 0) AS {{ int }}) AS fits
FROM (SELECT this.{{ ec }} AS conv, {% if mode == "time" %}this.{{ ev }}{% else %}CAST(this.{{ ev }} AS {{ int }}){% endif %} AS v
      FROM {{ et }} this
      WHERE this.{{ ev }} IS NOT NULL
      LIMIT {{ sample }}) tm_v
{% endif %}
