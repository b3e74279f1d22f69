{#- One backfill batch, first statement (issue 11): the plan (backfill_plan.sql) into a
    temporary table, in one consistent read. MySQL and MariaDB have no data-modifying CTE, and
    an INSERT … SELECT cannot return aggregates, so one statement cannot both write and report:
    the next best is this table, then one INSERT … SELECT from it (upsert_watermarks.sql) and
    one aggregate read of it (backfill_tally.sql), in the same transaction, so the counts are
    those of what was written. The transaction runs at READ COMMITTED (the dialect's
    backfill_write_begin_sql): InnoDB then reads the source tables of CREATE … SELECT as a
    consistent snapshot without locks, where REPEATABLE READ would take shared next-key locks
    on every message, counter and receipt the batch reads and block the application's inserts
    until the commit. -#}
CREATE TEMPORARY TABLE tm_plan AS
{% include "backfill_plan.sql" %}
