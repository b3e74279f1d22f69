{#- contract: the objects that depend on the counter column (params: the quoted table, the
    column name), from pg_depend, for the table and every partition or child table under it
    (pg_inherits, walked down: a view over a partition's counter breaks the drop too, issue 29
    row 8), and the functions and procedures whose source names the column (issue 29 row 1:
    PL/pgSQL and SQL bodies are not tracked by pg_depend). One row per object: kind (text:
    view, materialized view, rule, index, foreign key, constraint, trigger, sequence, object,
    function, procedure), name (text, schema-qualified where it has a schema; a function with
    its argument types, and ` (language c)` when its body cannot be read), blocks
    (BIGINT 1 when DROP COLUMN fails because of it, or leaves it broken: a normal dependency,
    as a view, a rule, another table's foreign key, a trigger naming the column, a function
    whose source names the column, and with it the table or one of its partitions or child
    tables, or a trigger on one of them calls it; 0 when it goes with the column: an index,
    a constraint of the table itself; 2 when its body cannot be read: a function in C or `internal` outside the
    system schemas and not part of an extension, a note), definition (text, NULL: the
    catalog's answer is exact). -#}
WITH RECURSIVE tm_rel(oid) AS (
  SELECT to_regclass($1)
  UNION
  SELECT i.inhrelid FROM pg_inherits i JOIN tm_rel ON i.inhparent = tm_rel.oid
),
tm_word AS (
  -- The column's name as a whole word of a source text (any case).
  SELECT '(^|[^[:alnum:]_$])' || regexp_replace($2, '([^[:alnum:]_])', '\\\1', 'g')
           || '($|[^[:alnum:]_$])' AS col
),
tm_tab AS (
  -- The names of the table and of each partition or child table, as whole words.
  SELECT '(^|[^[:alnum:]_$])' || regexp_replace(c.relname, '([^[:alnum:]_])', '\\\1', 'g')
           || '($|[^[:alnum:]_$])' AS tab
  FROM pg_class c JOIN tm_rel ON c.oid = tm_rel.oid
)
SELECT CAST(CASE
         WHEN d.classid = 'pg_rewrite'::regclass THEN
           CASE v.relkind WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view' ELSE 'rule' END
         WHEN d.classid = 'pg_class'::regclass THEN
           CASE o.relkind WHEN 'i' THEN 'index' WHEN 'I' THEN 'index' WHEN 'S' THEN 'sequence' ELSE 'relation' END
         WHEN d.classid = 'pg_constraint'::regclass THEN
           CASE k.contype WHEN 'f' THEN 'foreign key' ELSE 'constraint' END
         WHEN d.classid = 'pg_trigger'::regclass THEN 'trigger'
         ELSE 'object' END AS TEXT) AS kind,
       CAST(CASE
         WHEN d.classid = 'pg_rewrite'::regclass THEN vn.nspname || '.' || v.relname
         WHEN d.classid = 'pg_class'::regclass THEN oname.nspname || '.' || o.relname
         WHEN d.classid = 'pg_constraint'::regclass
              THEN k.conname || ' on ' || CAST(CAST(k.conrelid AS regclass) AS TEXT)
         WHEN d.classid = 'pg_trigger'::regclass THEN t.tgname || ' on ' || CAST(CAST(t.tgrelid AS regclass) AS TEXT)
         ELSE pg_describe_object(d.classid, d.objid, d.objsubid) END AS TEXT) AS name,
       CAST(CASE WHEN d.deptype = 'n' THEN 1 ELSE 0 END AS BIGINT) AS blocks,
       CAST(NULL AS TEXT) AS definition
FROM pg_attribute a
JOIN pg_depend d
  ON d.refclassid = 'pg_class'::regclass AND d.refobjid = a.attrelid AND d.refobjsubid = a.attnum
LEFT JOIN pg_rewrite r ON d.classid = 'pg_rewrite'::regclass AND r.oid = d.objid
LEFT JOIN pg_class v ON v.oid = r.ev_class
LEFT JOIN pg_namespace vn ON vn.oid = v.relnamespace
LEFT JOIN pg_class o ON d.classid = 'pg_class'::regclass AND o.oid = d.objid
LEFT JOIN pg_namespace oname ON oname.oid = o.relnamespace
LEFT JOIN pg_constraint k ON d.classid = 'pg_constraint'::regclass AND k.oid = d.objid
LEFT JOIN pg_trigger t ON d.classid = 'pg_trigger'::regclass AND t.oid = d.objid
WHERE a.attrelid IN (SELECT oid FROM tm_rel) AND CAST(a.attname AS TEXT) = $2 AND a.attnum > 0
  AND NOT a.attisdropped
  AND d.deptype IN ('n', 'a')
  AND d.classid <> 'pg_attrdef'::regclass
UNION ALL
SELECT CAST(CASE WHEN p.prokind = 'p' THEN 'procedure' ELSE 'function' END AS TEXT),
       CAST(pn.nspname || '.' || p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')'
            || CASE WHEN l.lanname IN ('c', 'internal') THEN ' (language ' || l.lanname || ')' ELSE '' END
            AS TEXT),
       CAST(CASE WHEN l.lanname IN ('c', 'internal') THEN 2 ELSE 1 END AS BIGINT),
       CAST(NULL AS TEXT)
FROM pg_proc p
JOIN pg_namespace pn ON pn.oid = p.pronamespace
JOIN pg_language l ON l.oid = p.prolang
CROSS JOIN tm_word w
WHERE pn.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
  AND pn.nspname NOT LIKE 'pg\_temp\_%' AND pn.nspname NOT LIKE 'pg\_toast\_temp\_%'
  AND NOT EXISTS (SELECT 1 FROM pg_depend e
                  WHERE e.classid = 'pg_proc'::regclass AND e.objid = p.oid AND e.deptype = 'e')
  AND (l.lanname IN ('c', 'internal')
       OR (p.prosrc ~* w.col
           AND (EXISTS (SELECT 1 FROM tm_tab WHERE p.prosrc ~* tm_tab.tab)
                OR EXISTS (SELECT 1 FROM pg_trigger g
                           WHERE g.tgfoid = p.oid AND g.tgrelid IN (SELECT oid FROM tm_rel)))))
ORDER BY 3 DESC, 1, 2
