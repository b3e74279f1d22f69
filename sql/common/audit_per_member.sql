{#- Audit, shape per_member (semantics.md "Shape A", "Drift classes"), one batch of
    conversations, in one pass over the messages (issue 11, "The one-pass form").

    Each counter row gets a threshold t = max(watermark, join position) (watermark 0 when
    none). Per conversation the thresholds are merged into the stream of messages above the
    conversation's lowest threshold, ordered by position descending, a threshold before the
    messages of its own position (a message counts when position > t). Running counts then
    give, at each threshold row:
      a_all - a_own : countable messages after t not sent by the member (recomputed; a counter
                      whose member row is missing or not active is owed 0)
      l_own         : the member's own legacy-countable messages after t (own_after)
      x_all - x_own : legacy-countable but not countable messages after t, not the member's
                      own (excluded_after)
    `_all` is partitioned by conversation, `_own` by (conversation, sender): a message whose
    sender is NULL (a deleted account) is nobody's own and is counted (scenario S12), exactly
    as `IS DISTINCT FROM` counted it. Then, for the drifting rows only, a second pass over
    their conversations places each at its join position (no join position: after every
    message) for all countable messages not its own (total_countable). Counts are exact, then
    clamped at cap+1 under `--cap` (seed 000 §5), which is what a count stopped at cap+1 gives.

    The parts, in the order the statement runs them:
      this file                      tm_base (counter rows, watermarks, members), tm_t (each
                                     row's threshold t1), tm_lo (each conversation's lowest t1);
      audit_per_member/count.sql     `count_only`: the number of drifting rows, nothing else;
      audit_per_member/facts.sql     the one pass: every fact at each threshold, and the
                                     drifting rows (tm_d);
      audit_per_member/total.sql     the second pass (total_countable) and the report's rows;
      audit_per_member/read_flags.sql  shape read_flags: the flag facts of the drifting rows;
      audit_per_member/streams.sql   the message (or mention) rows the passes merge.

    Range placeholders: `range` on the counter table, `range2` and `range3` on the messages
    (the same batch bound again, so each engine reads the messages by an index range).
    Predicates and the counter's value see their own row as `this` (and `conv`, `usr`
    where they read them: macros.sql `own`, `counter_rows`).
    `range_wm` on the watermarks and `range_mem` on the members (when mapped): each table read
    by its own index range, never joined whole.
    `count_only`: return only the number of drifting rows (the backfill's change count),
    without the second pass: `range3` is then not placed (bind the batch twice). The pass
    then carries only what the count needs (no classification facts): the countable messages
    alone, two running sums instead of five, rows a quarter as wide to sort (PostgreSQL
    15, 5 000 members: 41 ms a batch with every fact carried).

    A mention counter (`ctr.mentions`, issue 22) streams one row per (message, mentioned
    user) in place of the messages (mention_macros.sql `stream`), the mentioned user as
    `sender`, its own-message rows already left out of `c`: its counts are then the
    (conversation, sender) partitions alone (`a_own`, `x_own`, `t_own`), each member's own
    mentions above its threshold, in the same one pass.

    With a mention counter and reader rules (issue 29 row 16: a mention counts for a reader
    only where the message counts for that reader), the stream folds `recipient` into its
    rows (the reader is the row's mentioned user), so `rmsg` (the reader keys the statement
    still applies per threshold) keeps `restricted` alone: the mention rows carry `rs` and
    `k`, and the counts subtract the restricted rows (`ra_own`, `tr_own`) and add their
    legacy-counted ones to the excluded (`rk_own`) for a reader not admitted.
    Messages only some readers count (issue 22, reader_macros.sql): with `restricted` each
    fact also sums the restricted messages (ra_, rl_, rx_, tr_) and subtracts them for a
    reader `restricted_readers` does not admit (adm = 0); with `recipient` each fact leaves the
    addressed messages out of the shared sums and adds those addressed to the reader (to_c,
    to_l, to_x, t_to: running sums over (conversation, recipient)). Still one pass: the
    threshold rows carry adm and their reader as rcp, no join of members with messages.

    Shape read_flags (semantics.md "Shape C", issue 22): the counter rows are the members'
    flag rows (the SqlContext's derived table, `tm_pos` its message's position, `tm_unread`
    1 unless read), summed per member; the drifting rows get two more facts, from t as above:
    read_after (flag rows saying read on countable messages of others after t) and
    unread_before (flag rows saying unread at or before t), read by `range_fl` (the flags by
    their messages' conversation) and `range_fm` (the messages, for `countable`). -#}
{% import "macros.sql" as m %}
{% import "reader_macros.sql" as rd %}
{% import "audit_per_member/streams.sql" as st %}
{# The reader rules the statement applies per threshold (a mention stream folds `recipient` in). #}
{% set rmsg = {"restricted": msg.restricted, "recipient": none} if ctr.mentions else msg %}
{% set readers = rmsg.restricted or rmsg.recipient %}
{# The running sums' window: position descending, a threshold before its position's messages. #}
{% set win = "ORDER BY tm_s.pos DESC, tm_s.kind ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW" %}
{# The batch's counter rows, each with its watermark and its member row (is_member, join_pos). #}
WITH tm_base AS (
  SELECT tm_k.conv AS conv, tm_k.usr AS usr, tm_k.stored AS stored,
         CAST(tm_w.last_read_id AS {{ int }}) AS last_read_id, tm_w.source AS source,
{% if mem %}
         CASE WHEN tm_mb.usr IS NULL THEN 0 ELSE tm_mb.is_active END AS is_member,
{% if msg.restricted %}
         CASE WHEN tm_mb.usr IS NULL THEN 0 ELSE tm_mb.adm END AS adm,
{% endif %}
         CAST(tm_mb.join_pos AS {{ int }}) AS join_pos
{% else %}
         1 AS is_member,
         CAST(NULL AS {{ int }}) AS join_pos
{% endif %}
  FROM ({{ m.counter_rows(ctr, int, m.range("this." ~ ctr.conv, range, ctr.conv_k)) }}) tm_k
  LEFT JOIN {{ m.watermarks_read(wm, range_wm, wm_conv_k, wm_user_k) }} tm_w
         ON tm_w.conversation_id = tm_k.conv AND tm_w.user_id = tm_k.usr
{% if mem %}
  LEFT JOIN (SELECT {{ m.out("this." ~ mem.conv, mem.conv_k) }} AS conv,
                    {{ m.out("this." ~ mem.user, mem.user_k) }} AS usr,
                    {{ m.join_pos(mem, msg, int, "this") }} AS join_pos,
                    CASE WHEN {{ m.pred(mem.active) }} THEN 1 ELSE 0 END AS is_active
{%- if msg.restricted %},
                    CASE WHEN {{ m.pred(mem.readers) }} THEN 1 ELSE 0 END AS adm
{%- endif %}

             FROM {{ m.own(mem.table, mem.joins, mem.conv, mem.user) }}
             WHERE 1 = 1{{ m.range("this." ~ mem.conv, range_mem, mem.conv_k) }}) tm_mb
         ON tm_mb.conv = tm_k.conv AND tm_mb.usr = tm_k.usr
{% endif %}
),
{# Each counter row's threshold t1 = max(watermark, join position), watermark 0 when none. #}
tm_t AS {{ materialized }} (
  SELECT tm_b.conv, tm_b.usr, tm_b.stored, tm_b.last_read_id, tm_b.source, tm_b.is_member, tm_b.join_pos,
{%- if msg.restricted %} tm_b.adm,{% endif %}

         CAST(CASE WHEN tm_b.join_pos IS NOT NULL AND tm_b.join_pos > COALESCE(tm_b.last_read_id, 0)
                   THEN tm_b.join_pos ELSE COALESCE(tm_b.last_read_id, 0) END AS {{ int }}) AS t1
  FROM tm_base tm_b
),
{# Each conversation's lowest threshold: the pass reads only the messages above it. #}
tm_lo AS (
  SELECT tm_t.conv AS tm_conv, MIN(tm_t.t1) AS tm_min FROM tm_t GROUP BY tm_t.conv
),
{% if count_only %}
{% include "audit_per_member/count.sql" %}
{% else %}
{% include "audit_per_member/facts.sql" %}

,
{% include "audit_per_member/total.sql" %}
{% endif %}
