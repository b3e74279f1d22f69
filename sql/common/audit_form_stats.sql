{#- What an audit batch holds, from its counter rows alone (issue 30, "Choose the form by the
    data"; src/stages/audit/form.rs `BatchFigures`): the rows it checks (`n`, what
    audit_count.sql gives), the stored counters summed (`behind`, negative and NULL ones as 0,
    each at most 10^9 so that the sums never overflow) and per conversation the largest one,
    summed (`deepest`). -#}
{% import "macros.sql" as m %}
SELECT CAST(COALESCE(SUM(tm_c.n), 0) AS {{ int }}) AS n,
       CAST(COALESCE(SUM(tm_c.behind), 0) AS {{ int }}) AS behind,
       CAST(COALESCE(SUM(tm_c.deepest), 0) AS {{ int }}) AS deepest
FROM (SELECT tm_k.conv AS conv, COUNT(*) AS n,
             SUM(tm_k.unread) AS behind, MAX(tm_k.unread) AS deepest
      FROM (SELECT tm_r.conv AS conv,
                   CASE WHEN tm_r.stored > 1000000000 THEN 1000000000
                        WHEN tm_r.stored > 0 THEN tm_r.stored ELSE 0 END AS unread
            FROM ({{ m.counter_rows(ctr, int, m.range("this." ~ ctr.conv, range, ctr.conv_k)) }}) tm_r) tm_k
      GROUP BY tm_k.conv) tm_c
