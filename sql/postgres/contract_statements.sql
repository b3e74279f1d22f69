{#- contract: statements of this database in pg_stat_statements whose text mentions the counter
    column (param: a LIKE pattern); tidemark filters them further by identifier. -#}
SELECT CAST(s.query AS TEXT) AS query, CAST(s.calls AS BIGINT) AS calls
FROM pg_stat_statements s
WHERE s.dbid = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
  AND s.query ILIKE $1
ORDER BY s.calls DESC
LIMIT 1000
