{#- The application's mark-read, forward-only (seed 000 §3): GREATEST keeps the higher of the
    stored and the reported position, so a late or repeated request never moves a watermark
    back. Binds: user, conversation, message (the position read up to, or the id of the
    message the user just sent). -#}
INSERT INTO {{ wm }} (user_id, conversation_id, last_read_id, source)
VALUES ({{ bind.user }}, {{ bind.conv }}, {{ bind.message }}, 'app')
ON CONFLICT (user_id, conversation_id) DO UPDATE
SET last_read_id = GREATEST({{ wm }}.last_read_id, EXCLUDED.last_read_id),
    updated_at = CASE WHEN EXCLUDED.last_read_id > {{ wm }}.last_read_id THEN now() ELSE {{ wm }}.updated_at END
