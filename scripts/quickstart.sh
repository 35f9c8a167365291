#!/usr/bin/env bash
# `make run`: set up everything on the embedded default (SQLite, in-process limits, eager tasks)
# and start the gateway on :8000 in front of the simulator (or Anthropic if ANTHROPIC_API_KEY is set).
#
# Re-runnable: ports are checked before anything starts (naming the process holding one); the
# simulator and uvicorn are children of this script, never exec'd over it, and the trap stops
# them on every exit (Ctrl-C, TERM, HUP, an error); logs go to var/log/; the logins and the API
# key are in var/demo-credentials.txt (mode 600), printed on every run; each run replaces the
# previous run's quickstart key instead of adding one.
#
# Each run enables exactly the deployments it prints and disables the other quickstart ones
# (`anthropic`, `simulator`, `simulator-bedrock`, `simulator-vertex`), whatever an earlier run
# left: add_deployment updates an existing deployment but never re-enables one (an operator's
# --disable must survive a credential update), so the run enables its own explicitly.
# EZAT_QUICKSTART_SETUP_ONLY=1 stops after that set-up (the database, the key, the deployments)
# without starting the gateway: tests/foundation/test_quickstart_deployments.py uses it.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${PORT:-8000}
SIM_PORT=${SIM_PORT:-8787}
VAR_DIR=${VAR_DIR:-var}
CREDENTIALS=$VAR_DIR/demo-credentials.txt
LOGS=$VAR_DIR/log

# EZAT_SIM_PLATFORMS=anthropic,bedrock,vertex starts one simulator per platform (Bedrock with
# SigV4 keys, Vertex with a service-account key whose token endpoint is that simulator) and a
# deployment of each kind in front of them; failover goes across them.
PLATFORMS=${EZAT_SIM_PLATFORMS:-anthropic}
ports=("PORT=$PORT")
if [ -z "${ANTHROPIC_API_KEY:-}" ]; then  # one simulator port per platform, from SIM_PORT up
    n=0
    for platform in anthropic bedrock vertex; do
        case ",$PLATFORMS," in *",$platform,"*) n=$((n + 1)) ;; esac
    done
    ports+=("SIM_PORT=$SIM_PORT:$n")
fi
python3 scripts/check_ports.py "${ports[@]}" || exit 1

bash scripts/bootstrap.sh
PY=.venv/bin/python
mkdir -p "$LOGS"

CHILDREN=()
cleanup() {
    local status=$?
    trap - EXIT INT TERM HUP
    if [ ${#CHILDREN[@]} -gt 0 ]; then
        kill -TERM "${CHILDREN[@]}" 2>/dev/null || true
        for pid in "${CHILDREN[@]}"; do  # bounded: a child that ignores TERM gets KILL
            for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -KILL "$pid" 2>/dev/null || true
        done
        wait 2>/dev/null || true
        echo "==> stopped"
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

echo "==> migrating the database and loading the catalog"
$PY manage.py migrate --noinput -v0
$PY manage.py load_catalog

if ! $PY manage.py balance demo >/dev/null 2>&1; then
    $PY manage.py create_org demo --credit-usd 100 >/dev/null
fi
KEY=$($PY manage.py create_key demo --name quickstart --replace | tail -n 1)
$PY manage.py ensure_demo_users --credentials "$CREDENTIALS" --api-key "$KEY"

if [ -n "${ANTHROPIC_API_KEY:-}" ]; then
    $PY manage.py add_deployment anthropic --url https://api.anthropic.com --api-key "$ANTHROPIC_API_KEY" >/dev/null
    $PY manage.py set_deployment anthropic --enable >/dev/null
    for name in simulator simulator-openai simulator-bedrock simulator-vertex; do
        $PY manage.py set_deployment "$name" --disable >/dev/null 2>&1 || true
    done
    UPSTREAM="Anthropic (api.anthropic.com)"
else
    $PY manage.py set_deployment anthropic --disable >/dev/null 2>&1 || true
    UPSTREAM=""
    STATE_DIR=${EZAT_SIM_STATE_DIR:-.ezat-sim}
    mkdir -p "$STATE_DIR" && chmod 700 "$STATE_DIR"
    port=$SIM_PORT
    for platform in anthropic bedrock vertex; do
        name=simulator; [ "$platform" = anthropic ] || name="simulator-$platform"
        case ",$PLATFORMS," in
            *",$platform,"*) ;;
            *) $PY manage.py set_deployment "$name" --disable >/dev/null 2>&1 || true
               [ "$platform" = anthropic ] && { $PY manage.py set_deployment simulator-openai --disable >/dev/null 2>&1 || true; }
               continue ;;
        esac
        log=$LOGS/simulator.log; [ "$platform" = anthropic ] || log=$LOGS/simulator-$platform.log
        case $platform in
        anthropic)
            SIM_KEY=$($PY -c 'import secrets; print("sk-sim-" + secrets.token_urlsafe(16))')
            $PY -m simulator --port "$port" --api-key "$SIM_KEY" >"$log" 2>&1 &
            CHILDREN+=($!)
            $PY manage.py add_deployment "$name" --url "http://127.0.0.1:$port" --api-key "$SIM_KEY" >/dev/null
            # The same simulator's OpenAI-compatible front serves a GPT-like model (its
            # made-up prices are the simulator's, catalog/data/simulator_models.json).
            $PY manage.py load_catalog --file catalog/data/simulator_models.json >/dev/null
            $PY manage.py add_deployment simulator-openai --kind openai \
                --url "http://127.0.0.1:$port/v1" --api-key "$SIM_KEY" --model simulator/gpt-sim >/dev/null
            $PY manage.py set_deployment simulator-openai --enable >/dev/null
            ;;
        bedrock)
            KEY_ID=$($PY -c 'import secrets; print("AKIA" + secrets.token_hex(8).upper())')
            SECRET=$($PY -c 'import secrets; print(secrets.token_urlsafe(30))' | tr -- '-_' '+/')
            $PY manage.py simulator --platform bedrock --port "$port" --region us-east-1 \
                --aws-access-key-id "$KEY_ID" --aws-secret-access-key "$SECRET" >"$log" 2>&1 &
            CHILDREN+=($!)
            $PY manage.py add_deployment "$name" --kind bedrock --region us-east-1 \
                --url "http://127.0.0.1:$port" --aws-access-key-id "$KEY_ID" \
                --aws-secret-access-key "$SECRET" >/dev/null
            ;;
        vertex)
            SA="$STATE_DIR/vertex-service-account.json"
            rm -f "$SA"  # written afresh by the simulator, its token_uri pointing at it
            $PY manage.py simulator --platform vertex --port "$port" --project ezat-local \
                --region us-east5 --service-account-file "$SA" >"$log" 2>&1 &
            CHILDREN+=($!)
            for _ in $(seq 1 300); do [ -s "$SA" ] && break; sleep 0.1; done
            $PY manage.py add_deployment "$name" --kind vertex --project ezat-local \
                --region us-east5 --url "http://127.0.0.1:$port/v1" \
                --service-account-file "$SA" >/dev/null
            ;;
        esac
        $PY manage.py set_deployment "$name" --enable >/dev/null
        UPSTREAM="$UPSTREAM $platform simulator on :$port (log $log);"
        port=$((port + 1))
    done
    UPSTREAM="$UPSTREAM (set ANTHROPIC_API_KEY to use Anthropic)"
fi

if [ "${EZAT_QUICKSTART_SETUP_ONLY:-0}" = "1" ]; then
    echo "==> set up; not starting the gateway (EZAT_QUICKSTART_SETUP_ONLY=1): upstream:$UPSTREAM"
    exit 0
fi

cat <<MSG

EZAT Router is starting on http://127.0.0.1:$PORT — upstream: $UPSTREAM

Credentials ($CREDENTIALS, mode 600):
$(sed -e '/^#/d' -e 's/^/  /' "$CREDENTIALS")

Try it:
  curl http://127.0.0.1:$PORT/v1/messages -H "x-api-key: $KEY" -H 'content-type: application/json' \\
    -d '{"model": "anthropic/claude-sonnet-5-5", "max_tokens": 64, "messages": [{"role": "user", "content": "Hello!"}]}'

With the openai SDK:
  from openai import OpenAI
  client = OpenAI(base_url="http://127.0.0.1:$PORT/openai/v1", api_key="$KEY")
  print(client.chat.completions.create(model="anthropic/claude-sonnet-5-5",
        messages=[{"role": "user", "content": "Hello!"}]).choices[0].message.content)
  (model="gpt-sim" is a GPT-like model on the simulator's OpenAI-compatible front, without an
  ANTHROPIC_API_KEY; docs/providers.md puts a real OpenAI, vLLM or Ollama model there.)

Dashboard: http://127.0.0.1:$PORT/dashboard/   Operator console: http://127.0.0.1:$PORT/admin/
Stop with Ctrl-C (the simulator stops with it).
MSG

# Not exec'd: this shell stays to run the trap. uvicorn runs in the background so the shell
# can take signals while it waits. ezat.serve execs uvicorn in the same process: one worker on
# the embedded default, one per core when REDIS_URL is set (EZAT_WORKERS overrides).
$PY -m ezat.serve --host 127.0.0.1 --port "$PORT" &
CHILDREN+=($!)
wait "${CHILDREN[-1]}"
