{#- The members with more than one `[members]` row (issue 25, row 4): every stage joins the
    members table by (conversation, user) and needs one row per member (the backfill would
    write a member's watermark twice in one statement, the audit would check a counter once
    per copy). Bad input, refused by the preflight before a stage reads anything, as several
    counter rows per member are (audit_counter_duplicates.sql). One row when there are any:
    `members` (how many), and the first of them by key (`conv`, `usr` as text, `n` its rows);
    no row when there are none (and none without `[members]`). The dialect supplies
    text_type. -#}
{% if mem %}
SELECT COUNT(*) OVER () AS members, CAST(tm_d.conv AS {{ text_type }}) AS conv,
       CAST(tm_d.usr AS {{ text_type }}) AS usr, CAST(tm_d.n AS {{ int }}) AS n
FROM (SELECT this.{{ mem.conv }} AS conv, this.{{ mem.user }} AS usr, COUNT(*) AS n
      FROM {{ mem.table }} this
      GROUP BY this.{{ mem.conv }}, this.{{ mem.user }}
      HAVING COUNT(*) > 1) tm_d
ORDER BY tm_d.conv, tm_d.usr
LIMIT 1
{% else %}
SELECT 0 AS members, '' AS conv, '' AS usr, 0 AS n WHERE 1 = 0
{% endif %}
