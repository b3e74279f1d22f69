{#- Rows an audit batch checks (the counter rows, or the messages for per_message). -#}
{% import "macros.sql" as m %}
{% if shape == "per_message" %}
SELECT COUNT(*) AS n FROM {{ msg.table }} WHERE 1 = 1{{ m.range(msg.conv, range) }}
{% else %}
SELECT COUNT(*) AS n FROM {{ ctr.table }} WHERE 1 = 1{{ m.range(ctr.conv, range) }}
{% endif %}
