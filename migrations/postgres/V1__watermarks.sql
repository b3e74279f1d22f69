-- The read watermark table (interface.md): the application reads and writes these three
-- columns directly; `source` and `updated_at` are tidemark's bookkeeping (provenance).
CREATE TABLE IF NOT EXISTS {{ wm }} (
  user_id {{ user_type }} NOT NULL,
  conversation_id {{ conv_type }} NOT NULL,
  last_read_id BIGINT NOT NULL DEFAULT 0,
  source VARCHAR(16) NULL,
  updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY (user_id, conversation_id)
);
CREATE INDEX IF NOT EXISTS {{ wm_index }} ON {{ wm }} (conversation_id, user_id);
