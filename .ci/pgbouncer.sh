#!/usr/bin/env bash
# pgbouncer in TRANSACTION pooling mode on loopback, in front of the PostgreSQL on
# 127.0.0.1:5432, for the pooler tests (tests/integration/poolers.rs).
#
#   .ci/pgbouncer.sh start   install Debian's pgbouncer if missing, start it, wait until it
#                            answers, print TIDEMARK_TEST_PGBOUNCER_URL=... as the last line
#   .ci/pgbouncer.sh stop    stop it and remove its folder
#   .ci/pgbouncer.sh url     print the URL
#
# Its configuration, pid file, log and socket live in $TIDEMARK_PGBOUNCER_DIR (default: a folder
# under the temp dir); it listens on 127.0.0.1:$TIDEMARK_PGBOUNCER_PORT (default 6432). No file
# of the machine's own pgbouncer (/etc/pgbouncer) is read or changed, and its service is never
# started. pgbouncer refuses to run as root: it runs as the `postgres` user.
# Every database name is passed on as it is (`*`), in transaction mode; the name
# `tidemark_session` is the database `test` in SESSION mode (what tidemark accepts).
# Prepared statements are not carried across transactions (`max_prepared_statements = 0`,
# pgbouncer's default, and all that Debian 12's 1.18 knows): the setting the issue was found on.
set -euo pipefail

DIR="${TIDEMARK_PGBOUNCER_DIR:-${TMPDIR:-/tmp}/tidemark-pgbouncer}"
PORT="${TIDEMARK_PGBOUNCER_PORT:-6432}"
UPSTREAM_HOST="${TIDEMARK_PGBOUNCER_UPSTREAM_HOST:-127.0.0.1}"
UPSTREAM_PORT="${TIDEMARK_PGBOUNCER_UPSTREAM_PORT:-5432}"
RUN_AS="${TIDEMARK_PGBOUNCER_USER:-postgres}"

say() { echo "pgbouncer: $*" >&2; }
die() {
  say "$*"
  exit 1
}

url() { echo "postgres://postgres@127.0.0.1:$PORT/test"; }

as_user() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u "$RUN_AS" -- "$@"
  else
    "$@"
  fi
}

answers() { pg_isready -q -h 127.0.0.1 -p "$PORT" -d test -U postgres 2>/dev/null; }

start() {
  if ! command -v pgbouncer >/dev/null && [ ! -x /usr/sbin/pgbouncer ]; then
    command -v apt-get >/dev/null || die "pgbouncer is missing and there is no apt-get"
    say "installing Debian's pgbouncer"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y pgbouncer >/dev/null
  fi
  local bin
  bin="$(command -v pgbouncer || echo /usr/sbin/pgbouncer)"
  if [ -f "$DIR/pgbouncer.pid" ] && kill -0 "$(cat "$DIR/pgbouncer.pid")" 2>/dev/null; then
    say "already running (pid $(cat "$DIR/pgbouncer.pid"))"
  else
    rm -rf "$DIR"
    mkdir -p "$DIR"
    cat >"$DIR/pgbouncer.ini" <<EOF
[databases]
tidemark_session = host=$UPSTREAM_HOST port=$UPSTREAM_PORT dbname=test pool_mode=session
* = host=$UPSTREAM_HOST port=$UPSTREAM_PORT

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PORT
unix_socket_dir = $DIR
auth_type = trust
auth_file = $DIR/userlist.txt
pool_mode = transaction
max_client_conn = 200
default_pool_size = 20
max_prepared_statements = 0
ignore_startup_parameters = extra_float_digits,options
server_reset_query = DISCARD ALL
logfile = $DIR/pgbouncer.log
pidfile = $DIR/pgbouncer.pid
admin_users = postgres
EOF
    echo '"postgres" ""' >"$DIR/userlist.txt"
    chown -R "$RUN_AS" "$DIR"
    # Debian 12's 1.18 does not know max_prepared_statements (its behaviour is that of 0).
    if ! as_user "$bin" -V 2>/dev/null | grep -qE 'PgBouncer 1\.(2[1-9]|[3-9][0-9])'; then
      sed -i '/^max_prepared_statements/d' "$DIR/pgbouncer.ini"
    fi
    as_user "$bin" -d "$DIR/pgbouncer.ini" || {
      tail -n 20 "$DIR/pgbouncer.log" >&2 || true
      die "pgbouncer did not start"
    }
  fi
  for _ in $(seq 1 30); do
    if answers; then
      echo "TIDEMARK_TEST_PGBOUNCER_URL=$(url)"
      return 0
    fi
    sleep 1
  done
  tail -n 20 "$DIR/pgbouncer.log" >&2 || true
  die "pgbouncer does not answer on 127.0.0.1:$PORT"
}

stop() {
  if [ -f "$DIR/pgbouncer.pid" ]; then
    local pid
    pid="$(cat "$DIR/pgbouncer.pid")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 20); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
  fi
  rm -rf "$DIR"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  url) url ;;
  *) die "usage: $0 start|stop|url" ;;
esac
