{#- The declared type of a column (params: schema or NULL for the current one, table, column). -#}
SELECT CONVERT(COLUMN_TYPE USING utf8mb4) AS column_type
FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? AND COLUMN_NAME = ?
