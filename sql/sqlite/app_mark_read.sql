{#- The application's mark-read, forward-only (seed 000 §3): SQLite's two-argument MAX keeps
    the higher of the stored and the reported position, so a late or repeated request never
    moves a watermark back. Binds: user, conversation, message. -#}
INSERT INTO {{ wm }} (user_id, conversation_id, last_read_id, source)
VALUES ({{ bind.user }}, {{ bind.conv }}, {{ bind.message }}, 'app')
ON CONFLICT (user_id, conversation_id) DO UPDATE
SET updated_at = CASE WHEN excluded.last_read_id > last_read_id THEN CURRENT_TIMESTAMP ELSE updated_at END,
    last_read_id = MAX(last_read_id, excluded.last_read_id)
