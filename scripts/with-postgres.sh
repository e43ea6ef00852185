#!/usr/bin/env bash
# Runs a command with $AVTGYM_POSTGRES_URL naming a PostgreSQL server, for
# make test: the one already named, or else a private cluster started here
# (scripts/postgres.sh, in a temporary directory, on a free loopback port)
# and stopped when the command ends. Without PostgreSQL installed the command
# runs without a server, and the tests that need one skip, except under CI
# (the CI variable set), where that is an error: CI installs PostgreSQL.
set -euo pipefail
if [ -n "${AVTGYM_POSTGRES_URL:-}" ]; then
  exec "$@"
fi
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/avtgym-pg-XXXXXX")
chmod 755 "$dir"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
if url=$(PGPORT=$port bash "$here/postgres.sh" start "$dir" 2>"$dir/start.err"); then
  trap 'bash "$here/postgres.sh" stop "$dir"; rm -rf "$dir"' EXIT
  export AVTGYM_POSTGRES_URL=$url
  echo "with-postgres: a private PostgreSQL cluster on 127.0.0.1:$port for this run" >&2
else
  reason=$(tail -1 "$dir/start.err")
  rm -rf "$dir"
  if [ -n "${CI:-}" ]; then
    echo "with-postgres: PostgreSQL is required under CI: $reason" >&2
    exit 1
  fi
  echo "with-postgres: no PostgreSQL ($reason); the tests that need it skip" >&2
fi
"$@"
