#!/usr/bin/env bash
# `make run`: set up everything on the embedded default (SQLite, in-process limits, eager tasks)
# and start the gateway on :8000 in front of the simulator (or Anthropic if ANTHROPIC_API_KEY is set).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
PY=.venv/bin/python
PORT=${PORT:-8000}
SIM_PORT=${SIM_PORT:-8787}

echo "==> migrating the database and loading the catalog"
$PY manage.py migrate --noinput -v0
$PY manage.py load_catalog

if ! $PY manage.py balance demo >/dev/null 2>&1; then
    $PY manage.py create_org demo --credit-usd 100 >/dev/null
fi
KEY=$($PY manage.py create_key demo --name quickstart | tail -n 1)
$PY manage.py ensure_demo_users

SIM_PIDS=""
cleanup() { for pid in $SIM_PIDS; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM
# EZAT_SIM_PLATFORMS=anthropic,bedrock,vertex starts one simulator per platform (Bedrock with
# SigV4 keys, Vertex with a service-account key whose token endpoint is that simulator) and a
# deployment of each kind in front of them; failover goes across them.
PLATFORMS=${EZAT_SIM_PLATFORMS:-anthropic}
if [ -n "${ANTHROPIC_API_KEY:-}" ]; then
    $PY manage.py add_deployment anthropic --url https://api.anthropic.com --api-key "$ANTHROPIC_API_KEY" >/dev/null
    for name in simulator simulator-bedrock simulator-vertex; do
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
            *) $PY manage.py set_deployment "$name" --disable >/dev/null 2>&1 || true; continue ;;
        esac
        log=/tmp/ezat-simulator-$platform.log
        case $platform in
        anthropic)
            SIM_KEY=$($PY -c 'import secrets; print("sk-sim-" + secrets.token_urlsafe(16))')
            $PY -m gateway.simulator --port "$port" --api-key "$SIM_KEY" >"$log" 2>&1 &
            SIM_PIDS="$SIM_PIDS $!"
            $PY manage.py add_deployment "$name" --url "http://127.0.0.1:$port" --api-key "$SIM_KEY" >/dev/null
            ;;
        bedrock)
            KEY_ID=$($PY -c 'import secrets; print("AKIA" + secrets.token_hex(8).upper())')
            SECRET=$($PY -c 'import secrets; print(secrets.token_urlsafe(30))' | tr -- '-_' '+/')
            $PY manage.py simulator --platform bedrock --port "$port" --region us-east-1 \
                --aws-access-key-id "$KEY_ID" --aws-secret-access-key "$SECRET" >"$log" 2>&1 &
            SIM_PIDS="$SIM_PIDS $!"
            $PY manage.py add_deployment "$name" --kind bedrock --region us-east-1 \
                --url "http://127.0.0.1:$port" --aws-access-key-id "$KEY_ID" \
                --aws-secret-access-key "$SECRET" >/dev/null
            ;;
        vertex)
            SA="$STATE_DIR/vertex-service-account.json"
            rm -f "$SA"  # written afresh by the simulator, its token_uri pointing at it
            $PY manage.py simulator --platform vertex --port "$port" --project ezat-local \
                --region us-east5 --service-account-file "$SA" >"$log" 2>&1 &
            SIM_PIDS="$SIM_PIDS $!"
            for _ in $(seq 1 100); do [ -s "$SA" ] && break; sleep 0.1; done
            $PY manage.py add_deployment "$name" --kind vertex --project ezat-local \
                --region us-east5 --url "http://127.0.0.1:$port/v1" \
                --service-account-file "$SA" >/dev/null
            ;;
        esac
        UPSTREAM="$UPSTREAM $platform simulator on :$port;"
        port=$((port + 1))
    done
    UPSTREAM="$UPSTREAM (set ANTHROPIC_API_KEY to use Anthropic)"
fi

cat <<MSG

EZAT Router is starting on http://127.0.0.1:$PORT — upstream: $UPSTREAM

Your API key (shown once):
  $KEY

Try it:
  curl http://127.0.0.1:$PORT/v1/messages -H "x-api-key: $KEY" -H 'content-type: application/json' \\
    -d '{"model": "anthropic/claude-sonnet-5-5", "max_tokens": 64, "messages": [{"role": "user", "content": "Hello!"}]}'

With the openai SDK:
  from openai import OpenAI
  client = OpenAI(base_url="http://127.0.0.1:$PORT/openai/v1", api_key="$KEY")
  print(client.chat.completions.create(model="anthropic/claude-sonnet-5-5",
        messages=[{"role": "user", "content": "Hello!"}]).choices[0].message.content)

Dashboard: http://127.0.0.1:$PORT/dashboard/   Operator console: http://127.0.0.1:$PORT/admin/
(logins printed above by ensure_demo_users)
MSG

exec .venv/bin/uvicorn ezat.asgi:application --host 127.0.0.1 --port "$PORT" \
    --loop uvloop --http httptools --no-access-log
