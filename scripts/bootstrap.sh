#!/usr/bin/env bash
# Shared set-up for the quickstart and the test runner: a virtualenv with the pinned requirements
# and a local .env with a generated SECRET_KEY. Idempotent; fast when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "==> creating .venv"
    "$PYTHON" -m venv .venv
fi
stamp=.venv/.requirements.sha
want=$(sha256sum requirements.txt | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "==> installing requirements"
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -r requirements.txt
    echo "$want" > "$stamp"
fi

if [ ! -f .env ]; then
    echo "==> writing .env with a generated SECRET_KEY"
    key=$(.venv/bin/python -c 'import secrets; print(secrets.token_urlsafe(50))')
    cat > .env <<ENV
# Written by scripts/bootstrap.sh for this checkout. Real deployments use the environment.
SECRET_KEY=$key
# Plain-http localhost: cookies without the Secure flag, static files served by the app.
SESSION_COOKIE_SECURE=false
CSRF_COOKIE_SECURE=false
EZAT_SERVE_STATIC=true
ENV
fi
