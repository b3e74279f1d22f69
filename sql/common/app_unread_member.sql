{#- The unread count of one member in one conversation, capped at 100 rows (seed 000 §5):
    counted from the watermark, never stored (seeds 000 §1-§2, 003). Binds: conv, user. -#}
{% import "app_macros.sql" as a %}
SELECT ({{ a.capped(msg, mem, ctr, wm, int, bind.conv, bind.user) }}) AS unread
