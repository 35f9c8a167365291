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

SIM_PID=""
cleanup() { [ -n "$SIM_PID" ] && kill "$SIM_PID" 2>/dev/null || true; }
trap cleanup EXIT INT TERM
if [ -n "${ANTHROPIC_API_KEY:-}" ]; then
    $PY manage.py add_deployment anthropic --url https://api.anthropic.com --api-key "$ANTHROPIC_API_KEY" >/dev/null
    $PY manage.py set_deployment simulator --disable >/dev/null 2>&1 || true
    UPSTREAM="Anthropic (api.anthropic.com)"
else
    SIM_KEY=$($PY -c 'import secrets; print("sk-sim-" + secrets.token_urlsafe(16))')
    $PY -m gateway.simulator --port "$SIM_PORT" --api-key "$SIM_KEY" >/tmp/ezat-simulator.log 2>&1 &
    SIM_PID=$!
    $PY manage.py add_deployment simulator --url "http://127.0.0.1:$SIM_PORT" --api-key "$SIM_KEY" >/dev/null
    $PY manage.py set_deployment anthropic --disable >/dev/null 2>&1 || true
    UPSTREAM="the simulator on :$SIM_PORT (set ANTHROPIC_API_KEY to use Anthropic)"
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
