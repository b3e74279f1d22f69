-- Provenance (semantics.md, "Rules that hold whatever the sources"): beside `source`, the value
-- the backfill wrote with it. Where `last_read_id` differs from it, the application moved the
-- watermark, and the report says `application`; NULL for a row the backfill never wrote.
ALTER TABLE {{ wm }} ADD COLUMN backfilled_id BIGINT NULL
