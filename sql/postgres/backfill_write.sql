{#- One backfill batch in one statement (issue 11): the plan (backfill_plan.sql) is computed once
    in the statement's snapshot, a data-modifying CTE writes its rows forward-only
    (upsert_watermarks.sql), and the statement returns only the tally of the same plan
    (backfill_tally.sql): the counts are those of what was written. PostgreSQL runs a
    data-modifying CTE to completion even though the main query does not read it. Run at READ
    COMMITTED: one statement sees one snapshot, and ON CONFLICT then updates a row that an
    application wrote meanwhile instead of failing with a serialization error. -#}
WITH tm_plan AS MATERIALIZED (
{% include "backfill_plan.sql" %}
),
tm_write AS (
{% with source = "tm_plan", from_plan = true %}{% include "postgres/upsert_watermarks.sql" %}{% endwith %}
)
{% with source = "tm_plan" %}{% include "backfill_tally.sql" %}{% endwith %}
