{#- What one backfill batch did, as aggregates of its plan (backfill_plan.sql), never its rows:
    `source` is the plan, as the temporary table tm_plan or a parenthesised statement.
    written: new watermarks; advanced: existing ones moved forward; unchanged: existing ones
    already at or past the evidence (the forward-only write leaves them); n_<kind>: the rows
    with a value per provenance (every kind, 0 for one the mapping does not list); kept: existing watermarks whose only evidence was the counter;
    held / held_conversations: members and conversations left for a later run by the settle
    time; left: members who left without position or timestamp evidence; none: active members
    without evidence; unrep: counters no watermark can represent; nopos: members whose position
    evidence held only values below 0 (no position: the next source applied); no_time: members whose
    timestamp evidence held only values that are no time (a zero date, a text that does not
    parse: issue 29 rows 3 and 5). With read_flags evidence
    (backfill_flags.sql): n_read_flags, oo_members (members whose flags disagree with their
    watermark), oo_read (messages read out of order, unread now) and oo_unread (messages
    flagged unread that the watermark marks read). Every count is a BIGINT. -#}
{% set has_flags = evidence | selectattr("kind", "equalto", "read_flags") | list | length > 0 %}
SELECT CAST(COUNT(*) AS {{ int }}) AS members,
       CAST(COALESCE(SUM(CASE WHEN tm_p.v IS NOT NULL AND tm_p.ex IS NULL THEN 1 ELSE 0 END), 0) AS {{ int }}) AS written,
       CAST(COALESCE(SUM(CASE WHEN tm_p.v IS NOT NULL AND tm_p.v > tm_p.ex THEN 1 ELSE 0 END), 0) AS {{ int }}) AS advanced,
       CAST(COALESCE(SUM(CASE WHEN tm_p.v IS NOT NULL AND tm_p.v <= tm_p.ex THEN 1 ELSE 0 END), 0) AS {{ int }}) AS unchanged,
{% for kind in ["position", "timestamp", "counter", "own_message"] %}
       CAST(COALESCE(SUM(CASE WHEN tm_p.v IS NOT NULL AND tm_p.src = '{{ kind }}' THEN 1 ELSE 0 END), 0) AS {{ int }}) AS n_{{ kind }},
{% endfor %}
{% if has_flags %}
       CAST(COALESCE(SUM(CASE WHEN tm_p.v IS NOT NULL AND tm_p.src = 'read_flags' THEN 1 ELSE 0 END), 0) AS {{ int }}) AS n_read_flags,
       CAST(COALESCE(SUM(CASE WHEN tm_p.oo_read > 0 OR tm_p.oo_unread > 0 THEN 1 ELSE 0 END), 0) AS {{ int }}) AS oo_members,
       CAST(COALESCE(SUM(tm_p.oo_read), 0) AS {{ int }}) AS oo_read,
       CAST(COALESCE(SUM(tm_p.oo_unread), 0) AS {{ int }}) AS oo_unread,
{% endif %}
       CAST(COALESCE(SUM(tm_p.kept), 0) AS {{ int }}) AS kept,
       CAST(COALESCE(SUM(CASE WHEN tm_p.v IS NULL AND tm_p.kept = 0 AND tm_p.held = 1 THEN 1 ELSE 0 END), 0) AS {{ int }}) AS held,
       CAST(COUNT(DISTINCT CASE WHEN tm_p.v IS NULL AND tm_p.kept = 0 AND tm_p.held = 1 THEN tm_p.conv END) AS {{ int }}) AS held_conversations,
       CAST(COALESCE(SUM(CASE WHEN tm_p.v IS NULL AND tm_p.kept = 0 AND tm_p.held = 0 AND tm_p.act = 0 THEN 1 ELSE 0 END), 0) AS {{ int }}) AS left_none,
       CAST(COALESCE(SUM(CASE WHEN tm_p.v IS NULL AND tm_p.kept = 0 AND tm_p.held = 0 AND tm_p.act <> 0 THEN 1 ELSE 0 END), 0) AS {{ int }}) AS no_evidence,
       CAST(COALESCE(SUM(tm_p.unrep), 0) AS {{ int }}) AS unrep,
       CAST(COALESCE(SUM(tm_p.nopos), 0) AS {{ int }}) AS nopos,
       CAST(COALESCE(SUM(tm_p.notime), 0) AS {{ int }}) AS no_time
FROM {{ source }} tm_p
