{#- contract: the checksum of the counter values: rows, non-NULL values, their sum and their
    sum of squares (exact decimals, as text). side "source": the counter column as it stands;
    side "archive": the rows one contract run archived (param: the contract run id). No table
    aliases: under MySQL's LOCK TABLES a statement may use none. -#}
{% macro exact(v, dialect) %}{% if dialect == "postgres" %}CAST({{ v }} AS NUMERIC){% elif dialect == "mysql" %}CAST({{ v }} AS DECIMAL(65,0)){% else %}{{ v }}{% endif %}{% endmacro %}
{% set text = "CHAR" if dialect == "mysql" else "TEXT" %}
{% set v = "counter_value" if side == "archive" else ctr.column %}
SELECT COUNT(*) AS n, COUNT({{ v }}) AS non_null,
       CAST(COALESCE(SUM({{ exact(v, dialect) }}), 0) AS {{ text }}) AS total,
       CAST(COALESCE(SUM({{ exact(v, dialect) }} * {{ exact(v, dialect) }}), 0) AS {{ text }}) AS squares
{% if side == "archive" %}
FROM tidemark_counter_archive WHERE contract_id = {{ param }}
{% else %}
FROM {{ ctr.table }}
{% endif %}
