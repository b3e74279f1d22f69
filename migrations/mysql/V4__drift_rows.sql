-- Drifting rows kept by `audit --store-rows`, per audit run (tidemark_ledger.id), so DBAs can
-- query them with SQL and `status` can say what is new since the previous run and what was fixed.
CREATE TABLE IF NOT EXISTS tidemark_drift_rows (
  run_id BIGINT NOT NULL,
  conversation_id VARCHAR(255) NOT NULL,
  subject VARCHAR(255) NOT NULL,
  stored BIGINT NULL,
  recomputed BIGINT NOT NULL,
  drift BIGINT NULL,
  class VARCHAR(32) NOT NULL,
  KEY tidemark_drift_rows_run (run_id, conversation_id, subject)
) ENGINE=InnoDB;
