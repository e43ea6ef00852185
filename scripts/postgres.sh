#!/usr/bin/env bash
# A private PostgreSQL cluster on a loopback port, for users and tests:
#
#   scripts/postgres.sh start [DIR]   initialise (once) and start; print the URL
#   scripts/postgres.sh stop [DIR]    stop it
#   scripts/postgres.sh url [DIR]     print the URL of a running cluster
#
# DIR defaults to bin/postgres. The cluster listens on 127.0.0.1 only
# ($PGPORT, default 55432), its superuser is "avtgym" with a random
# password kept in DIR/password, and connections need that password
# (scram-sha-256). PostgreSQL refuses to run as root: when run as root the
# server runs as the "postgres" user (Debian's package creates it). The
# binaries are found with pg_config --bindir (after `apt-get install
# postgresql` they are not on PATH).
set -euo pipefail
cmd=${1:-start}
dir=${2:-bin/postgres}
port=${PGPORT:-55432}

bindir=""
if command -v pg_config >/dev/null; then bindir=$(pg_config --bindir); fi
if [ ! -x "$bindir/initdb" ]; then
  for d in /usr/lib/postgresql/*/bin; do [ -x "$d/initdb" ] && bindir=$d; done
fi
if [ ! -x "$bindir/initdb" ]; then
  echo "postgres: no PostgreSQL server binaries found (Debian: apt-get install -y postgresql)" >&2
  exit 1
fi

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
data=$dir/data
as=()
if [ "$(id -u)" = 0 ]; then
  id postgres >/dev/null 2>&1 || { echo "postgres: running as root, and there is no postgres user to run the server as" >&2; exit 1; }
  as=(runuser -u postgres --)
  chown postgres "$dir"
fi

url() {
  echo "postgres://avtgym:$(cat "$dir/password")@127.0.0.1:$(cat "$dir/port")/postgres?sslmode=disable"
}

case $cmd in
start)
  if [ ! -f "$data/PG_VERSION" ]; then
    head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/password"
    chmod 600 "$dir/password"
    [ ${#as[@]} -gt 0 ] && chown postgres "$dir/password"
    "${as[@]}" "$bindir/initdb" -D "$data" -U avtgym --pwfile="$dir/password" \
      --auth-host=scram-sha-256 --auth-local=scram-sha-256 -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 ||
      { cat "$dir/initdb.log" >&2; exit 1; }
  fi
  echo "$port" > "$dir/port"
  if ! "${as[@]}" "$bindir/pg_ctl" -D "$data" status >/dev/null 2>&1; then
    "${as[@]}" "$bindir/pg_ctl" -D "$data" -l "$dir/server.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories=$dir -c max_connections=200 -c fsync=off -c synchronous_commit=off" \
      start >/dev/null || { tail -20 "$dir/server.log" >&2; exit 1; }
  fi
  url
  ;;
stop)
  [ -f "$data/PG_VERSION" ] && "${as[@]}" "$bindir/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1 || true
  ;;
url)
  url
  ;;
*)
  echo "usage: scripts/postgres.sh start|stop|url [DIR]" >&2
  exit 2
  ;;
esac
