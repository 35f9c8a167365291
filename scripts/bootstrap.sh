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

# JavaScript clients the end-to-end tests drive (tests/clients/<name>/, each with its own
# package.json and committed package-lock.json). `npm ci` per folder, skipped while the lock file
# is unchanged (a stamp inside node_modules records the lock's hash). Without npm the real-client
# tests fail with a message saying so; the rest of the suite does not need it.
for lock in tests/clients/*/package-lock.json; do
    [ -f "$lock" ] || continue
    dir=$(dirname "$lock")
    want=$(sha256sum "$lock" | cut -d' ' -f1)
    if [ "$(cat "$dir/node_modules/.ezat-lock.sha" 2>/dev/null)" != "$want" ]; then
        if ! command -v npm >/dev/null 2>&1; then
            echo "==> npm not found: skipping $dir (its tests will fail until Node.js is installed)"
            continue
        fi
        echo "==> npm ci in $dir"
        (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) || exit 1
        echo "$want" > "$dir/node_modules/.ezat-lock.sha"
    fi
done
