{#- Issue 29 row 11 (semantics.md "Shape C"): read flags that name their message by its
    position alone (no `conversation` on the read_flags counter or evidence) need that position
    unique across the messages table, else a flag row would belong to every conversation that
    has a message at that position. One row: `shared` (how many positions are found in more
    than one conversation) and, when there are any, the smallest of them (`pos`) and how many
    conversations have it (`convs`). The dialect supplies nothing beyond the context. -#}
SELECT CAST(COUNT(*) AS {{ int }}) AS shared, CAST(MIN(tm_d.pos) AS {{ int }}) AS pos,
       CAST(MAX(tm_d.convs) AS {{ int }}) AS convs
FROM (SELECT this.{{ msg.id }} AS pos, COUNT(DISTINCT this.{{ msg.conv }}) AS convs
      FROM {{ msg.table }} this
      GROUP BY this.{{ msg.id }}
      HAVING COUNT(DISTINCT this.{{ msg.conv }}) > 1) tm_d
