-- tidemark's ledger: one row per stage run (backfill, audit, contract), with the mapping's
-- fingerprint, options and summary (JSON text), pass/fail, the report's SHA-256 and, for
-- resumable runs, the checkpoint after the last finished batch (JSON text).
CREATE TABLE IF NOT EXISTS tidemark_ledger (
  id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  stage VARCHAR(16) NOT NULL,
  status VARCHAR(16) NOT NULL,
  started_ms BIGINT NOT NULL,
  finished_ms BIGINT NULL,
  mapping_fingerprint VARCHAR(64) NOT NULL,
  tool_version VARCHAR(32) NOT NULL,
  options TEXT NOT NULL,
  summary MEDIUMTEXT NULL,
  passed SMALLINT NULL,
  report_path TEXT NULL,
  report_sha256 VARCHAR(64) NULL,
  checkpoint MEDIUMTEXT NULL,
  KEY tidemark_ledger_stage (stage, id)
) ENGINE=InnoDB;
