{#- What one backfill batch did, as aggregates of its plan (backfill_plan.sql), never its rows:
    `source` is the plan, as the temporary table tm_plan or a parenthesised statement.
    written: new watermarks; advanced: existing ones moved forward; unchanged: existing ones
    already at or past the evidence (the forward-only write leaves them); n_<kind>: the rows
    with a value per provenance (every kind, 0 for one the mapping does not list); kept:
    existing watermarks whose only evidence was the counter;
    held / held_conversations: members and conversations left for a later run by the settle
    time; left: members who left without position or timestamp evidence; none: active members
    without evidence; unrep: counters no watermark can represent; nopos: members whose
    position evidence held only values below 0 (no position: the next source applied);
    no_time: members whose timestamp evidence held only values that are no time (a zero date,
    a text that does not parse: issue 29 rows 3 and 5). With read_flags evidence
    (backfill_flags.sql): n_read_flags, oo_members (members whose flags disagree with their
    watermark), oo_read (messages read out of order, unread now) and oo_unread (messages
    flagged unread that the watermark marks read). Every count is a BIGINT. -#}
{#- The number of plan rows where `cond` holds, as a BIGINT named `name`. -#}
{% macro rows(cond, name) %}
CAST(COALESCE(SUM(CASE WHEN {{ cond }} THEN 1 ELSE 0 END), 0) AS {{ int }}) AS {{ name }}
{%- endmacro %}
{#- The sum of the plan's column `col`, as a BIGINT named `name`. -#}
{% macro total(col, name) %}CAST(COALESCE(SUM(tm_p.{{ col }}), 0) AS {{ int }}) AS {{ name }}{% endmacro %}
{% set unwritten = "tm_p.v IS NULL AND tm_p.kept = 0" %}
SELECT CAST(COUNT(*) AS {{ int }}) AS members,
       {{ rows("tm_p.v IS NOT NULL AND tm_p.ex IS NULL", "written") }},
       {{ rows("tm_p.v IS NOT NULL AND tm_p.v > tm_p.ex", "advanced") }},
       {{ rows("tm_p.v IS NOT NULL AND tm_p.v <= tm_p.ex", "unchanged") }},
{# One count per provenance a backfill records, listed or not. #}
{% for kind in ["position", "timestamp", "counter", "own_message"] %}
       {{ rows("tm_p.v IS NOT NULL AND tm_p.src = '" ~ kind ~ "'", "n_" ~ kind) }},
{% endfor %}
{% if kinds.read_flags %}
       {{ rows("tm_p.v IS NOT NULL AND tm_p.src = 'read_flags'", "n_read_flags") }},
       {{ rows("tm_p.oo_read > 0 OR tm_p.oo_unread > 0", "oo_members") }},
       {{ total("oo_read", "oo_read") }},
       {{ total("oo_unread", "oo_unread") }},
{% endif %}
       {{ total("kept", "kept") }},
       {{ rows(unwritten ~ " AND tm_p.held = 1", "held") }},
       CAST(COUNT(DISTINCT CASE WHEN {{ unwritten }} AND tm_p.held = 1 THEN tm_p.conv END) AS {{ int }})
           AS held_conversations,
       {{ rows(unwritten ~ " AND tm_p.held = 0 AND tm_p.act = 0", "left_none") }},
       {{ rows(unwritten ~ " AND tm_p.held = 0 AND tm_p.act <> 0", "no_evidence") }},
       {{ total("unrep", "unrep") }},
       {{ total("nopos", "nopos") }},
       {{ total("notime", "no_time") }}
FROM {{ source }} tm_p
