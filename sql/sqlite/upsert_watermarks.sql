{#- The forward-only watermark write, the one spelling on SQLite of what the backfill, the
    application (`tidemark sql app`, the demo) and the tests write (semantics.md; seed 000 §3):
    SQLite's two-argument MAX keeps the higher of the stored and the new value, in one statement
    (no read-modify-write: seed 004). The backfill (`from_plan` true, `source`: its plan
    table) also writes the provenance: which evidence (`source`) and the value it wrote
    (`backfilled_id`); both change only with the value (semantics.md: a write that does not
    advance a watermark changes nothing). The application (`from_plan` false, `bind`: user,
    conversation, message) writes the three columns it owns. The WHERE clause keeps SQLite's
    parser from reading ON CONFLICT as a join constraint. -#}
{% set new = "excluded.last_read_id > last_read_id" %}
{% import "macros.sql" as m %}
{{ m.watermark_rows(wm, from_plan, source if source is defined else none, bind if bind is defined else none) }}
ON CONFLICT (user_id, conversation_id) DO UPDATE
SET updated_at = CASE WHEN {{ new }} THEN excluded.updated_at ELSE updated_at END,
{% if from_plan %}
    source = CASE WHEN {{ new }} THEN excluded.source ELSE source END,
    backfilled_id = CASE WHEN {{ new }} THEN excluded.backfilled_id ELSE backfilled_id END,
{% endif %}
    last_read_id = MAX(last_read_id, excluded.last_read_id)
