{#- Forward-only write of one batch's plan (the temporary table tm_plan, as `source`) in one
    INSERT … SELECT (semantics.md; seed 000 §3): SQLite's two-argument MAX keeps the higher of
    the stored and the new value (seed 004). The WHERE clause also keeps SQLite's parser from
    reading ON CONFLICT as a join constraint. The provenance is the evidence's (scenario S3b). -#}
INSERT INTO {{ wm }} (user_id, conversation_id, last_read_id, source)
SELECT tm_p.usr, tm_p.conv, tm_p.v, tm_p.src
FROM {{ source }} tm_p
WHERE tm_p.v IS NOT NULL
ON CONFLICT (user_id, conversation_id) DO UPDATE
SET updated_at = CASE WHEN excluded.last_read_id > last_read_id THEN CURRENT_TIMESTAMP ELSE updated_at END,
    last_read_id = MAX(last_read_id, excluded.last_read_id),
    source = excluded.source
