{#- The declared type of a column (params: the quoted table name, the column name). -#}
SELECT format_type(a.atttypid, a.atttypmod) AS column_type
FROM pg_attribute a
WHERE a.attrelid = to_regclass($1) AND a.attname = $2 AND NOT a.attisdropped
