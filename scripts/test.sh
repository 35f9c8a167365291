#!/usr/bin/env bash
# `make test`: the whole suite. Uses DATABASE_URL / REDIS_URL when set (CI: PostgreSQL + Redis),
# else the embedded default. pytest's "no tests collected" (exit 5) is a failure.
#
# With no arguments the suite runs as parallel shards (scripts/test_shards.sh says why and how);
# with arguments (`make test ARGS...` or `bash scripts/test.sh tests/unit -k foo`) it is one
# plain pytest run over what was asked for. EZAT_TEST_SHARDS=1 runs the whole suite in one process.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh || exit 1
bash scripts/install_test_clients.sh || exit 1
if [ ! -x /usr/bin/chromium ]; then
    echo "==> installing Debian's chromium for the browser tests"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
        || { echo "chromium is required for the browser tests (apt-get install chromium)"; exit 1; }
fi
if [ ! -x /usr/sbin/haproxy ] || [ ! -x /usr/bin/prometheus ] || [ ! -x /usr/bin/docker-compose ] \
    || [ ! -x /usr/sbin/pgbouncer ]; then
    # docker-compose (1.29, Debian's) only parses docker/compose.yml (`docker-compose config`,
    # tests/unit/test_compose_scaleout.py); `docker compose` v2 is not packaged here.
    echo "==> installing Debian's haproxy, prometheus, pgbouncer and docker-compose for the cluster, infra and compose tests"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends haproxy prometheus pgbouncer docker-compose >/dev/null) \
        || { echo "haproxy, prometheus, pgbouncer and docker-compose are required for the cluster, infra and compose tests (apt-get install haproxy prometheus pgbouncer docker-compose)"; exit 1; }
fi
mkdir -p artifacts
.venv/bin/ruff check . || exit 1

if [ $# -eq 0 ] && [ "${EZAT_TEST_SHARDS:-on}" != "1" ]; then
    exec bash scripts/test_shards.sh
fi

.venv/bin/python -m pytest "$@"
status=$?
if [ $status -eq 5 ]; then
    echo "pytest collected no tests: failing" >&2
    exit 1
fi
exit $status
