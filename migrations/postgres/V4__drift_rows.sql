-- Drifting rows kept by `audit --store-rows`, per audit run (tidemark_ledger.id), so DBAs can
-- query them with SQL and `status` can say what is new since the previous run and what was fixed.
CREATE TABLE IF NOT EXISTS tidemark_drift_rows (
  run_id BIGINT NOT NULL,
  conversation_id TEXT NOT NULL,
  subject TEXT NOT NULL,
  stored BIGINT NULL,
  recomputed BIGINT NOT NULL,
  drift BIGINT NULL,
  class VARCHAR(32) NOT NULL
);
CREATE INDEX IF NOT EXISTS tidemark_drift_rows_run ON tidemark_drift_rows (run_id, conversation_id, subject);
