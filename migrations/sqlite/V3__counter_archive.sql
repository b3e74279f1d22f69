-- The values the contract stage drops, kept before any DDL runs: one row per counter row
-- (per member: conversation + user; per message: conversation + message id), the value, the
-- contract run that archived it (tidemark_ledger.id) and the audit that covered it.
CREATE TABLE IF NOT EXISTS tidemark_counter_archive (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  contract_id INTEGER NOT NULL,
  audit_id INTEGER NULL,
  counter_table TEXT NOT NULL,
  counter_column TEXT NOT NULL,
  conversation_id {{ conv_type }} NOT NULL,
  user_id {{ user_type }} NULL,
  message_id INTEGER NULL,
  counter_value INTEGER NULL,
  archived_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS tidemark_counter_archive_run ON tidemark_counter_archive (contract_id, conversation_id);
