{#- The declared type of a column (params: schema, table, column). -#}
SELECT type AS column_type FROM pragma_table_info(?2, ?1) WHERE name = ?3
