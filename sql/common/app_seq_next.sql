{#- Allocates the next position of a conversation under its row lock (seed 000 §4): the UPDATE
    locks the conversation's row until the transaction commits, so a second sender waits, and
    a smaller number always commits first; the SELECT reads the number this transaction took.
    Statements separated by `;` lines. Binds: conv (each statement). -#}
UPDATE {{ seq_table }} SET last_seq = last_seq + 1 WHERE conversation_id = {{ bind.conv }}
;
SELECT last_seq FROM {{ seq_table }} WHERE conversation_id = {{ bind.conv }}
