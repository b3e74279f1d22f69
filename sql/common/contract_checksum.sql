{#- contract: the checksum of the counter values: rows, non-NULL values, their sum and their
    sum of squares (exact decimals, as text). side "source": the counter column as it stands;
    side "archive": the rows one contract run archived (param: the contract run id). No table
    aliases: under MySQL's LOCK TABLES a statement may use none. The dialect supplies
    exact_type (the exact decimal type of the sums; none: summed as they are) and text_type.
    archive_of: [table, column] as SQL string literals, for a run that archives several
    columns (a `[contract]` section): only that column's archive rows. -#}
{% macro exact(v) %}
  {% if exact_type %}CAST({{ v }} AS {{ exact_type }}){% else %}{{ v }}{% endif %}
{% endmacro %}
{% set v = "counter_value" if side == "archive" else ctr.column %}
SELECT COUNT(*) AS n, COUNT({{ v }}) AS non_null,
       CAST(COALESCE(SUM({{ exact(v) }}), 0) AS {{ text_type }}) AS total,
       CAST(COALESCE(SUM({{ exact(v) }} * {{ exact(v) }}), 0) AS {{ text_type }}) AS squares
{% if side == "archive" %}
FROM tidemark_counter_archive WHERE contract_id = {{ param }}
{%- if archive_of is defined and archive_of %}
 AND counter_table = {{ archive_of[0] }} AND counter_column = {{ archive_of[1] }}
{%- endif %}
{% else %}
FROM {{ ctr.table }}
{% endif %}
