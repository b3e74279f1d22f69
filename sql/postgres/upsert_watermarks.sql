{#- Forward-only write of one batch's plan (backfill_plan.sql, as `source`) in one INSERT …
    SELECT (semantics.md; seed 000 §3): an existing watermark is never moved back, GREATEST
    keeps the higher of the stored and the new value; no read-modify-write (seed 004). The
    provenance is the evidence's, also when the stored value already equals it (scenario S3b:
    a position that equals the application's watermark is recorded as `position`). -#}
INSERT INTO {{ wm }} (user_id, conversation_id, last_read_id, source)
SELECT tm_p.usr, tm_p.conv, tm_p.v, tm_p.src
FROM {{ source }} tm_p
WHERE tm_p.v IS NOT NULL
ON CONFLICT (user_id, conversation_id) DO UPDATE
SET updated_at = CASE WHEN EXCLUDED.last_read_id > {{ wm }}.last_read_id THEN now() ELSE {{ wm }}.updated_at END,
    last_read_id = GREATEST({{ wm }}.last_read_id, EXCLUDED.last_read_id),
    source = EXCLUDED.source
