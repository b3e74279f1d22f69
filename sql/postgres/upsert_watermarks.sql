{#- Forward-only write of one batch of watermarks (semantics.md; seed 000 §3): an existing
    watermark is never moved back, GREATEST keeps the higher of the stored and the new value.
    One atomic statement, no read-modify-write (seed 004). Columns per row: user, conversation,
    last_read_id, source. -#}
INSERT INTO {{ wm }} (user_id, conversation_id, last_read_id, source)
VALUES
{% for i in range(rows) %}
  (${{ 4*i+1 }}, ${{ 4*i+2 }}, ${{ 4*i+3 }}, ${{ 4*i+4 }}){{ "," if not loop.last }}
{% endfor %}
ON CONFLICT (user_id, conversation_id) DO UPDATE
SET updated_at = CASE WHEN EXCLUDED.last_read_id > {{ wm }}.last_read_id THEN now() ELSE {{ wm }}.updated_at END,
    last_read_id = GREATEST({{ wm }}.last_read_id, EXCLUDED.last_read_id),
    source = EXCLUDED.source
