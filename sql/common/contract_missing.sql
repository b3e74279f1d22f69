{#- contract: counter rows that one contract run's archive does not hold with the same keys and
    the same value (param: the contract run id); 0 when every value of the column is in the
    archive. Run once the archive is written and again inside the drop's lock, where a value
    changed since the archive (even two values swapped, which keeps every sum) stops the drop.
    An anti-join written as LEFT JOIN … IS NULL rather than NOT EXISTS: the same rows (a
    source row with no archive row of the same keys and value joins one row whose archive
    columns are NULL; one with any joins none such), and Citus can run it between a
    distributed and a local table, which a correlated NOT EXISTS cannot (issue 21). The NULL
    tested is conversation_id (NOT NULL in the archive, matched by `=`), which PostgreSQL
    reads as an anti-join (`id IS NULL` made it an outer join, twice as slow). Every key is
    an equality the archive's index (contract_id, conversation_id, user_id, message_id:
    migration V6) answers, so each row costs one index lookup (the archive holds NULL in the
    subject column it does not use). No table aliases: inside MySQL's LOCK TABLES a statement
    may use none and reads only the tables locked (the table and the archive). archive_of and
    a missing key_subject as in contract_checksum.sql / contract_archive.sql. The archive's keys
    have the watermark table's key types (`expand`), compared as macros.sql `eq` says (byte for
    byte where the key columns' collations differ, issue 25). -#}
{% import "macros.sql" as m %}
SELECT COUNT(*) AS missing
FROM {{ ctr.table }}
LEFT JOIN tidemark_counter_archive
  ON tidemark_counter_archive.contract_id = {{ param }}
 AND {{ m.eq("tidemark_counter_archive.conversation_id", wm_conv_k, ctr.table ~ "." ~ key_conv) }}
{% if not key_subject %}
 AND tidemark_counter_archive.user_id IS NULL
 AND tidemark_counter_archive.message_id IS NULL
{% elif subject_col == "message_id" %}
 AND tidemark_counter_archive.user_id IS NULL
 AND tidemark_counter_archive.message_id = {{ ctr.table }}.{{ key_subject }}
{% else %}
 AND {{ m.eq("tidemark_counter_archive.user_id", wm_user_k, ctr.table ~ "." ~ key_subject) }}
{% endif %}
{% if archive_of is defined and archive_of %}
 AND tidemark_counter_archive.counter_table = {{ archive_of[0] }}
 AND tidemark_counter_archive.counter_column = {{ archive_of[1] }}
{% endif %}
 AND (tidemark_counter_archive.counter_value = {{ ctr.table }}.{{ ctr.column }}
      OR (tidemark_counter_archive.counter_value IS NULL AND {{ ctr.table }}.{{ ctr.column }} IS NULL))
WHERE tidemark_counter_archive.conversation_id IS NULL
