#!/usr/bin/env bash
# A three-node MariaDB Galera cluster on loopback for the Galera tests (tests/galera.rs).
#
#   .ci/galera.sh start   start the nodes, wait until each is wsrep_ready=ON in a cluster of 3,
#                         print the URLs (TIDEMARK_TEST_GALERA_URLS=...) as the last line
#   .ci/galera.sh stop    shut the nodes down and remove their data
#   .ci/galera.sh urls    print the URLs, comma-separated
#
# Nodes run as the `mysql` user with their own data folders under $TIDEMARK_GALERA_DIR
# (default /tmp/tidemark-galera) and their own ports: SQL 4306/4307/4308, gcomm 4567/4568/4569,
# IST 4577/4578/4579, SST (rsync) 4444/4445/4446. The server on 3306 is never touched: every
# node runs with --no-defaults, so no configuration file of the machine is read.
# Needs Debian's mariadb-server and galera-4 (`apt-get install -y galera-4`).
set -euo pipefail

DIR="${TIDEMARK_GALERA_DIR:-/tmp/tidemark-galera}"
PROVIDER="${TIDEMARK_GALERA_PROVIDER:-/usr/lib/galera/libgalera_smm.so}"
TIMEOUT="${TIDEMARK_GALERA_TIMEOUT:-120}"
NODES=(1 2 3)
sql_port() { echo $((4305 + $1)); }
gcomm_port() { echo $((4566 + $1)); }
ist_port() { echo $((4576 + $1)); }
sst_port() { echo $((4443 + $1)); }
GCOMM="gcomm://127.0.0.1:4567,127.0.0.1:4568,127.0.0.1:4569"

say() { echo "galera: $*" >&2; }
die() {
  say "$*"
  exit 1
}

urls() {
  local out=() n
  for n in "${NODES[@]}"; do out+=("mysql://root@127.0.0.1:$(sql_port "$n")/test"); done
  (
    IFS=,
    echo "${out[*]}"
  )
}

# Runs a statement on node $1 through its socket (unix_socket authentication as root).
q() { mariadb --no-defaults -S "$DIR/node$1/mysqld.sock" -uroot -N -B -e "$2" 2>/dev/null; }

status_of() { q "$1" "SHOW STATUS LIKE '$2'" | awk '{print $2}'; }

# Waits until node $1 is ready in a cluster of at least $2 nodes (bounded by $TIMEOUT s).
wait_ready() {
  local n=$1 size=$2 t
  for t in $(seq 1 "$TIMEOUT"); do
    if ! kill -0 "$(cat "$DIR/node$n/mysqld.pid" 2>/dev/null || echo 0)" 2>/dev/null \
      && [ "$t" -gt 5 ]; then
      say "node $n is not running; the end of its log:"
      tail -n 30 "$DIR/node$n/error.log" >&2 || true
      return 1
    fi
    if [ "$(status_of "$n" wsrep_ready)" = ON ] &&
      [ "$(status_of "$n" wsrep_cluster_size)" -ge "$size" ] 2>/dev/null; then
      return 0
    fi
    sleep 1
  done
  say "node $n was not ready in a cluster of $size after ${TIMEOUT}s; the end of its log:"
  tail -n 30 "$DIR/node$n/error.log" >&2 || true
  return 1
}

start_node() {
  local n=$1 d="$DIR/node$1"
  shift
  mkdir -p "$d/data"
  chown -R mysql:mysql "$d"
  mariadb-install-db --no-defaults --user=mysql --datadir="$d/data" \
    --auth-root-authentication-method=socket --skip-test-db >"$d/install.log" 2>&1 ||
    { cat "$d/install.log" >&2; die "mariadb-install-db failed for node $n"; }
  # mariadbd is started as root and drops to the mysql user (--user).
  /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$d/data" \
    --socket="$d/mysqld.sock" --pid-file="$d/mysqld.pid" --log-error="$d/error.log" \
    --bind-address=127.0.0.1 --port="$(sql_port "$n")" --skip-name-resolve \
    --innodb-buffer-pool-size=32M --innodb-log-file-size=16M --performance-schema=OFF \
    --binlog-format=ROW --default-storage-engine=InnoDB --innodb-autoinc-lock-mode=2 \
    --wsrep-on=ON --wsrep-provider="$PROVIDER" --wsrep-cluster-name=tidemark_ci \
    --wsrep-cluster-address="$GCOMM" --wsrep-node-name="node$n" \
    --wsrep-node-address="127.0.0.1:$(gcomm_port "$n")" \
    --wsrep-provider-options="base_port=$(gcomm_port "$n");ist.recv_addr=127.0.0.1:$(ist_port "$n");gcache.size=32M" \
    --wsrep-sst-method=rsync --wsrep-sst-receive-address="127.0.0.1:$(sst_port "$n")" \
    "$@" >/dev/null 2>&1 &
}

start() {
  [ -x /usr/sbin/mariadbd ] || die "mariadbd not found: apt-get install -y mariadb-server"
  [ -f "$PROVIDER" ] || die "no Galera provider at $PROVIDER: apt-get install -y galera-4"
  if [ -d "$DIR" ]; then
    say "a previous cluster's folder $DIR exists: stopping it first"
    stop
  fi
  local n begin=$SECONDS
  mkdir -p "$DIR"
  chmod 755 "$DIR"
  say "bootstrapping node 1 (127.0.0.1:$(sql_port 1))"
  start_node 1 --wsrep-new-cluster
  wait_ready 1 1 || die "node 1 did not start"
  # Before the others join (they copy node 1 by SST): root over TCP without a password,
  # for the tests, on the loopback only.
  q 1 "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'; GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION; CREATE DATABASE IF NOT EXISTS test" ||
    die "could not create the test user on node 1"
  for n in 2 3; do
    say "starting node $n (127.0.0.1:$(sql_port "$n"))"
    start_node "$n"
    wait_ready "$n" "$n" || die "node $n did not join"
  done
  for n in "${NODES[@]}"; do
    wait_ready "$n" 3 || die "node $n does not see a cluster of 3"
  done
  say "cluster of 3 ready in $((SECONDS - begin)) s"
  echo "TIDEMARK_TEST_GALERA_URLS=$(urls)"
}

stop() {
  local n pid
  for n in "${NODES[@]}"; do
    [ -f "$DIR/node$n/mysqld.pid" ] || continue
    pid=$(cat "$DIR/node$n/mysqld.pid")
    kill -TERM "$pid" 2>/dev/null || true
  done
  for n in "${NODES[@]}"; do
    [ -f "$DIR/node$n/mysqld.pid" ] || continue
    pid=$(cat "$DIR/node$n/mysqld.pid")
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    if kill -0 "$pid" 2>/dev/null; then
      say "node $n (pid $pid) did not stop in 30 s: killing it"
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
