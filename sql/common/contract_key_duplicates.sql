{#- contract: the archive keys each value by the row's conversation and subject (user or
    message id; the conversation alone for a `[conversations]` column). The keys of the target
    table that name more than one row (e.g. one summary row per thread of a member): how many,
    and the first. Their values could be archived but not put back row by row, so the contract
    refuses them. One row: n, then the first key (conv, subj; NULL when n = 0). -#}
SELECT COUNT(*) AS n, MIN(tm_d.c) AS conv
FROM (SELECT {{ key_conv }} AS c
      FROM {{ ctr.table }}
      GROUP BY {{ key_conv }}{% if key_subject %}, {{ key_subject }}{% endif %}
      HAVING COUNT(*) > 1) tm_d
