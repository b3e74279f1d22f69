{#- contract: the objects that may depend on the counter column (params: schema (unused), table,
    column; the schema's objects are read from the main schema's sqlite_master, as SQLite
    keeps views and triggers there). One row per candidate: kind (text: view, trigger, index,
    foreign key), name (text), blocks (BIGINT 1: the drop fails or leaves it broken: a view
    or trigger that uses the column, another table's foreign key on it; 0: an index of the
    table, which the plan drops first), definition (text: the object's SQL, which the caller
    scans for the table and the column; NULL: the catalog's answer is exact). -#}
SELECT m.type AS kind, m.name AS name,
       CAST(CASE m.type WHEN 'index' THEN 0 ELSE 1 END AS BIGINT) AS blocks,
       m.sql AS definition
FROM sqlite_master m
WHERE m.type IN ('view', 'trigger', 'index') AND m.sql IS NOT NULL
  AND (m.type <> 'index' OR m.tbl_name = ?2 COLLATE NOCASE)
  AND m.sql LIKE '%' || ?3 || '%'
UNION ALL
SELECT 'foreign key', m.name || ' (' || f."from" || ')', 1, NULL
FROM sqlite_master m, pragma_foreign_key_list(m.name) f
WHERE m.type = 'table' AND m.name <> ?2 COLLATE NOCASE
  AND f."table" = ?2 COLLATE NOCASE AND f."to" = ?3 COLLATE NOCASE
ORDER BY 3 DESC, 1, 2
