{#- The forward-only watermark write, the one spelling on PostgreSQL of what the backfill, the
    application (`tidemark sql app`, the demo) and the tests write (semantics.md; seed 000 §3):
    an existing watermark is never moved back, GREATEST keeps the higher of the stored and the
    new value, in one statement (no read-modify-write: seed 004). The backfill (`from_plan`
    true, `source`: its plan, backfill_plan.sql) also writes the provenance: which
    evidence (`source`) and the value it wrote (`backfilled_id`); both change only with the
    value (semantics.md: a write that does not advance a watermark changes nothing). The
    application (`from_plan` false, `bind`: user, conversation, message) writes the three
    columns it owns. `updated_at` is the insert's default (EXCLUDED), not now(): a function in
    DO UPDATE SET must be IMMUTABLE on a distributed (Citus) table. The plan's keys are written
    as the watermark table's keys take a value (`wm_user_k.val`: a uuid key, passed on as text,
    cast back to `uuid`, issue 29 row 14). -#}
{% set new = "EXCLUDED.last_read_id > " ~ wm ~ ".last_read_id" %}
{% import "macros.sql" as m %}
{{ m.watermark_rows(wm, from_plan, source if source is defined else none, bind if bind is defined else none,
                    usr=wm_user_k.val | replace("{v}", "tm_p.usr"), conv=wm_conv_k.val | replace("{v}", "tm_p.conv")) }}
ON CONFLICT (user_id, conversation_id) DO UPDATE
SET updated_at = CASE WHEN {{ new }} THEN EXCLUDED.updated_at ELSE {{ wm }}.updated_at END,
{% if from_plan %}
    source = CASE WHEN {{ new }} THEN EXCLUDED.source ELSE {{ wm }}.source END,
    backfilled_id = CASE WHEN {{ new }} THEN EXCLUDED.backfilled_id ELSE {{ wm }}.backfilled_id END,
{% endif %}
    last_read_id = GREATEST({{ wm }}.last_read_id, EXCLUDED.last_read_id)
