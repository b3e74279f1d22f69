{#- Rows an audit batch checks (the members' counters as counter_rows gives them, or the messages for per_message). -#}
{% import "macros.sql" as m %}
{% if shape_is.per_message %}
SELECT COUNT(*) AS n FROM {{ msg.table }} tm_r WHERE 1 = 1{{ m.range("tm_r." ~ msg.conv, range, msg.conv_k) }}
{% else %}
SELECT COUNT(*) AS n FROM ({{ m.counter_rows(ctr, int, m.range("this." ~ ctr.conv, range, ctr.conv_k)) }}) tm_r
{% endif %}
