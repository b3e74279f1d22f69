#!/usr/bin/env bash
# Streaming replicas on loopback for the replica tests (tests/integration/replicas.rs, issue 31):
# a NEW PostgreSQL primary cluster on 5451 with a `pg_basebackup -R` standby on 5452, and a
# MariaDB primary on 4321 with a binlog replica on 4322. The servers on 5432 and 3306 are never
# touched: the PostgreSQL clusters have their own data folders and pg_hba.conf, and every
# mariadbd runs with --no-defaults (no configuration file of the machine is read).
#
#   .ci/replicas.sh start   initialise and start the four servers, wait until both replicas
#                           stream, print the URLs as `export`-able lines, the last four:
#                           TIDEMARK_TEST_PG_PRIMARY_URL, TIDEMARK_TEST_PG_REPLICA_URL,
#                           TIDEMARK_TEST_MYSQL_PRIMARY_URL, TIDEMARK_TEST_MYSQL_REPLICA_URL
#   .ci/replicas.sh stop    stop the four servers and remove their folder
#   .ci/replicas.sh urls    print the four lines again
#
# Data, sockets and logs live under $TIDEMARK_REPLICAS_DIR (default /tmp/tidemark-replicas).
# The MariaDB primary also loads the Spider engine from a private plugin folder (ha_spider.so
# taken out of Debian's mariadb-plugin-spider package with `apt-get download`, never installed:
# the package's /etc/mysql/mariadb.conf.d/spider.cnf would load Spider into the server on
# 3306 at its next start), for the Spider detection test; TIDEMARK_REPLICAS_NO_SPIDER=1 leaves
# it out. Databases named tidemark_spider* are not replicated (the replica has no Spider).
set -euo pipefail

DIR="${TIDEMARK_REPLICAS_DIR:-/tmp/tidemark-replicas}"
PGBIN="${TIDEMARK_REPLICAS_PGBIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}"
PG_PRIMARY=5451
PG_REPLICA=5452
MY_PRIMARY=4321
MY_REPLICA=4322
TIMEOUT=60

say() { echo "replicas: $*" >&2; }
die() {
  say "$*"
  exit 1
}

urls() {
  echo "TIDEMARK_TEST_PG_PRIMARY_URL=postgres://postgres@127.0.0.1:$PG_PRIMARY/test"
  echo "TIDEMARK_TEST_PG_REPLICA_URL=postgres://postgres@127.0.0.1:$PG_REPLICA/test"
  echo "TIDEMARK_TEST_MYSQL_PRIMARY_URL=mysql://root@127.0.0.1:$MY_PRIMARY/test"
  echo "TIDEMARK_TEST_MYSQL_REPLICA_URL=mysql://root@127.0.0.1:$MY_REPLICA/test"
}

as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# A statement on MariaDB node $1 (primary|replica) through its socket (root by unix_socket).
myq() { mariadb --no-defaults -S "$DIR/my-$1/mysqld.sock" -uroot -N -B -e "$2"; }

pg_start() {
  local name=$1 port=$2
  as_pg "$PGBIN/pg_ctl" -D "$DIR/pg-$name" -l "$DIR/pg-$name.log" -w -t "$TIMEOUT" \
    -o "-p $port -k $DIR -c listen_addresses=127.0.0.1" start >/dev/null ||
    { tail -n 20 "$DIR/pg-$name.log" >&2; die "PostgreSQL $name did not start"; }
}

start_pg() {
  [ -x "$PGBIN/initdb" ] || die "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin"
  as_pg "$PGBIN/initdb" -D "$DIR/pg-primary" -U postgres --auth=trust >"$DIR/initdb.log" 2>&1 ||
    { cat "$DIR/initdb.log" >&2; die "initdb failed"; }
  cat >>"$DIR/pg-primary/postgresql.conf" <<EOF
wal_level = replica
max_wal_senders = 5
hot_standby = on
fsync = off
synchronous_commit = off
full_page_writes = off
shared_buffers = 32MB
EOF
  # This cluster's own pg_hba.conf: trust on the loopback, replication included.
  cat >"$DIR/pg-primary/pg_hba.conf" <<EOF
local all all trust
host all all 127.0.0.1/32 trust
host replication postgres 127.0.0.1/32 trust
local replication postgres trust
EOF
  pg_start primary "$PG_PRIMARY"
  as_pg "$PGBIN/psql" -h 127.0.0.1 -p "$PG_PRIMARY" -U postgres -qAt -c "CREATE DATABASE test" \
    >/dev/null
  as_pg "$PGBIN/pg_basebackup" -h 127.0.0.1 -p "$PG_PRIMARY" -U postgres -D "$DIR/pg-replica" \
    -R -X stream >"$DIR/basebackup.log" 2>&1 ||
    { cat "$DIR/basebackup.log" >&2; die "pg_basebackup failed"; }
  pg_start replica "$PG_REPLICA"
  local t
  for t in $(seq 1 "$TIMEOUT"); do
    if [ "$(as_pg "$PGBIN/psql" -h 127.0.0.1 -p "$PG_PRIMARY" -U postgres -qAt \
      -c "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")" = 1 ]; then
      return 0
    fi
    sleep 1
  done
  die "the PostgreSQL replica does not stream after ${TIMEOUT}s"
}

my_start() {
  local name=$1 port=$2 id=$3 d="$DIR/my-$1"
  shift 3
  mkdir -p "$d/data"
  chown -R mysql:mysql "$d"
  mariadb-install-db --no-defaults --user=mysql --datadir="$d/data" \
    --auth-root-authentication-method=socket --skip-test-db >"$d/install.log" 2>&1 ||
    { cat "$d/install.log" >&2; die "mariadb-install-db failed for $name"; }
  /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$d/data" \
    --socket="$d/mysqld.sock" --pid-file="$d/mysqld.pid" --log-error="$d/error.log" \
    --bind-address=127.0.0.1 --port="$port" --skip-name-resolve \
    --innodb-buffer-pool-size=32M --innodb-log-file-size=16M --performance-schema=OFF \
    --server-id="$id" --log-bin="$d/data/binlog" --binlog-format=ROW \
    "$@" >/dev/null 2>&1 &
  local t
  for t in $(seq 1 "$TIMEOUT"); do
    if myq "$name" "SELECT 1" >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  tail -n 20 "$d/error.log" >&2 || true
  die "MariaDB $name did not start"
}

start_mysql() {
  [ -x /usr/sbin/mariadbd ] || die "mariadbd not found: apt-get install -y mariadb-server"
  local spider=()
  if [ -z "${TIDEMARK_REPLICAS_NO_SPIDER:-}" ]; then
    spider_plugin_dir && spider=(--plugin-dir="$DIR/plugin" --plugin-load-add=ha_spider.so)
  fi
  my_start primary "$MY_PRIMARY" 1 "${spider[@]}"
  my_start replica "$MY_REPLICA" 2 --read-only=ON \
    --replicate-wild-ignore-table='tidemark\_spider%.%'
  myq primary "CREATE USER 'repl'@'127.0.0.1'; GRANT REPLICATION SLAVE ON *.* TO 'repl'@'127.0.0.1'"
  myq replica "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=$MY_PRIMARY, MASTER_USER='repl', MASTER_USE_GTID=slave_pos; START SLAVE"
  # Created on the primary after the replica started: both come to the replica by the binlog.
  myq primary "CREATE USER 'root'@'127.0.0.1'; GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION; CREATE DATABASE test"
  local t
  for t in $(seq 1 "$TIMEOUT"); do
    if [ "$(myq replica "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = 'test'" 2>/dev/null)" = 1 ]; then
      return 0
    fi
    sleep 1
  done
  myq replica "SHOW SLAVE STATUS\G" >&2 || true
  die "the MariaDB replica did not catch up after ${TIMEOUT}s"
}

# A plugin folder holding only ha_spider.so, from Debian's package (downloaded, not installed);
# false (with a note) when it cannot be had.
spider_plugin_dir() {
  mkdir -p "$DIR/plugin"
  local so=/usr/lib/mysql/plugin/ha_spider.so
  if [ ! -f "$so" ]; then
    so="$DIR/spider-deb/usr/lib/mysql/plugin/ha_spider.so"
    if [ ! -f "$so" ]; then
      (
        mkdir -p "$DIR/spider-deb" && cd "$DIR/spider-deb" &&
          apt-get download "mariadb-plugin-spider=$(dpkg-query -W -f='${Version}' mariadb-server)" \
            >/dev/null 2>&1 && dpkg-deb -x ./*.deb .
      ) || {
        say "mariadb-plugin-spider could not be downloaded: the primary runs without Spider"
        return 1
      }
    fi
  fi
  cp "$so" "$DIR/plugin/ha_spider.so"
}

start() {
  if [ -d "$DIR" ]; then
    say "a previous run's folder $DIR exists: stopping it first"
    stop
  fi
  local begin=$SECONDS
  mkdir -p "$DIR"
  chmod 755 "$DIR"
  chown postgres "$DIR" 2>/dev/null || true
  start_pg
  start_mysql
  say "PostgreSQL $PG_PRIMARY -> $PG_REPLICA and MariaDB $MY_PRIMARY -> $MY_REPLICA up in $((SECONDS - begin)) s"
  urls
}

stop() {
  local name pid
  for name in replica primary; do
    if [ -f "$DIR/pg-$name/postmaster.pid" ]; then
      as_pg "$PGBIN/pg_ctl" -D "$DIR/pg-$name" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    [ -f "$DIR/my-$name/mysqld.pid" ] || continue
    pid=$(cat "$DIR/my-$name/mysqld.pid")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    if kill -0 "$pid" 2>/dev/null; then
      say "MariaDB $name (pid $pid) did not stop in 30 s: killing it"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  # Only this script's folder, and only the pids recorded in it, are touched.
  [ -d "$DIR" ] && rm -rf "$DIR"
  say "stopped"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
urls) urls ;;
*) die "usage: $0 start|stop|urls" ;;
esac
