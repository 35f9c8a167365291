#!/usr/bin/env bash
# The whole suite as parallel shards: one pytest process per shard, started together, each over
# the test files tests/shards.py assigns it, in the suite's own order, each with its own test
# database (`EZAT_TEST_SHARD` names it, tests/services.py) and its own private Redis (every
# pytest process starts one). Fails when any shard fails or collects nothing, or when the
# shard table does not put every test file in exactly one shard.
#
# Why shards of whole files, not pytest-xdist: the suite is mostly waiting (on gateway
# subprocesses, simulators, Celery workers, browsers), so on a 2-core machine a few processes
# finish in well under the serial time. But xdist hands out tests in an order of its own, and
# several suites legitimately share their session's database with committed data (the e2e
# stack seeds the catalog once per session; transactional tests count what is committed). A
# shard of whole files runs its tests in the order a one-process run gives them (pytest's
# collection order, then pytest-django's stable sort by database use): a subsequence of that
# run. The tests mirror the product's tree (docs/testing.md), so a shard is a list of files
# (tests/shards.py: which, and the measured balance), not a directory.
set -uo pipefail
cd "$(dirname "$0")/.."

# The shard table (tests/shards.py) is checked first: every test file in exactly one shard.
.venv/bin/python -m tests.shards check || exit 1
mapfile -t NAMES < <(.venv/bin/python -m tests.shards names)
declare -A FILES=()
for name in "${NAMES[@]}"; do
    FILES[$name]=$(.venv/bin/python -m tests.shards files "$name" | tr '\n' ' ')
done

# Job control on: a non-interactive shell starts background jobs with SIGINT ignored, and the
# suite's Ctrl-C tests (the simulator's CLI, `make run`) would then inherit a deaf SIGINT. Each
# shard also gets a process group of its own, which stop_shards ends as a whole.
set -m
declare -A PIDS=()
started=$(date +%s)
for name in "${NAMES[@]}"; do
    log="artifacts/test-$name.log"
    echo "==> shard $name started: $(wc -w <<<"${FILES[$name]}") files (log: $log)"
    # The topology shard needs PostgreSQL: on the embedded default (DATABASE_URL unset)
    # tests/with_postgres.py finds the local server or starts a throwaway one, and says which;
    # with neither, those tests skip with that reason (and fail in CI, tests/services.py).
    wrap=()
    [ "$name" = topology ] && wrap=(.venv/bin/python -m tests.with_postgres)
    # shellcheck disable=SC2086
    EZAT_TEST_SHARD=$name "${wrap[@]}" .venv/bin/python -m pytest ${FILES[$name]} -p no:cacheprovider \
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
