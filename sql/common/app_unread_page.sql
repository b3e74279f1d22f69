{#- The unread counts of one member over a page of conversations, each capped at 100 rows
    (seed 000 §5), in one round trip: one capped count per conversation, numbered by its place
    in the page (a literal, so no engine has to guess a bind's type). Binds: each conversation
    of the page with the user. -#}
{% import "app_macros.sql" as a %}
{% for c in bind.conversations %}
SELECT {{ loop.index }} AS page_position, ({{ a.capped(msg, mem, ctr, wm, int, c, bind.user) }}) AS unread
{{- "\nUNION ALL" if not loop.last }}
{% endfor %}
