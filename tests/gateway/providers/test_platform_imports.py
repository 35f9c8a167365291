"""botocore and google-auth load only in a process that uses a Bedrock or Vertex deployment: a
worker serving only the Anthropic kind keeps its idle memory (bench/platforms.py measures it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

PROBE = """
import os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ezat.settings")
import django
django.setup()
import ezat.asgi  # the ASGI app, as a worker loads it
import gateway.exchange, gateway.upstream, gateway.walk, gateway.providers, catalog.snapshot
import catalog.platform_config, gateway.handlers.messages, gateway.handlers.chat
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("botocore", "google"))
print(",".join(loaded) or "none")
"""


def test_a_worker_without_bedrock_or_vertex_never_imports_their_libraries() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "none"
