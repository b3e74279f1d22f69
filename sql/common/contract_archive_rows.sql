{#- contract: one page of a contract run's archive, for the CSV copy (params: the contract run
    id, the last archive row id read). -#}
SELECT id, conversation_id, {{ subject_col }}, counter_value, audit_id
FROM tidemark_counter_archive
WHERE contract_id = {{ p[0] }} AND id > {{ p[1] }}
ORDER BY id
LIMIT {{ limit }}
