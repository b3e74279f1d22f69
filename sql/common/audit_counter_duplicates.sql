{#- The members with more than one counter row (after `[counter] rows`) of a per-member counter
    without combine = "sum" (a plain `column` too: issue 29 row 12): bad input, refused before a
    stage reads the counter (issue 12: "combine = sum ... without it more than one row per member
    is reported"). One row when there are any: `members` (how many), and the first of them by key
    (`conv`, `usr` as text, `n` its rows); no row when there are none. The dialect supplies
    text_type. -#}
{% import "macros.sql" as m %}
SELECT COUNT(*) OVER () AS members, CAST(tm_d.conv AS {{ text_type }}) AS conv,
       CAST(tm_d.usr AS {{ text_type }}) AS usr, CAST(tm_d.n AS {{ int }}) AS n
FROM (SELECT this.{{ ctr.conv }} AS conv, this.{{ ctr.user }} AS usr, COUNT(*) AS n
      FROM {{ m.own(ctr.table, ctr.joins, ctr.conv, ctr.user) }}
      WHERE {{ m.pred(ctr.rows) }}
      GROUP BY this.{{ ctr.conv }}, this.{{ ctr.user }}
      HAVING COUNT(*) > 1) tm_d
ORDER BY tm_d.conv, tm_d.usr
LIMIT 1
