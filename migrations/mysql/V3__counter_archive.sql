-- The values the contract stage drops, kept before any DDL runs: one row per counter row
-- (per member: conversation + user; per message: conversation + message id), the value, the
-- contract run that archived it (tidemark_ledger.id) and the audit that covered it.
CREATE TABLE IF NOT EXISTS tidemark_counter_archive (
  id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  contract_id BIGINT NOT NULL,
  audit_id BIGINT NULL,
  counter_table VARCHAR(255) NOT NULL,
  counter_column VARCHAR(255) NOT NULL,
  conversation_id {{ conv_type }} NOT NULL,
  user_id {{ user_type }} NULL,
  message_id BIGINT NULL,
  counter_value BIGINT NULL,
  archived_ms BIGINT NOT NULL,
  KEY tidemark_counter_archive_run (contract_id, conversation_id)
) ENGINE=InnoDB;
