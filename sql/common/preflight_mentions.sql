{#- The preflight's zero-row query of a mention counter's mentions table (issue 22): its
    message and user columns, joined to the messages on the messages column they match, as
    the audit joins them (mention_macros.sql `stream`); the messages alone for another
    counter (never run: the preflight checks mention counters only). With a mention predicate
    (issue 29 row 16): the readers and their user row joined to the messages under it. -#}
{% import "mention_macros.sql" as mm %}
{% if ctr.mentions and ctr.mentions.predicate %}
SELECT tm_mn.usr FROM {{ msg.table }} this {{ mm.readers(ctr.mentions, msg) }}
WHERE ({{ ctr.mentions.predicate }}) AND 1 = 0
{% elif ctr.mentions %}
SELECT tm_m0.{{ ctr.mentions.message }}, tm_m0.{{ ctr.mentions.user }}
FROM {{ ctr.mentions.table }} tm_m0
JOIN {{ msg.table }} this ON this.{{ ctr.mentions.key }} = tm_m0.{{ ctr.mentions.message }}
WHERE 1 = 0
{% else %}
SELECT this.{{ msg.id }} FROM {{ msg.table }} this WHERE 1 = 0
{% endif %}
