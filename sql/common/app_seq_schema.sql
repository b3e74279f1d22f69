{#- Optional expand for the per-conversation sequence (seed 000 §4): a table of one row per
    conversation holding the last sequence number allocated, started at the conversation's
    highest message id so that new positions stay above every existing watermark. Statements
    separated by `;` lines. -#}
CREATE TABLE {{ seq_table }} AS
SELECT {{ msg.conv }} AS conversation_id, MAX({{ msg.id }}) AS last_seq
FROM {{ msg.table }}
GROUP BY {{ msg.conv }}
;
CREATE UNIQUE INDEX {{ seq_index }} ON {{ seq_table }} (conversation_id)
;
ALTER TABLE {{ msg.table }} ADD COLUMN seq BIGINT NULL
