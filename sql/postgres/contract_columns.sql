{#- contract: the columns of a table, in order (param: the quoted table name). -#}
SELECT CAST(a.attname AS TEXT) AS name
FROM pg_attribute a
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
