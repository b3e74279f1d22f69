{#- The sequence row of a new conversation (seed 000 §4), inserted with the conversation.
    Binds: conv. -#}
INSERT INTO {{ seq_table }} (conversation_id, last_seq) VALUES ({{ bind.conv }}, 0)
