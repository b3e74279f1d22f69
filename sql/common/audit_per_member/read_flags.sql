{#- audit_per_member.sql, shape read_flags (semantics.md "Shape C"): per drifting row, from its
    threshold t, `rd` (flag rows saying read on countable messages of others after t) and `ur`
    (flag rows saying unread at or before t), joined to the report's rows as tm_o. The flags
    are read by `range_fl` (by their messages' conversation), the messages by `range_fm`. -#}
LEFT JOIN (SELECT tm_z.conv AS conv, tm_z.usr AS usr,
                  SUM(CASE WHEN tm_fl.unread = 0 AND tm_fl.pos > tm_z.t AND tm_mm.c = 1
                            AND (tm_mm.sender IS NULL OR tm_mm.sender <> tm_z.usr) THEN 1 ELSE 0 END) AS rd,
                  SUM(CASE WHEN tm_fl.unread = 1 AND tm_fl.pos <= tm_z.t THEN 1 ELSE 0 END) AS ur
           {# The drifting rows' thresholds, as in tm_t. #}
           FROM (SELECT tm_d.conv AS conv, tm_d.usr AS usr,
                        CASE WHEN tm_d.join_pos IS NOT NULL AND tm_d.join_pos > COALESCE(tm_d.last_read_id, 0)
                             THEN tm_d.join_pos ELSE COALESCE(tm_d.last_read_id, 0) END AS t
                 FROM tm_d) tm_z
           {# Their flag rows: position and unread (1 or 0). #}
           JOIN (SELECT {{ m.out("this." ~ ctr.conv, ctr.conv_k) }} AS conv,
                        {{ m.out("this." ~ ctr.user, ctr.user_k) }} AS usr,
                        this.{{ ctr.pos }} AS pos, this.{{ ctr.unread }} AS unread
                 FROM {{ ctr.table }} this
                 WHERE 1 = 1{{ m.range("this." ~ ctr.conv, range_fl, ctr.conv_k) }}) tm_fl
             ON tm_fl.conv = tm_z.conv AND tm_fl.usr = tm_z.usr
           {# The flagged messages: sender and countable. #}
           LEFT JOIN (SELECT {{ m.out("this." ~ msg.conv, msg.conv_k) }} AS conv,
                             CAST(this.{{ msg.id }} AS {{ int }}) AS pos,
                             {{ m.out("this." ~ msg.sender, msg.sender_k) }} AS sender,
                             CASE WHEN {{ m.pred(msg.countable) }} THEN 1 ELSE 0 END AS c
                      FROM {{ m.own(msg.table, msg.joins, msg.conv, msg.sender) }}
                      WHERE 1 = 1{{ m.range("this." ~ msg.conv, range_fm, msg.conv_k) }}) tm_mm
             ON tm_mm.conv = tm_fl.conv AND tm_mm.pos = tm_fl.pos
           GROUP BY tm_z.conv, tm_z.usr) tm_o
       ON tm_o.conv = tm_r.conv AND tm_o.usr = tm_r.sender
