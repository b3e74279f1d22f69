{#- The messages' positions that are no position (issue 29 row 4; semantics.md "Terms",
    position): positions are > 0, since a watermark of 0 means "nothing read", so a message at
    position 0 or below could never be unread (0 covers it) and one below every watermark would
    be read by everyone. One row: `lo`, the smallest such position (NULL when there is none),
    and `n`, how many messages have one. Every row of the messages table counts, countable or
    not. Cost: one pass over the messages table (its position index where it leads one), once
    per stage, before anything is written (src/schema/positions.rs). -#}
SELECT CAST(MIN(this.{{ msg.id }}) AS {{ int }}) AS lo, CAST(COUNT(*) AS {{ int }}) AS n
FROM {{ msg.table }} this
WHERE this.{{ msg.id }} <= 0
