{#- Forward-only write of one batch's plan (the temporary table tm_plan, as `source`) in one
    INSERT … SELECT … ON DUPLICATE KEY UPDATE (semantics.md; seed 000 §3): GREATEST keeps the
    higher of the stored and the new value (seed 004). MySQL reports 0 affected rows for a row
    it leaves unchanged: tidemark counts from the plan (backfill_tally.sql), not from affected
    rows (seed 004 §5.2). VALUES(col) rather than an alias: MariaDB has no `AS new` row alias.
    MySQL applies the assignments left to right, so updated_at is set before last_read_id
    changes. The provenance is the evidence's (scenario S3b). -#}
INSERT INTO {{ wm }} (user_id, conversation_id, last_read_id, source)
SELECT tm_p.usr, tm_p.conv, tm_p.v, tm_p.src
FROM {{ source }} tm_p
WHERE tm_p.v IS NOT NULL
ON DUPLICATE KEY UPDATE
  updated_at = IF(VALUES(last_read_id) > last_read_id, CURRENT_TIMESTAMP(3), updated_at),
  last_read_id = GREATEST(last_read_id, VALUES(last_read_id)),
  source = VALUES(source)
