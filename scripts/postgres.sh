#!/usr/bin/env bash
# Start a private PostgreSQL server for convsel's tests (and for trying replicas locally), and
# print its URL on stdout; everything else goes to stderr. Idempotent: a server already running
# on the port is reused. Installs Debian's postgresql package when no server binaries are found
# (needs root and apt-get). The server runs as the `postgres` user when started by root, since
# PostgreSQL refuses to run as root, and listens on 127.0.0.1 and a socket under its directory.
#
# `scripts/postgres.sh stop` stops that server (its data stays in the directory);
# `scripts/postgres.sh status` exits 0 when it is running, 1 when not (neither installs).
# Settings (environment): CONVSEL_PG_PORT (54329), CONVSEL_PG_DIR (/tmp/convsel-pg-$PORT).
# The role and database are both `convsel`; the password is CONVSEL_PG_PASSWORD
# (convsel-local-test): a throwaway server on loopback, for tests and local trials only.
set -euo pipefail
port="${CONVSEL_PG_PORT:-54329}"
dir="${CONVSEL_PG_DIR:-/tmp/convsel-pg-$port}"
data="$dir/data"
password="${CONVSEL_PG_PASSWORD:-convsel-local-test}"
url="postgresql://convsel:$password@127.0.0.1:$port/convsel"
say() { echo "scripts/postgres.sh: $*" >&2; }
cd /   # the server's user may not be able to enter the caller's directory (/root/...)
t0=$(date +%s.%N)

bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }
bin="$(bindir)"

# As root, run every server command as `postgres` (created by the package; made if missing).
as_owner=()
owner() {
  if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --home-dir "$dir" --shell /bin/sh postgres
    as_owner=(runuser -u postgres --)
  fi
}
run() { "${as_owner[@]}" "$@"; }
running() {
  [ -n "$bin" ] && [ -s "$data/PG_VERSION" ] && run "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1
}

case "${1:-}" in
  status)
    owner
    if running; then say "running ($data)"; exit 0; fi
    say "not running ($data)"; exit 1 ;;
  stop)
    owner
    if running; then
      run "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null && say "stopped ($data)"
    else
      say "no server running on $data"
    fi
    exit 0 ;;
  "") ;;
  *) say "unknown argument '$1' (expected nothing, status or stop)"; exit 2 ;;
esac

if [ -z "$bin" ] || [ ! -x "$bin/initdb" ] || [ ! -x "$bin/pg_ctl" ]; then
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    say "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin, and cannot install them (needs root and apt-get): install Debian's postgresql package"
    exit 1
  fi
  say "installing Debian's postgresql package (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends postgresql >&2
  bin="$(bindir)"
  [ -n "$bin" ] || { say "postgresql installed, but no /usr/lib/postgresql/*/bin"; exit 1; }
  say "installed in $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}") s"
fi

owner

mkdir -p "$dir"
[ "$(id -u)" -eq 0 ] && chown postgres: "$dir"
chmod 700 "$dir"

if [ ! -s "$data/PG_VERSION" ]; then
  rm -rf "$data"
  pwfile="$dir/.pw"
  run sh -c "umask 077; echo '$password' > '$pwfile'"
  # Local socket: trust (only the owner can reach the private directory); TCP: passwords.
  run "$bin/initdb" -D "$data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
    --pwfile="$pwfile" -E UTF8 --locale=C.UTF-8 --no-sync >"$dir/initdb.log" 2>&1 \
    || { say "initdb failed:"; cat "$dir/initdb.log" >&2; exit 1; }
  rm -f "$pwfile"
fi

# fsync off: a throwaway server whose data need not survive a power cut; a client killed
# mid-commit (what the tests do) is the server's rollback, not the disk's.
if ! run "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
  run "$bin/pg_ctl" -D "$data" -l "$dir/server.log" -w -t 60 start \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off -c full_page_writes=off" \
    >/dev/null || { say "the server did not start; its log:"; tail -n 20 "$dir/server.log" >&2; exit 1; }
fi

psql() { run "$bin/psql" -X -q -h "$dir" -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 "$@"; }
if [ "$(psql -tAc "SELECT 1 FROM pg_roles WHERE rolname='convsel'")" != "1" ]; then
  psql -c "CREATE ROLE convsel LOGIN CREATEDB"
fi
psql -c "ALTER ROLE convsel PASSWORD '$password'"
if [ "$(psql -tAc "SELECT 1 FROM pg_database WHERE datname='convsel'")" != "1" ]; then
  psql -c "CREATE DATABASE convsel OWNER convsel"
fi
say "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') ready on 127.0.0.1:$port (data $data) in $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}") s"
echo "$url"
