#!/usr/bin/env bash
# A Citus 13.2.2 cluster on loopback for the Citus tests (tests/integration/citus.rs; issue 29
# row 20): a coordinator on 5433 and two workers on 5434 and 5435, PostgreSQL 15 data folders
# under $TIDEMARK_CITUS_DIR (default /tmp/tidemark-citus), run as the postgres user. The
# server on 5432 is never touched.
#
#   .ci/citus.sh start   build and install Citus if it is missing (the vendored source archive,
#                        vendor/citus/build-and-install: 1-3 minutes on 2 cores, once per
#                        machine), start the nodes, print TIDEMARK_CITUS_URL=... as the last line
#   .ci/citus.sh stop    stop the nodes and remove their folder
#
# The vendored files (Citus's source archive, `build-and-install`, `cluster`) are looked for in
# $TIDEMARK_CITUS_VENDOR, else ../shared/vendor/citus beside the checkout, else
# /work/shared/vendor/citus. Citus is in no package registry these machines reach.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
DIR="${TIDEMARK_CITUS_DIR:-/tmp/tidemark-citus}"
PGCONFIG=/usr/lib/postgresql/15/bin/pg_config

say() { echo "citus: $*" >&2; }
die() {
  say "$*"
  exit 1
}

vendor() {
  local d
  for d in "${TIDEMARK_CITUS_VENDOR:-}" "$here/../shared/vendor/citus" /work/shared/vendor/citus; do
    if [ -n "$d" ] && [ -x "$d/cluster" ] && [ -x "$d/build-and-install" ]; then
      echo "$d"
      return 0
    fi
  done
  die "the vendored Citus (build-and-install, cluster) was not found: set TIDEMARK_CITUS_VENDOR"
}

start() {
  local v begin=$SECONDS
  v="$(vendor)"
  [ -x "$PGCONFIG" ] || die "no PostgreSQL 15 server binaries ($PGCONFIG): apt-get install -y postgresql-15"
  if [ ! -f "$("$PGCONFIG" --pkglibdir)/citus.so" ]; then
    say "building Citus from $v (once per machine)"
    "$v/build-and-install" >&2 || die "building Citus failed"
  fi
  if [ -d "$DIR" ]; then
    say "a previous cluster's folder $DIR exists: stopping it first"
    stop
  fi
  local url_line
  url_line="$("$v/cluster" start "$DIR" | tail -n 1)" || {
    say "the cluster did not start; the ends of its logs:"
    tail -n 20 "$DIR"/n*.log >&2 || true
    exit 1
  }
  say "coordinator and 2 workers up in $((SECONDS - begin)) s"
  echo "$url_line"
}

stop() {
  local v
  v="$(vendor)"
  [ -d "$DIR" ] || return 0
  "$v/cluster" stop "$DIR" || true
  # Only this script's folder is removed.
  rm -rf "$DIR"
  say "stopped"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
*) die "usage: $0 start|stop" ;;
esac
