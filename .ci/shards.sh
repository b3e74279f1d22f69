#!/usr/bin/env bash
# Extra database servers on loopback for the shard tests (tests/integration/shards.rs, issue
# 31): two PostgreSQL clusters (127.0.0.1:5441 and 5442, the binaries of the installed
# PostgreSQL) and one MariaDB server (127.0.0.1:4311), each with its own data folder under
# $TIDEMARK_SHARDS_DIR (default: a folder under the temp dir). The servers of the machine
# (5432, 3306) and their files are never touched.
#
#   .ci/shards.sh start   start them, wait until they answer, print as the last two lines
#                         TIDEMARK_TEST_SHARD_POSTGRES_URLS=... and TIDEMARK_TEST_SHARD_MYSQL_URLS=...
#                         (admin URLs of the extra servers, comma-separated)
#   .ci/shards.sh stop    stop them and remove the folder
#
# PostgreSQL runs as the `postgres` user (initdb refuses root), trust authentication on
# loopback only; MariaDB as root dropping to `mysql`, root without a password from 127.0.0.1.
set -euo pipefail

DIR="${TIDEMARK_SHARDS_DIR:-${TMPDIR:-/tmp}/tidemark-shards}"
PG_PORTS=(5441 5442)
MY_PORT=4311
PG_BIN="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"

say() { echo "shards: $*" >&2; }
die() {
  say "$*"
  exit 1
}

as_postgres() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

pg_start() {
  local port=$1 d="$DIR/pg$1"
  mkdir -p "$d"
  chown postgres "$DIR" "$d" 2>/dev/null || true
  as_postgres "$PG_BIN/initdb" -D "$d/data" -U postgres --auth=trust >"$d/initdb.log" 2>&1 ||
    { cat "$d/initdb.log" >&2; die "initdb failed for port $port"; }
  as_postgres "$PG_BIN/pg_ctl" -D "$d/data" -l "$d/server.log" -w -t 60 \
    -o "-p $port -k $d -c listen_addresses=127.0.0.1 -c shared_buffers=32MB -c max_connections=60" \
    start >/dev/null || { tail -n 20 "$d/server.log" >&2; die "PostgreSQL on $port did not start"; }
}

my_start() {
  local d="$DIR/my"
  [ -x /usr/sbin/mariadbd ] || die "mariadbd not found: apt-get install -y mariadb-server"
  mkdir -p "$d/data"
  chown -R mysql:mysql "$d"
  mariadb-install-db --no-defaults --user=mysql --datadir="$d/data" \
    --auth-root-authentication-method=socket --skip-test-db >"$d/install.log" 2>&1 ||
    { cat "$d/install.log" >&2; die "mariadb-install-db failed"; }
  /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$d/data" \
    --socket="$d/mysqld.sock" --pid-file="$d/mysqld.pid" --log-error="$d/error.log" \
    --bind-address=127.0.0.1 --port="$MY_PORT" --skip-name-resolve \
    --innodb-buffer-pool-size=32M --performance-schema=OFF >/dev/null 2>&1 &
  local t
  for t in $(seq 1 60); do
    if mariadb --no-defaults -S "$d/mysqld.sock" -uroot -e "SELECT 1" >/dev/null 2>&1; then
      mariadb --no-defaults -S "$d/mysqld.sock" -uroot -e \
        "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'; GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;"
      return 0
    fi
    sleep 1
  done
  tail -n 20 "$d/error.log" >&2 || true
  die "MariaDB on $MY_PORT does not answer after ${t}s"
}

start() {
  [ -n "$PG_BIN" ] || die "no PostgreSQL binaries under /usr/lib/postgresql"
  if [ -d "$DIR" ]; then
    say "a previous run's folder $DIR exists: stopping it first"
    stop
  fi
  mkdir -p "$DIR"
  chmod 755 "$DIR"
  local port urls=()
  for port in "${PG_PORTS[@]}"; do
    pg_start "$port"
    urls+=("postgres://postgres@127.0.0.1:$port/postgres")
  done
  my_start
  (
    IFS=,
    echo "TIDEMARK_TEST_SHARD_POSTGRES_URLS=${urls[*]}"
  )
  echo "TIDEMARK_TEST_SHARD_MYSQL_URLS=mysql://root@127.0.0.1:$MY_PORT/mysql"
}

stop() {
  local port
  for port in "${PG_PORTS[@]}"; do
    if [ -f "$DIR/pg$port/data/postmaster.pid" ]; then
      as_postgres "$PG_BIN/pg_ctl" -D "$DIR/pg$port/data" -m fast -w stop >/dev/null 2>&1 || true
    fi
  done
  if [ -f "$DIR/my/mysqld.pid" ]; then
    local pid
    pid="$(cat "$DIR/my/mysqld.pid")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 60); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
  fi
  rm -rf "$DIR"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) die "usage: $0 start|stop" ;;
esac
