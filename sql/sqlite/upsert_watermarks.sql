{#- Forward-only write of one batch of watermarks (semantics.md; seed 000 §3): SQLite's
    two-argument MAX keeps the higher of the stored and the new value. One atomic statement
    (seed 004). -#}
INSERT INTO {{ wm }} (user_id, conversation_id, last_read_id, source)
VALUES
{% for i in range(rows) %}
  (?, ?, ?, ?){{ "," if not loop.last }}
{% endfor %}
ON CONFLICT (user_id, conversation_id) DO UPDATE
SET updated_at = CASE WHEN excluded.last_read_id > last_read_id THEN CURRENT_TIMESTAMP ELSE updated_at END,
    last_read_id = MAX(last_read_id, excluded.last_read_id),
    source = excluded.source
