#!/bin/sh
# First start: a cluster in $PGDATA, password auth from anywhere, the user and the databases of the environment
# (POSTGRES_DB: one or more names separated by spaces).
set -eu
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pw=$(mktemp); printf '%s' "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is not set}" > "$pw"
  initdb --username="${POSTGRES_USER:-postgres}" --pwfile="$pw" --auth=scram-sha-256 -D "$PGDATA" >/dev/null
  rm -f "$pw"
  echo "host all all 0.0.0.0/0 scram-sha-256" >> "$PGDATA/pg_hba.conf"
  for db in ${POSTGRES_DB:-}; do  # one or more names, separated by spaces
    [ "$db" = postgres ] && continue
    echo "CREATE DATABASE \"$db\" OWNER \"${POSTGRES_USER:-postgres}\";" | postgres --single -D "$PGDATA" postgres >/dev/null
  done
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories=/run/postgresql
