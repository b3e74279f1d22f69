-- tidemark's ledger: one row per stage run (backfill, audit, contract), with the mapping's
-- fingerprint, options and summary (JSON text), pass/fail, the report's SHA-256 and, for
-- resumable runs, the checkpoint after the last finished batch (JSON text).
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
  report_sha256 TEXT NULL,
  checkpoint TEXT NULL
);
CREATE INDEX IF NOT EXISTS tidemark_ledger_stage ON tidemark_ledger (stage, id);

-- One runner at a time on SQLite (PostgreSQL and MySQL/MariaDB use advisory locks): the row
-- names the holder; a holder whose process is gone or whose heartbeat is older than a minute
-- is taken over.
CREATE TABLE IF NOT EXISTS tidemark_lock (
  name TEXT PRIMARY KEY,
  pid INTEGER NOT NULL,
  host TEXT NOT NULL,
  started_ms INTEGER NOT NULL,
  heartbeat_ms INTEGER NOT NULL
);
