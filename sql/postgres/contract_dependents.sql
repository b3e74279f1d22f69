{#- contract: the objects that depend on the counter column (params: the quoted table, the
    column name), from pg_depend. One row per object: kind (text: view, materialized view,
    rule, index, foreign key, constraint, trigger, sequence, object), name (text, schema-
    qualified where it has a schema), blocks (BIGINT 1 when DROP COLUMN fails because of it:
    a normal dependency, as a view, a rule, another table's foreign key, a trigger naming the
    column; 0 when it goes with the column: an index, a constraint of the table itself),
    definition (text, NULL: the catalog's answer is exact). -#}
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
         WHEN d.classid = 'pg_constraint'::regclass THEN k.conname || ' on ' || CAST(CAST(k.conrelid AS regclass) AS TEXT)
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
WHERE a.attrelid = to_regclass($1) AND CAST(a.attname AS TEXT) = $2 AND a.attnum > 0 AND NOT a.attisdropped
  AND d.deptype IN ('n', 'a')
  AND d.classid <> 'pg_attrdef'::regclass
ORDER BY 3 DESC, 1, 2
