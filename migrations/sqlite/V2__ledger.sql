-- tidemark's ledger: one row per stage run (backfill, audit, contract), with the mapping's
-- fingerprint, options and summary (JSON text), pass/fail and the report's SHA-256.
CREATE TABLE IF NOT EXISTS tidemark_ledger (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  stage TEXT NOT NULL,
  status TEXT NOT NULL,
  started_ms INTEGER NOT NULL,
  finished_ms INTEGER NULL,
  mapping_fingerprint TEXT NOT NULL,
  tool_version TEXT NOT NULL,
  options TEXT NOT NULL,
  summary TEXT NULL,
  passed INTEGER NULL,
  report_path TEXT NULL,
  report_sha256 TEXT NULL
);
CREATE INDEX IF NOT EXISTS tidemark_ledger_stage ON tidemark_ledger (stage, id);
