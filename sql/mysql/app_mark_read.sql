{#- The application's mark-read, forward-only (seed 000 §3): GREATEST keeps the higher of the
    stored and the reported position, so a late or repeated request never moves a watermark
    back. MySQL applies the assignments left to right: updated_at first. VALUES(col), not a
    row alias: MariaDB has none. Binds: user, conversation, message. -#}
INSERT INTO {{ wm }} (user_id, conversation_id, last_read_id, source)
VALUES ({{ bind.user }}, {{ bind.conv }}, {{ bind.message }}, 'app')
ON DUPLICATE KEY UPDATE
  updated_at = IF(VALUES(last_read_id) > last_read_id, CURRENT_TIMESTAMP(3), updated_at),
  last_read_id = GREATEST(last_read_id, VALUES(last_read_id))
