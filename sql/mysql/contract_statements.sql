{#- contract: statement digests of this schema in performance_schema whose text mentions the
    counter column (param: a LIKE pattern); tidemark filters them further by identifier. -#}
SELECT CONVERT(DIGEST_TEXT USING utf8mb4) AS query, CAST(COUNT_STAR AS SIGNED) AS calls
FROM performance_schema.events_statements_summary_by_digest
WHERE (SCHEMA_NAME = DATABASE() OR SCHEMA_NAME IS NULL)
  AND DIGEST_TEXT LIKE ?
ORDER BY COUNT_STAR DESC
LIMIT 1000
