{#- contract: counter rows that one contract run's archive does not hold with the same keys and
    the same value (param: the contract run id). 0 when the archive is complete. archive_of and
    a missing key_subject as in contract_checksum.sql / contract_archive.sql. The archive's keys
    have the watermark table's key types (`expand`), compared as macros.sql `eq` says. -#}
{% import "macros.sql" as m %}
SELECT COUNT(*) AS missing FROM {{ ctr.table }}
WHERE NOT EXISTS (
  SELECT 1 FROM tidemark_counter_archive
  WHERE tidemark_counter_archive.contract_id = {{ param }}
    AND {{ m.eq("tidemark_counter_archive.conversation_id", wm_conv_k, ctr.table ~ "." ~ key_conv) }}
{% if archive_of is defined and archive_of %}
    AND tidemark_counter_archive.counter_table = {{ archive_of[0] }}
    AND tidemark_counter_archive.counter_column = {{ archive_of[1] }}
{% endif %}
{% if key_subject %}
    AND {{ m.eq("tidemark_counter_archive." ~ subject_col, wm_user_k if subject_col == "user_id" else ctr.user_k, ctr.table ~ "." ~ key_subject) }}
{% else %}
    AND tidemark_counter_archive.{{ subject_col }} IS NULL
{% endif %}
    AND (tidemark_counter_archive.counter_value = {{ ctr.table }}.{{ ctr.column }}
         OR (tidemark_counter_archive.counter_value IS NULL AND {{ ctr.table }}.{{ ctr.column }} IS NULL)))
