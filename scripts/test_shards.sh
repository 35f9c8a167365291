#!/usr/bin/env bash
# The whole suite as parallel shards: one pytest process per shard, started together, each over
# whole test directories (the end-to-end one split by file name) in the suite's own order, each with its own test database
# (`EZAT_TEST_SHARD` names it, tests/services.py) and its own private Redis (every pytest
# process starts one). Fails when any shard fails or collects nothing.
#
# Why shards of whole directories, not pytest-xdist: the suite is mostly waiting (on gateway
# subprocesses, simulators, Celery workers, browsers), so on a 2-core machine two or three
# processes finish in well under the serial time. But xdist hands out files in an order of its
# own, and several suites legitimately share their session's database with committed data (the
# e2e stack seeds the catalog once per session; transactional tests count what is committed).
# A shard of whole directories (or files) runs its tests in the order a one-process run gives them (pytest's
# collection order, then pytest-django's stable sort by database use): a subsequence of that run,
# and exactly what an engineer gets from `pytest tests/<dir>`.
#
# Balance (measured: artifacts/junit-<shard>.xml holds every test's time): the end-to-end suite
# is the largest; the benchmark smoke tests, the quickstart and the browser tests are long and
# mostly wait, so they share a shard. Every directory not named below lands in the last shard,
# so a new directory is never left out.
set -uo pipefail
cd "$(dirname "$0")/.."

# The end-to-end directory is split by file name in three (it is the largest, and the fallback
# lab alone takes minutes); each part starts a stack (gateway, simulators) of its own. The
# benchmark smoke, browser and foundation tests are long and mostly wait: they share a shard,
# with the instruction-count guard (tests/bench/test_icount_guard.py: ~15 s of CPU under
# valgrind, one process, the rest of the shard waiting meanwhile).
# The topologies (tests/cluster: three gateways behind HAProxy with Prometheus; tests/infra: a
# Redis Cluster and PgBouncer) take minutes each, waiting on their processes: a shard of their own.
declare -a NAMES=(e2e-a e2e-m e2e-n slow topology)
declare -A DIRS=(
    [e2e-a]="tests/e2e/test_[a-l]*.py"
    [e2e-m]="tests/e2e/test_m*.py"
    [e2e-n]="tests/e2e/test_[n-z]*.py"
    [slow]="tests/bench tests/browser tests/foundation"
    [topology]="tests/cluster tests/infra"
)
covered=" tests/e2e tests/bench tests/browser tests/foundation tests/cluster tests/infra "
rest=()
for dir in tests/*/; do
    dir=${dir%/}
    case "$covered" in *" $dir "*) continue ;; esac
    [ "$dir" = tests/clients ] && continue  # client projects the e2e tests drive, not tests
    compgen -G "$dir/test_*.py" >/dev/null || compgen -G "$dir/**/test_*.py" >/dev/null || continue
    rest+=("$dir")
done
NAMES+=(rest)
DIRS[rest]="${rest[*]}"

# Every e2e file is in exactly one part (a new file named outside the patterns would be skipped).
# shellcheck disable=SC2086
parts=$(ls ${DIRS[e2e-a]} ${DIRS[e2e-m]} ${DIRS[e2e-n]} | sort)
if [ "$parts" != "$(ls tests/e2e/test_*.py | sort)" ]; then
    echo "FATAL: the e2e shards' patterns do not cover tests/e2e/test_*.py exactly once" >&2
    exit 1
fi

# Job control on: a non-interactive shell starts background jobs with SIGINT ignored, and the
# suite's Ctrl-C tests (the simulator's CLI, `make run`) would then inherit a deaf SIGINT. Each
# shard also gets a process group of its own, which stop_shards ends as a whole.
set -m
declare -A PIDS=()
started=$(date +%s)
for name in "${NAMES[@]}"; do
    log="artifacts/test-$name.log"
    echo "==> shard $name started: ${DIRS[$name]} (log: $log)"
    # The topology shard needs PostgreSQL: on the embedded default (DATABASE_URL unset)
    # tests/with_postgres.py finds the local server or starts a throwaway one, and says which;
    # with neither, those tests skip with that reason (and fail in CI, tests/services.py).
    wrap=()
    [ "$name" = topology ] && wrap=(.venv/bin/python -m tests.with_postgres)
    # shellcheck disable=SC2086
    EZAT_TEST_SHARD=$name "${wrap[@]}" .venv/bin/python -m pytest ${DIRS[$name]} -p no:cacheprovider \
        --junitxml="artifacts/junit-$name.xml" >"$log" 2>&1 &
    PIDS[$name]=$!
done

stop_shards() {
    for pid in "${PIDS[@]}"; do kill -- "-$pid" 2>/dev/null || true; done
}
trap 'stop_shards; exit 130' INT
trap 'stop_shards; exit 143' TERM

# Progress while the shards run (the suite takes minutes): each shard's test count once pytest
# has collected, a line with every running shard's percentage each minute, and each shard's
# result line as soon as it finishes (not in start order).
percent() { grep -oE '\[ *[0-9]+%\]' "artifacts/test-$1.log" 2>/dev/null | tail -n 1 | tr -d '[] '; }
summary() {
    grep -E '^=+ .*(passed|failed|error|skipped|deselected|no tests ran).* in [0-9.]+s' \
        "artifacts/test-$1.log" 2>/dev/null | tail -n 1 | tr -d '='
}
declare -A STATUS=() COUNTED=()
last_progress=$started
while [ ${#STATUS[@]} -lt ${#NAMES[@]} ]; do
    for name in "${NAMES[@]}"; do
        [ -n "${STATUS[$name]:-}" ] && continue
        if [ -z "${COUNTED[$name]:-}" ]; then
            collected=$(grep -m 1 -oE 'collected [0-9]+ items?( / [0-9]+ deselected)?' \
                "artifacts/test-$name.log" 2>/dev/null || true)
            if [ -n "$collected" ]; then
                echo "==> shard $name: $collected"
                COUNTED[$name]=1
            fi
        fi
        if ! kill -0 "${PIDS[$name]}" 2>/dev/null; then
            status=0
            wait "${PIDS[$name]}" || status=$?
            STATUS[$name]=$status
            echo "==> shard $name finished (exit $status, $(( $(date +%s) - started )) s):$(summary "$name")"
        fi
    done
    now=$(date +%s)
    if [ $(( now - last_progress )) -ge 60 ] && [ ${#STATUS[@]} -lt ${#NAMES[@]} ]; then
        line=""
        for name in "${NAMES[@]}"; do
            [ -n "${STATUS[$name]:-}" ] && continue
            done_part=$(percent "$name")
            line="$line $name ${done_part:-0%}"
        done
        echo "... $(( now - started )) s:$line"
        last_progress=$now
    fi
    [ ${#STATUS[@]} -lt ${#NAMES[@]} ] && sleep 1
done

failed=()
for name in "${NAMES[@]}"; do
    status=${STATUS[$name]}
    echo
    echo "==================== shard $name (exit $status)"
    cat "artifacts/test-$name.log"
    if [ "$status" -eq 5 ]; then
        echo "shard $name collected no tests: failing" >&2
    fi
    [ "$status" -ne 0 ] && failed+=("$name")
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "==> failed shards: ${failed[*]}" >&2
    exit 1
fi
echo "==> all shards passed in $(( $(date +%s) - started )) s"
