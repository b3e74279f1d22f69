{#- One backfill batch, first statement (issue 11): the plan (backfill_plan.sql) into a
    temporary table. SQLite has no data-modifying CTE, and INSERT … RETURNING returns rows, not
    aggregates: the next best is this table, then one INSERT … SELECT from it
    (upsert_watermarks.sql) and one aggregate read of it (backfill_tally.sql), inside one
    BEGIN IMMEDIATE transaction (the only writer), so the counts are those of what was
    written. -#}
CREATE TEMP TABLE tm_plan AS
{% include "backfill_plan.sql" %}
