{#- The declared type of a column (params: schema or NULL for the current one, table, column). -#}
SELECT CAST(COLUMN_TYPE AS CHAR) AS column_type
FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? AND COLUMN_NAME = ?
