{#- The forward-only watermark write, the one spelling on MySQL/MariaDB of what the backfill,
    the application (`tidemark sql app`, the demo) and the tests write (semantics.md; seed 000
    §3): GREATEST keeps the higher of the stored and the new value, in one statement (no read-
    modify-write: seed 004). MySQL reports 0 affected rows for a row it leaves unchanged: the
    backfill counts from its plan (backfill_tally.sql), not from affected rows (seed 004 §5.2).
    VALUES(col) rather than a row alias: MariaDB has none (MySQL 8.0.20+ deprecates VALUES() in
    favour of the alias but still accepts it). MySQL applies the assignments left to right, so
    everything that compares with the old last_read_id comes before it changes. The backfill
    (`from_plan` true, `source`: its plan table) also writes the provenance: which evidence
    (`source`) and the value it wrote (`backfilled_id`); both change only with the value
    (semantics.md: a write that does not advance a watermark changes nothing). The application
    (`from_plan` false, `bind`: user, conversation, message) writes the three columns it
    owns. -#}
{% set new = "VALUES(last_read_id) > last_read_id" %}
{% import "macros.sql" as m %}
{{ m.watermark_rows(wm, from_plan, source if source is defined else none, bind if bind is defined else none) }}
ON DUPLICATE KEY UPDATE
  updated_at = IF({{ new }}, CURRENT_TIMESTAMP(3), updated_at),
{% if from_plan %}
  source = IF({{ new }}, VALUES(source), source),
  backfilled_id = IF({{ new }}, VALUES(backfilled_id), backfilled_id),
{% endif %}
  last_read_id = GREATEST(last_read_id, VALUES(last_read_id))
