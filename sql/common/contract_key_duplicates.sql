{#- contract: the archive keys each value by the row's conversation and subject (user or
    message id; the conversation alone for a `[conversations]` column). The keys of the target
    table that name more than one row (e.g. one summary row per thread of a member): how many,
    and the first. Their values could be archived but not put back row by row, so the contract
    refuses them. One row: n, then the first key (conv, subj; NULL when n = 0). Keys are equal
    when their bytes are (macros.sql `out`, issue 25). -#}
{% import "macros.sql" as m %}
{% set c = m.out(key_conv, ctr.conv_k) %}
SELECT COUNT(*) AS n, MIN(tm_d.c) AS conv
FROM (SELECT {{ c }} AS c
      FROM {{ ctr.table }}
      GROUP BY {{ c }}{% if key_subject %}, {{ m.out(key_subject, ctr.user_k) }}{% endif %}
      HAVING COUNT(*) > 1) tm_d
