-- The archive's rows found by their keys (issue 25 row 7): the contract compares a column with
-- its archive row by row (sql/common/contract_missing.sql: an anti-join on the run, the
-- conversation and the user or message), once the archive is written and again inside the
-- drop's lock. V3's index stopped at the conversation, so each row was compared with every
-- archived row of its conversation: quadratic in the largest conversation (minutes on a table
-- of 200 000 rows whose largest conversation has 4 600 members). This one replaces it; its
-- first columns serve what V3's did.
DROP INDEX IF EXISTS tidemark_counter_archive_run;
CREATE INDEX IF NOT EXISTS tidemark_counter_archive_row ON tidemark_counter_archive (contract_id, conversation_id, user_id, message_id);
