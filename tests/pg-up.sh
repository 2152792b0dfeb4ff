#!/usr/bin/env bash
# Make sure a local PostgreSQL server runs on 127.0.0.1:5432 with the test role and database:
# role gpu_kpi (password gpu_kpi, LOGIN CREATEDB) owning database gpu_kpi_test.
# Idempotent; returns at once when the server already answers for that role.
# Without PostgreSQL installed it says so and exits 0: the PostgreSQL tests then skip (fail in CI).
set -euo pipefail

HOST=127.0.0.1
PORT=5432
ROLE=gpu_kpi
PASSWORD=gpu_kpi
DB=gpu_kpi_test

can_login() {
    PGPASSWORD=$PASSWORD PGCONNECT_TIMEOUT=3 psql -h "$HOST" -p "$PORT" -U "$ROLE" -d "$DB" \
        -tAqc 'SELECT 1' >/dev/null 2>&1
}

if command -v psql >/dev/null 2>&1 && can_login; then
    exit 0
fi

if ! command -v pg_lsclusters >/dev/null 2>&1; then
    echo "pg-up: PostgreSQL is not installed (no pg_lsclusters); PostgreSQL tests will be skipped"
    exit 0
fi

as_postgres() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        sudo -n -u postgres -- "$@"
    fi
}

# The cluster that serves $PORT, else the newest installed version's "main".
read -r version cluster status < <(
    pg_lsclusters --no-header | awk -v port="$PORT" '$3 == port {print $1, $2, $4; exit}'
) || true
if [ -z "${version:-}" ]; then
    version=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
    cluster=main
    echo "pg-up: creating cluster $version/$cluster on port $PORT"
    pg_createcluster --port "$PORT" "$version" "$cluster" >/dev/null
    status=down
fi
if [ "$status" != online ]; then
    echo "pg-up: starting PostgreSQL $version/$cluster"
    pg_ctlcluster "$version" "$cluster" start
fi

for _ in $(seq 1 50); do
    pg_isready -q -h "$HOST" -p "$PORT" && break
    sleep 0.2
done
pg_isready -q -h "$HOST" -p "$PORT" || { echo "pg-up: server on $HOST:$PORT not ready" >&2; exit 1; }

as_postgres psql -p "$PORT" -v ON_ERROR_STOP=1 -qX <<SQL
DO \$\$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$ROLE') THEN
        CREATE ROLE $ROLE LOGIN CREATEDB PASSWORD '$PASSWORD';
    ELSE
        ALTER ROLE $ROLE LOGIN CREATEDB PASSWORD '$PASSWORD';
    END IF;
END
\$\$;
SQL
if [ -z "$(as_postgres psql -p "$PORT" -tAXc "SELECT 1 FROM pg_database WHERE datname = '$DB'")" ]; then
    as_postgres createdb -p "$PORT" -O "$ROLE" "$DB"
fi

if ! can_login; then
    echo "pg-up: cannot log in as $ROLE to $DB on $HOST:$PORT (check pg_hba.conf)" >&2
    exit 1
fi
echo "pg-up: PostgreSQL ready at postgresql://$ROLE:***@$HOST:$PORT/$DB"
