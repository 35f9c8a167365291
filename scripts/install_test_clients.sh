#!/usr/bin/env bash
# Installs the client libraries the end-to-end tests drive, from tests/clients/<name>/:
# - a package.json (with its committed package-lock.json): `npm ci`;
# - a requirements.txt: a virtualenv of its own in <name>/.venv (their pins may conflict with
#   the project's own requirements, e.g. instructor's jiter).
# Idempotent and fast when nothing changed: each directory keeps a stamp of what it installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

for dir in tests/clients/*/; do
    dir=${dir%/}
    if [ -f "$dir/package.json" ]; then
        stamp="$dir/node_modules/.ezat-installed"
        want=$(cat "$dir/package.json" "$dir/package-lock.json" | sha256sum | cut -d' ' -f1)
        if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
            echo "==> npm ci in $dir"
            (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
            echo "$want" > "$stamp"
        fi
    fi
    if [ -f "$dir/requirements.txt" ]; then
        stamp="$dir/.venv/.ezat-installed"
        want=$(sha256sum "$dir/requirements.txt" | cut -d' ' -f1)
        if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
            echo "==> virtualenv for $dir"
            [ -x "$dir/.venv/bin/python" ] || "$PYTHON" -m venv "$dir/.venv"
            "$dir/.venv/bin/python" -m pip install --quiet --disable-pip-version-check \
                -r "$dir/requirements.txt"
            echo "$want" > "$stamp"
        fi
    fi
done
