{#- contract: copies one batch of counter values into the archive. Params, in order: the
    contract run id, the audit id that covered the values, the counter table, the counter
    column, archived_ms, then the batch range. A column of a table keyed by the conversation
    alone (a `[contract]` target on the `[conversations]` table) has no `key_subject`: its
    subject is NULL, one archive row per conversation. -#}
{% import "macros.sql" as m %}
INSERT INTO tidemark_counter_archive
  (contract_id, audit_id, counter_table, counter_column, conversation_id, {{ subject_col }}, counter_value, archived_ms)
SELECT CAST({{ p[0] }} AS {{ int }}), CAST({{ p[1] }} AS {{ int }}), {{ p[2] }}, {{ p[3] }},
       {{ key_conv }}, {% if key_subject %}{{ key_subject }}{% else %}NULL{% endif %}, {{ ctr.column }},
       CAST({{ p[4] }} AS {{ int }})
FROM {{ ctr.table }}
WHERE 1 = 1{{ m.range(key_conv, range, ctr.conv_k) }}
