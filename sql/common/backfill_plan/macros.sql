{#- The evidence policy's pieces for backfill_plan.sql (see its comment): `e` is one entry of
    `evidence` (SqlContext EvIdents: `e.is` its kind, `e.ranked` compared by value under
    `highest`, `e.holds` held back by the settle guard), `i` its 1-based index; tm_v is a tm_ev
    row, tm_f a tm_ef row. -#}

{#- Whether the derived value `w` is young (see the settle guard): it newly covers a message
    younger than the settle time. -#}
{% macro young(w) %}
(tm_v.yp IS NOT NULL AND {{ w }} >= tm_v.yp AND (tm_v.ex IS NULL OR {{ w }} > tm_v.ex))
{%- endmacro %}

{#- Counter evidence's value before the settle guard: k <= 0 the newest position, else L[k]. -#}
{% macro counter_value(i) %}
CASE WHEN tm_v.ev{{ i }} <= 0 THEN tm_v.mp ELSE COALESCE(tm_v.rk_pos, 0) END
{%- endmacro %}

{#- What the choice among tm_ef's values gives for entry `e`: `what` "value" the value, "source"
    its provenance, "unrep" whether it is an unrepresentable counter (0 for another kind). -#}
{% macro pick(e, i, what) %}
{% if what == "value" %}tm_f.e{{ i }}
{%- elif what == "source" %}'{{ e.kind }}'
{%- elif e.is.counter %}tm_f.u{{ i }}
{%- else %}0{% endif %}
{% endmacro %}

{#- The own-message lower bound among tm_ef's values (NULL without the source). -#}
{% macro own_column(evidence, int) %}
{% set ns = namespace(col="CAST(NULL AS " ~ int ~ ")") %}
{% for e in evidence %}{% if e.is.own_message %}{% set ns.col = "tm_f.e" ~ loop.index %}{% endif %}{% endfor %}
{{ ns.col }}
{%- endmacro %}

{#- The policy's choice (`what` as `pick`; nothing chosen: NULL, or 0 for "unrep").
    `highest`: the highest ranked value (the first of equal ones), else the counter.
    `first`: the first entry in mapping order with a value, a held entry stopping the search;
    own messages never chosen here (they raise the choice later). -#}
{% macro chain(evidence, highest, what) %}
CASE
{% if highest %}
{% for e in evidence %}
{% set i = loop.index %}
{% if e.ranked %}
           WHEN tm_f.e{{ i }} IS NOT NULL
  {%- for f in evidence %}
    {% if f.ranked and loop.index != i %}
 AND (tm_f.e{{ loop.index }} IS NULL OR tm_f.e{{ i }} {{ ">" if loop.index < i else ">=" }} tm_f.e{{ loop.index }})
    {%- endif %}
  {% endfor %}
 THEN {{ pick(e, i, what) }}
{% endif %}
{% endfor %}
{% for e in evidence %}
{% if e.is.counter %}
           WHEN tm_f.e{{ loop.index }} IS NOT NULL THEN {{ pick(e, loop.index, what) }}
{% endif %}
{% endfor %}
{% else %}
{% for e in evidence %}
{% if not e.is.own_message %}
           WHEN tm_f.e{{ loop.index }} IS NOT NULL THEN {{ pick(e, loop.index, what) }}
{% if e.holds %}
           WHEN tm_f.h{{ loop.index }} = 1 THEN {{ "0" if what == "unrep" else "NULL" }}
{% endif %}
{% endif %}
{% endfor %}
{% endif %}
           ELSE {{ "0" if what == "unrep" else "NULL" }}
         END
{%- endmacro %}
