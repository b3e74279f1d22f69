{#- Forward-only write of one batch of watermarks (semantics.md; seed 000 §3): GREATEST keeps
    the higher of the stored and the new value. One atomic statement (seed 004). MySQL reports
    0 affected rows for a row it leaves unchanged: tidemark counts written / advanced /
    unchanged from the snapshot it read, not from affected rows (seed 004 §5.2). VALUES(col)
    rather than an alias: MariaDB has no `AS new` row alias. MySQL applies the assignments
    left to right, so updated_at is set before last_read_id changes. -#}
INSERT INTO {{ wm }} (user_id, conversation_id, last_read_id, source)
VALUES
{% for i in range(rows) %}
  (?, ?, ?, ?){{ "," if not loop.last }}
{% endfor %}
ON DUPLICATE KEY UPDATE
  updated_at = IF(VALUES(last_read_id) > last_read_id, CURRENT_TIMESTAMP(3), updated_at),
  last_read_id = GREATEST(last_read_id, VALUES(last_read_id)),
  source = VALUES(source)
