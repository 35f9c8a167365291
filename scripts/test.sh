#!/usr/bin/env bash
# `make test`: the whole suite. Uses DATABASE_URL / REDIS_URL when set (CI: PostgreSQL + Redis),
# else the embedded default. pytest's "no tests collected" (exit 5) is a failure.
#
# With no arguments the suite runs as parallel shards (scripts/test_shards.sh says why and how);
# with arguments (`make test ARGS...` or `bash scripts/test.sh tests/billing -k foo`) it is one
# plain pytest run over what was asked for. EZAT_TEST_SHARDS=1 runs the whole suite in one process.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh || exit 1
bash scripts/install_test_clients.sh || exit 1
# System packages for the browser, cluster, infra, compose and instruction-count tests (Debian's). Missing ones are
# named first, then installed with apt-get when this user can (root); EZAT_TEST_INSTALL=0 never
# installs. Without them the suite still runs: those tests skip, each with its reason in the
# summary (tests/services.py MissingTool). In CI (CI set) a package that is still missing is a
# failure, so CI never passes by skipping.
strict=0
case "${EZAT_TEST_STRICT:-${CI:-}}" in "" | 0 | false | no) ;; *) strict=1 ;; esac
missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -x /usr/sbin/haproxy ] || missing+=(haproxy)
[ -x /usr/bin/prometheus ] || missing+=(prometheus)
[ -x /usr/sbin/pgbouncer ] || missing+=(pgbouncer)
# docker-compose (1.29, Debian's) only parses docker/compose.yml (`docker-compose config`,
# tests/foundation/test_compose_scaleout.py); `docker compose` v2 is not packaged here.
[ -x /usr/bin/docker-compose ] || missing+=(docker-compose)
# valgrind: the instruction-count guard (tests/bench/test_icount_guard.py, bench/icount.py).
[ -x /usr/bin/valgrind ] || missing+=(valgrind)
if [ ${#missing[@]} -gt 0 ]; then
    echo "==> the browser, cluster, infra and compose tests use Debian packages missing here: ${missing[*]}"
    if [ "${EZAT_TEST_INSTALL:-1}" = "0" ]; then
        echo "    not installing them (EZAT_TEST_INSTALL=0)"
    elif [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
        echo "    not installing them (that needs root and apt-get): sudo apt-get install ${missing[*]}"
    else
        echo "    installing them now: apt-get install --no-install-recommends ${missing[*]} (EZAT_TEST_INSTALL=0 skips this)"
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends "${missing[@]}" >/dev/null) \
            && missing=() || echo "    the install failed"
    fi
    if [ ${#missing[@]} -gt 0 ]; then
        if [ $strict = 1 ]; then
            echo "FATAL: CI must run every test, and ${missing[*]} is missing" >&2
            exit 1
        fi
        echo "    the tests that need ${missing[*]} will be skipped, each with its reason in the summary"
    fi
fi
mkdir -p artifacts
.venv/bin/ruff check . || exit 1

if [ $# -eq 0 ] && [ "${EZAT_TEST_SHARDS:-on}" != "1" ]; then
    exec bash scripts/test_shards.sh
fi

# tests/cluster and tests/infra need PostgreSQL: asked for on the embedded default, the run
# gets one from tests/with_postgres.py (the local server or a throwaway one), as the shards do.
wrap=()
case " $* " in *" tests/cluster"* | *" tests/infra"*) wrap=(.venv/bin/python -m tests.with_postgres) ;; esac
"${wrap[@]}" .venv/bin/python -m pytest "$@"
status=$?
if [ $status -eq 5 ]; then
    echo "pytest collected no tests: failing" >&2
    exit 1
fi
exit $status
