{#- contract: counter rows that one contract run's archive does not hold with the same keys and
    the same value (param: the contract run id). 0 when the archive is complete. -#}
SELECT COUNT(*) AS missing FROM {{ ctr.table }}
WHERE NOT EXISTS (
  SELECT 1 FROM tidemark_counter_archive
  WHERE tidemark_counter_archive.contract_id = {{ param }}
    AND tidemark_counter_archive.conversation_id = {{ ctr.table }}.{{ key_conv }}
    AND tidemark_counter_archive.{{ subject_col }} = {{ ctr.table }}.{{ key_subject }}
    AND (tidemark_counter_archive.counter_value = {{ ctr.table }}.{{ ctr.column }}
         OR (tidemark_counter_archive.counter_value IS NULL AND {{ ctr.table }}.{{ ctr.column }} IS NULL)))
