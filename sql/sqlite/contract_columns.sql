{#- contract: the columns of a table, in order (params: schema, table). -#}
SELECT name FROM pragma_table_xinfo(?2, ?1) ORDER BY cid
