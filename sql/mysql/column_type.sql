{#- The declared type of a column (params: schema or NULL for the current one, table, column),
    with its character set and collation for character columns: a watermark key must compare
    as the legacy key does (ascii_bin keys must not merge case-insensitively). -#}
SELECT CAST(CONCAT(COLUMN_TYPE,
                   CASE WHEN COLLATION_NAME IS NULL THEN ''
                        ELSE CONCAT(' CHARACTER SET ', CHARACTER_SET_NAME, ' COLLATE ', COLLATION_NAME) END)
            AS CHAR(512)) AS column_type
FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? AND COLUMN_NAME = ?
