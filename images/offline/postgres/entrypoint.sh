#!/bin/sh
# First start: a cluster in $PGDATA, password auth from anywhere, the user and database of the environment.
set -eu
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pw=$(mktemp); printf '%s' "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is not set}" > "$pw"
  initdb --username="${POSTGRES_USER:-postgres}" --pwfile="$pw" --auth=scram-sha-256 -D "$PGDATA" >/dev/null
  rm -f "$pw"
  echo "host all all 0.0.0.0/0 scram-sha-256" >> "$PGDATA/pg_hba.conf"
  if [ -n "${POSTGRES_DB:-}" ] && [ "$POSTGRES_DB" != postgres ]; then
    postgres --single -D "$PGDATA" postgres <<SQL >/dev/null
CREATE DATABASE "$POSTGRES_DB" OWNER "${POSTGRES_USER:-postgres}";
SQL
  fi
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories=/run/postgresql
