{#- What an audit batch holds, from its counter rows alone (issue 30, "Choose the form by the
    data"; src/stages/audit/form.rs `BatchFigures`): the rows it checks (`n`, what
    audit_count.sql gives), the stored counters summed (`behind`, negative and NULL ones as 0)
    and per conversation the largest one, summed (`deepest`). -#}
{% import "macros.sql" as m %}
SELECT CAST(COALESCE(SUM(tm_c.n), 0) AS {{ int }}) AS n,
       CAST(COALESCE(SUM(tm_c.behind), 0) AS {{ int }}) AS behind,
       CAST(COALESCE(SUM(tm_c.deepest), 0) AS {{ int }}) AS deepest
FROM (SELECT tm_k.conv AS conv, COUNT(*) AS n,
             SUM(CASE WHEN tm_k.stored > 0 THEN tm_k.stored ELSE 0 END) AS behind,
             MAX(CASE WHEN tm_k.stored > 0 THEN tm_k.stored ELSE 0 END) AS deepest
      FROM ({{ m.counter_rows(ctr, int, m.range("this." ~ ctr.conv, range, ctr.conv_k)) }}) tm_k
      GROUP BY tm_k.conv) tm_c
