{#- Shared fragments for the stage SQL. Every argument is passed in: imported macros do not see
    the caller's variables. -#}

{#- A batch's conversations over the key column `col` (qualified with its table's alias: the
    sample and quiescence predicates hold subqueries of their own), compared as `k` says (a
    KeyCompare of the SqlContext: every pattern `{v}` unless the key columns' collations
    differ, issue 25). Either the batch's keys, `r.keys` (placeholders: the batch is a list of
    keys when the collations differ), looked up by equality (`k.col`, `k.val`), or its range:
    lo exclusive, hi inclusive, then the run's scope: from and to inclusive (bind
    placeholders, in that order) over the column in order (`k.order`), the deterministic
    sample and the quiescence filter (--min-age). -#}
{% macro range(col, r, k) %}
  {% if r.keys is not none %}
    {# The batch's keys: an equality list (none: no row). #}
    {% if r.keys %} AND {{ k.col | replace("{v}", col) }} IN (
      {%- for p in r.keys %}{{ k.val | replace("{v}", p) }}{% if not loop.last %}, {% endif %}{% endfor %})
    {%- else %} AND 1 = 0{% endif %}
  {% else %}
    {# The batch's range, then the run's scope, sample and quiescence. #}
    {% set c = k.order | replace("{v}", col) %}
    {% if r.lo %} AND {{ c }} > {{ r.lo }}{% endif %}
    {% if r.hi %} AND {{ c }} <= {{ r.hi }}{% endif %}
    {% if r.from %} AND {{ c }} >= {{ r.from }}{% endif %}
    {% if r.to %} AND {{ c }} <= {{ r.to }}{% endif %}
    {% if r.sample %} AND {{ r.sample | replace("{col}", col) }}{% endif %}
    {% if r.quiet %} AND {{ r.quiet | replace("{col}", col) }}{% endif %}
  {% endif %}
{% endmacro %}

{#- Issue 25, "Mixed key collations": keys are equal when their bytes are equal, as the
    watermark table's primary key tells members apart. `k` is a KeyCompare of the SqlContext
    (msg.conv_k, mem.user_k, wm_conv_k…): SQL patterns over `{v}`, each `{v}` itself unless
    the mapping's key columns' collations differ. `out`: a key a derived table passes on
    (SELECT list, GROUP BY), in the engine's byte-wise collation, so that joins, window
    partitions and ORDER BY agree between tables. `eq`: the key column `c` equal to the value
    `v`, compared bytewise in a form that keeps the column's index where the engine allows it.
    `ord`: the key column in the order a batch's keys are found in; `in_order`: a key passed
    on (`out`) back in that order, for the report's ORDER BY (the rows then come in the order
    of the table whose keys the batches list, batch after batch). -#}
{% macro out(x, k) %}{{ k.out | replace("{v}", x) }}{% endmacro %}
{% macro eq(c, k, v) %}{{ k.col | replace("{v}", c) }} = {{ k.val | replace("{v}", v) }}{% endmacro %}
{% macro ord(x, k) %}{{ k.order | replace("{v}", x) }}{% endmacro %}
{% macro in_order(x, k) %}{{ k.val | replace("{v}", x) }}{% endmacro %}

{#- A value clamped to cap+1 (seed 000 §5: "99+"); unchanged without a cap. -#}
{% macro clamp(x, cap) %}
  {% if cap is not none %}CASE WHEN {{ x }} > {{ cap + 1 }} THEN {{ cap + 1 }} ELSE {{ x }} END
  {%- else %}{{ x }}{% endif %}
{% endmacro %}

{#- A predicate of the mapping, or TRUE when none is given. -#}
{% macro pred(p) %}{% if p %}({{ p }}){% else %}1 = 1{% endif %}{% endmacro %}

{#- The own row of a predicate or expression, aliased `this`, with the rows its text reads
    (issue 12, "Predicates that can see their row"): `j` is a Joins of the SqlContext
    (msg.joins, mem.joins, ctr.joins), whose `conv` / `usr` are set only when the text uses
    that name; `conv_col` / `user_col` are the own row's conversation and user key columns
    (quoted). `[conversations]` / `[users]` keys are unique, so the joins add no rows. -#}
{% macro own(t, j, conv_col, user_col) %}{{ t }} this
  {%- if j.conv %} LEFT JOIN {{ j.conv.table }} conv ON {{ eq("conv." ~ j.conv.key, j.conv.key_k, "this." ~ conv_col) }}
  {%- endif %}
  {% if j.usr %} LEFT JOIN {{ j.usr.table }} usr ON {{ eq("usr." ~ j.usr.key, j.usr.key_k, "this." ~ user_col) }}
  {%- endif %}
{% endmacro %}

{#- The stored counter, one row per member, as (conv, usr, stored): `[counter] value` over the
    counter row `this` (or its column), the rows `[counter] rows` keeps, summed per member
    under `combine = "sum"`. `cond` is appended to the WHERE clause (" AND …" over `this.`:
    a batch range, or a correlation with the caller's member). Every statement that reads
    the stored value reads it through this macro (audit, backfill's counter evidence and
    rank, the duplicate-row check). The keys are passed on as `out` gives them; `order`
    (the batch bounds) passes the conversation on in its order instead. -#}
{% macro counter_rows(ctr, int, cond, order=false) %}
{% set cv = ord("this." ~ ctr.conv, ctr.conv_k) if order else out("this." ~ ctr.conv, ctr.conv_k) %}
{% set uv = out("this." ~ ctr.user, ctr.user_k) %}
SELECT {{ cv }} AS conv, {{ uv }} AS usr, {% if ctr.sum %}CAST(SUM({{ ctr.value }}) AS {{ int }})
  {%- else %}CAST({{ ctr.value }} AS {{ int }}){% endif %} AS stored
        FROM {{ own(ctr.table, ctr.joins, ctr.conv, ctr.user) }}
        WHERE {{ pred(ctr.rows) }}{{ cond }}{% if ctr.sum %}
        GROUP BY {{ cv }}, {{ uv }}{% endif %}{% endmacro %}

{#- One member's stored counter as a scalar subquery, correlated with the caller's `conv` and
    `usr` expressions: the same value as counter_rows gives (SUM under combine = "sum"; else
    the row's value, MAX if the mapping holds more than one row for the member, which the
    stages refuse before they run). -#}
{% macro counter_value_of(ctr, int, conv, usr) %}
(SELECT CAST({% if ctr.sum %}SUM{% else %}MAX{% endif %}({{ ctr.value }}) AS {{ int }})
          FROM {{ own(ctr.table, ctr.joins, ctr.conv, ctr.user) }}
          WHERE {{ pred(ctr.rows) }} AND {{ eq("this." ~ ctr.conv, ctr.conv_k, conv) }}
            AND {{ eq("this." ~ ctr.user, ctr.user_k, usr) }})
{%- endmacro %}

{#- A member's join position (NULL when none; positions at or below it are not the member's):
    `members.join_position`, or from `members.join_time` the highest message position of the
    member's conversation created at or before that time (0 when none; NULL when the time is
    NULL). `row`: the members row's alias, or none for an unaliased members table. -#}
{% macro join_pos(mem, msg, int, row) %}
  {% if mem.join %}{% if row %}{{ row }}.{% endif %}{{ mem.join }}
  {%- elif mem.join_time %}
    {% set r = row or mem.table %}
    {# The highest position of the member's conversation created at or before the join time. #}
CASE WHEN {{ r }}.{{ mem.join_time }} IS NULL THEN NULL
     ELSE (SELECT CAST(COALESCE(MAX(tm_j.{{ msg.id }}), 0) AS {{ int }})
           FROM {{ msg.table }} tm_j
           WHERE {{ eq("tm_j." ~ msg.conv, msg.conv_k, r ~ "." ~ mem.conv) }}
             AND {{ msg.time | replace("{v}", "tm_j." ~ msg.created_at) }}
                 <= {{ msg.time | replace("{v}", r ~ "." ~ mem.join_time) }}) END
  {%- else %}CAST(NULL AS {{ int }}){% endif %}
{% endmacro %}

{#- Where a watermark's stored value came from (semantics.md, "Provenance names where the stored
    value came from"), over the watermark row `w`: the backfill's evidence (`source`) while
    the value is the one the backfill wrote (`backfilled_id`), else `application` (the
    application moved it, or wrote it before any backfill). A row written before migration
    V5 has no backfilled_id: its `source` stands when it names an evidence kind (the
    spellings of EvidenceKind::as_str: an earlier backfill wrote it), else `application` (none,
    or the `app` the application's statement of earlier versions wrote: issue 25, row 5). -#}
{% macro provenance(w) %}
{# Before V5 (no backfilled_id): the recorded source when it names an evidence kind. #}
{% set recorded = "CASE WHEN " ~ w ~ ".source IN ('position', 'timestamp', 'counter', 'own_message')"
   ~ " THEN " ~ w ~ ".source ELSE 'application' END" %}
{# Since V5: the backfill's source while the value is the one the backfill wrote. #}
{% set backfilled = "WHEN " ~ w ~ ".last_read_id = " ~ w ~ ".backfilled_id THEN " ~ w ~ ".source" %}
CASE WHEN {{ w }}.backfilled_id IS NULL THEN {{ recorded }} {{ backfilled }} ELSE 'application' END
{%- endmacro %}

{#- The rows of a forward-only watermark write (each engine's upsert_watermarks.sql adds its own
    conflict clause): the application's (`from_plan` false) the three columns it owns,
    from its binds (`bind`: user, conversation, message); the backfill's its plan's rows
    (`source`) with their provenance, the evidence and the value written. -#}
{% macro watermark_rows(wm, from_plan, source, bind, usr="tm_p.usr", conv="tm_p.conv") %}
{% if not from_plan %}
INSERT INTO {{ wm }} (user_id, conversation_id, last_read_id)
VALUES ({{ bind.user }}, {{ bind.conv }}, {{ bind.message }})
{%- else %}
INSERT INTO {{ wm }} (user_id, conversation_id, last_read_id, source, backfilled_id)
SELECT {{ usr }}, {{ conv }}, tm_p.v, tm_p.src, tm_p.v
FROM {{ source }} tm_p
WHERE tm_p.v IS NOT NULL
{%- endif %}
{%- endmacro %}

{#- The batch's watermarks as the audit's forms read them, a derived table: conversation_id and
    user_id as `out` passes keys on, last_read_id, and source (its provenance, above). -#}
{% macro watermarks_read(wm, range_wm, wm_conv_k, wm_user_k) -%}
(SELECT {{ out("tm_w0.conversation_id", wm_conv_k) }} AS conversation_id,
                    {{ out("tm_w0.user_id", wm_user_k) }} AS user_id,
                    tm_w0.last_read_id AS last_read_id, {{ provenance("tm_w0") }} AS source
             FROM {{ wm }} tm_w0
             WHERE 1 = 1{{ range("tm_w0.conversation_id", range_wm, wm_conv_k) }})
{%- endmacro %}
