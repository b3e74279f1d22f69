{#- contract: the objects that may depend on the counter column (params: schema or NULL for
    the current one, table, column). One row per candidate: kind (text: view, trigger, index,
    foreign key, function, procedure), name (text), blocks (BIGINT 1: DROP COLUMN fails
    because of it, or leaves it broken: a view, a trigger or a routine that uses the column, a
    foreign key on it; 0: it goes with the column, an index; 2: a routine whose body cannot be
    read), definition (text: the view's, trigger's or routine's SQL, which the caller scans
    for the table and the column, since MySQL/MariaDB record no column dependencies; NULL:
    the catalog's answer is exact). Only objects over the mapped database's table count
    (issue 25, row 16): a view whose definition names it qualified by its database, as
    MySQL/MariaDB store every view's definition (`db`.`table`), wherever the view is; a
    trigger of the mapped database, or of another one whose statement names the mapped
    database. A table of the same name in another database of the server, and what depends
    on it there, are not this mapping's. A stored function or procedure (issue 29 row 1) as a
    trigger is, its body (`information_schema.ROUTINES`) the definition; one of the mapped
    database whose body the session may not read (ROUTINE_DEFINITION NULL: not its definer,
    no SHOW CREATE ROUTINE) is a row of its own with blocks 2 and no definition, a note: the
    caller cannot tell whether it uses the column. -#}
WITH tm_p AS (SELECT COALESCE(?, DATABASE()) AS s, ? AS t, ? AS c)
SELECT CONVERT('view' USING utf8mb4) AS kind,
       CONVERT(CONCAT(v.TABLE_SCHEMA, '.', v.TABLE_NAME) USING utf8mb4) AS name,
       CAST(1 AS SIGNED) AS blocks,
       CONVERT(v.VIEW_DEFINITION USING utf8mb4) AS definition
FROM information_schema.VIEWS v JOIN tm_p
WHERE v.VIEW_DEFINITION LIKE CONCAT('%', tm_p.c, '%')
  AND v.VIEW_DEFINITION LIKE CONCAT('%`', tm_p.s, '`.`', tm_p.t, '`%')
UNION ALL
SELECT CONVERT('trigger' USING utf8mb4),
       CONVERT(CONCAT(g.TRIGGER_SCHEMA, '.', g.TRIGGER_NAME) USING utf8mb4),
       CAST(1 AS SIGNED),
       CONVERT(CONCAT('ON `', g.EVENT_OBJECT_TABLE, '` ', g.ACTION_STATEMENT) USING utf8mb4)
FROM information_schema.TRIGGERS g JOIN tm_p
WHERE g.ACTION_STATEMENT LIKE CONCAT('%', tm_p.c, '%')
  AND (g.TRIGGER_SCHEMA = tm_p.s OR g.ACTION_STATEMENT LIKE CONCAT('%', tm_p.s, '%'))
UNION ALL
SELECT CONVERT(LOWER(r.ROUTINE_TYPE) USING utf8mb4),
       CONVERT(CONCAT(r.ROUTINE_SCHEMA, '.', r.ROUTINE_NAME) USING utf8mb4),
       CAST(1 AS SIGNED),
       CONVERT(r.ROUTINE_DEFINITION USING utf8mb4)
FROM information_schema.ROUTINES r JOIN tm_p
WHERE r.ROUTINE_DEFINITION LIKE CONCAT('%', tm_p.c, '%')
  AND (r.ROUTINE_SCHEMA = tm_p.s OR r.ROUTINE_DEFINITION LIKE CONCAT('%', tm_p.s, '%'))
UNION ALL
SELECT CONVERT(LOWER(r.ROUTINE_TYPE) USING utf8mb4),
       CONVERT(CONCAT(r.ROUTINE_SCHEMA, '.', r.ROUTINE_NAME, ' (this session may not read its body)') USING utf8mb4),
       CAST(2 AS SIGNED),
       CONVERT(NULL USING utf8mb4)
FROM information_schema.ROUTINES r JOIN tm_p
WHERE r.ROUTINE_DEFINITION IS NULL AND r.ROUTINE_SCHEMA = tm_p.s
UNION ALL
SELECT CONVERT('index' USING utf8mb4),
       CONVERT(CONCAT(x.INDEX_NAME, ' on ', x.TABLE_SCHEMA, '.', x.TABLE_NAME) USING utf8mb4),
       CAST(0 AS SIGNED),
       CONVERT(NULL USING utf8mb4)
FROM information_schema.STATISTICS x JOIN tm_p
WHERE x.TABLE_SCHEMA = tm_p.s AND x.TABLE_NAME = tm_p.t AND x.COLUMN_NAME = tm_p.c
  AND x.INDEX_NAME <> 'PRIMARY'
UNION ALL
SELECT CONVERT('foreign key' USING utf8mb4),
       CONVERT(CONCAT(f.CONSTRAINT_NAME, ' on ', f.TABLE_SCHEMA, '.', f.TABLE_NAME) USING utf8mb4),
       CAST(1 AS SIGNED),
       CONVERT(NULL USING utf8mb4)
FROM information_schema.KEY_COLUMN_USAGE f JOIN tm_p
WHERE f.REFERENCED_TABLE_NAME IS NOT NULL
  AND ((f.TABLE_SCHEMA = tm_p.s AND f.TABLE_NAME = tm_p.t AND f.COLUMN_NAME = tm_p.c)
    OR (f.REFERENCED_TABLE_SCHEMA = tm_p.s AND f.REFERENCED_TABLE_NAME = tm_p.t
        AND f.REFERENCED_COLUMN_NAME = tm_p.c))
ORDER BY 3 DESC, 1, 2
