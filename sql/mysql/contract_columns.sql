{#- contract: the columns of a table, in order (params: schema or NULL for the current one,
    table). -#}
SELECT CONVERT(COLUMN_NAME USING utf8mb4) AS name
FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?
ORDER BY ORDINAL_POSITION
