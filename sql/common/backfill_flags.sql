{#- The backfill plan's last layer when the mapping lists read_flags evidence (issue 22,
    semantics.md "Shape C"): the plan's rows (tm_pl, backfill_plan.sql) with what the member's
    read flags say beside the watermark the member holds once this batch is written
    (W = the higher of the existing watermark and the value written; none: not counted),
    from t = max(W, join position) as the audit counts:
      oo_read   : flag rows saying read, on countable messages of others after t: messages
                  read out of order, unread under the watermark;
      oo_unread : flag rows saying unread at or before t: the watermark marks them read
                  (none when the watermark came from the flags themselves).
    The flag rows are those of the first read_flags evidence (its table, filter and `read`),
    joined by message (and, with `conversation`, issue 29 row 11, by conversation) to the
    batch's messages (the messages' conversation range), the
    messages row `this` for `countable` as everywhere; one grouped pass, joined by member. -#}
{% import "macros.sql" as m %}
{% import "evidence_macros.sql" as evf %}
{# The first read_flags entry of the mapping, if any. #}
{% set ns = namespace(e=none) %}
{% for f in evidence %}{% if f.is.read_flags and ns.e is none %}{% set ns.e = f %}{% endif %}{% endfor %}
{% if ns.e is not none %}
{% set e = ns.e %}
SELECT tm_q.conv AS conv, tm_q.usr AS usr, tm_q.ex AS ex, tm_q.act AS act, tm_q.v AS v,
       tm_q.src AS src, tm_q.kept AS kept, tm_q.held AS held, tm_q.unrep AS unrep, tm_q.nopos AS nopos,
       tm_q.notime AS notime,
       CAST(COALESCE(tm_o.rd, 0) AS {{ int }}) AS oo_read,
       CAST(COALESCE(tm_o.ur, 0) AS {{ int }}) AS oo_unread
FROM tm_pl tm_q
LEFT JOIN (SELECT tm_z.conv AS conv, tm_z.usr AS usr,
                  SUM(CASE WHEN tm_fl.rd = 1 AND tm_mm.pos > tm_z.t AND tm_mm.c = 1
                            AND (tm_mm.sender IS NULL OR tm_mm.sender <> tm_z.usr) THEN 1 ELSE 0 END) AS rd,
                  SUM(CASE WHEN tm_fl.rd = 0 AND tm_mm.pos <= tm_z.t THEN 1 ELSE 0 END) AS ur
           FROM (SELECT tm_y.conv AS conv, tm_y.usr AS usr,
                        CASE WHEN tm_j.join_pos IS NOT NULL AND tm_j.join_pos > tm_y.w THEN tm_j.join_pos
                             ELSE tm_y.w END AS t
                 FROM (SELECT tm_w.conv AS conv, tm_w.usr AS usr,
                              CASE WHEN tm_w.v IS NULL THEN tm_w.ex
                                   WHEN tm_w.ex IS NULL OR tm_w.v > tm_w.ex THEN tm_w.v
                                   ELSE tm_w.ex END AS w
                       FROM tm_pl tm_w) tm_y
                 JOIN tm_subj tm_j ON tm_j.conv = tm_y.conv AND tm_j.usr = tm_y.usr
                 WHERE tm_y.w IS NOT NULL) tm_z
           JOIN (SELECT {{ m.out("this." ~ msg.conv, msg.conv_k) }} AS conv,
                        CAST(this.{{ msg.id }} AS {{ int }}) AS pos,
                        {{ m.out("this." ~ msg.sender, msg.sender_k) }} AS sender,
                        CASE WHEN {{ m.pred(msg.countable) }} THEN 1 ELSE 0 END AS c
                 FROM {{ m.own(msg.table, msg.joins, msg.conv, msg.sender) }}
                 WHERE 1 = 1{{ m.range("this." ~ msg.conv, range, msg.conv_k) }}) tm_mm
             ON tm_mm.conv = tm_z.conv
           JOIN (SELECT {{ m.out("this." ~ e.user, e.user_k) }} AS usr, CAST(this.{{ e.column }} AS {{ int }}) AS msg,
                        {%- if e.conv %} {{ m.out("this." ~ e.conv, msg.conv_k) }} AS conv,{% endif %}
                        CASE WHEN ({{ e.read }}) THEN 1 ELSE 0 END AS rd
                 {{ evf.from(e) }}
                 WHERE 1 = 1{{ evf.filter(e) }}) tm_fl
             ON tm_fl.msg = tm_mm.pos AND tm_fl.usr = tm_z.usr{% if e.conv %} AND tm_fl.conv = tm_mm.conv{% endif %}
           GROUP BY tm_z.conv, tm_z.usr) tm_o
       ON tm_o.conv = tm_q.conv AND tm_o.usr = tm_q.usr
{% endif %}
