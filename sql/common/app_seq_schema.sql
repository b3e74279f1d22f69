{#- Optional expand for the per-conversation sequence (seed 000 §4). Statements separated by
    `;` lines, in this order:
    1. the messages' `seq` column;
    2. its fill for the existing rows, set-based: seq = id, which keeps id order within each
       conversation and keeps every existing watermark (a position in id order) meaning the
       same messages, so no watermark needs translating;
    3. a table of one row per conversation holding the last sequence number allocated, started
       at the conversation's highest message id, so new numbers stay above every existing
       watermark and every filled seq;
    4. its unique index (one row per conversation);
    5. a unique index on the messages' (conversation, seq): the `(conversation, position)`
       index the audit and the unread counts need once seq is mapped as the position, and a
       guard against two messages with one number. -#}
ALTER TABLE {{ msg.table }} ADD COLUMN seq BIGINT NULL
;
UPDATE {{ msg.table }} SET seq = {{ msg.id }} WHERE seq IS NULL
;
CREATE TABLE {{ seq_table }} AS
SELECT {{ msg.conv }} AS conversation_id, MAX({{ msg.id }}) AS last_seq
FROM {{ msg.table }}
GROUP BY {{ msg.conv }}
;
CREATE UNIQUE INDEX {{ seq_index }} ON {{ seq_table }} (conversation_id)
;
CREATE UNIQUE INDEX {{ seq_msg_index }} ON {{ msg.table }} ({{ msg.conv }}, seq)
