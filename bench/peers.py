"""Peer gateways for `python -m bench.run --peers litellm,portkey`: install, configure, start.

Each peer lives in its own environment under `bench/.peers/<name>/` (gitignored), installed on
first use from the public registries at pinned versions, and speaks OpenAI Chat Completions to
the run's fake upstream through its Anthropic provider, like EZAT's `/openai/v1/chat/completions`.

- LiteLLM proxy (PyPI `litellm[proxy]`), one worker, a model list naming the fake upstream.
- Portkey's gateway (npm `@portkey-ai/gateway`) on Node; `@hono/node-server` is pinned to 1.13.x
  through npm `overrides`: 1.19.x breaks its streaming with `TypeError: immutable`.

    python -m bench.peers install litellm,portkey     # install only (what the run does first)
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from bench.procs import REPO, UPSTREAM_KEY, BenchError, Procs, free_port, wait_http
from ezat.serve import command as serve_command

PEERS_DIR = REPO / "bench" / ".peers"
LITELLM_VERSION = "1.108.7"
PORTKEY_VERSION = "1.15.2"
HONO_NODE_SERVER = "1.13.8"  # newest 1.13.x; 1.19.x breaks Portkey's streams (TypeError: immutable)
MODEL = "anthropic/claude-sonnet-5-5"  # what the load generator asks for
REPEAT_LIMIT = 1_000_000
# The model id the peers send upstream; the fake upstream answers any.
UPSTREAM_MODEL = "claude-sonnet-5-5"


@dataclass(frozen=True)
class Peer:
    name: str
    version: str
    source: str  # what the report says about where it came from
    extra_headers: tuple[tuple[str, str], ...] = field(default=())
    path: str = "/v1/chat/completions"


def _run(cmd: list[str], cwd: Path, what: str, timeout: float = 900) -> None:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise BenchError(
            f"{what} failed ({done.returncode}):\n"
            f"{done.stdout.decode(errors='replace')[-2000:]}"
            f"{done.stderr.decode(errors='replace')[-3000:]}"
        )


# --- LiteLLM --------------------------------------------------------------------------------------
def litellm_dir() -> Path:
    return PEERS_DIR / f"litellm-{LITELLM_VERSION}"


def install_litellm() -> Path:
    """A venv with litellm[proxy]==LITELLM_VERSION; returns its `litellm` executable."""
    root = litellm_dir()
    exe = root / "venv" / "bin" / "litellm"
    marker = root / "installed"
    if marker.exists() and exe.exists():
        return exe
    root.mkdir(parents=True, exist_ok=True)
    _run([sys.executable, "-m", "venv", str(root / "venv")], root, "python -m venv (litellm)")
    pip = str(root / "venv" / "bin" / "pip")
    _run([pip, "install", "-q", f"litellm[proxy]=={LITELLM_VERSION}"], root, "pip install litellm")
    if not exe.exists():
        raise BenchError(f"litellm installed but {exe} is missing")
    marker.write_text(LITELLM_VERSION)
    return exe


def start_litellm(procs: Procs, up_port: int, cpu: int | None) -> tuple[int, int, str]:
    """Start the LiteLLM proxy (one worker); returns (port, pid, API key)."""
    exe = install_litellm()
    cfg = procs.tmp / "litellm.json"  # YAML is a superset of JSON
    key = "sk-bench-litellm"
    cfg.write_text(
        json.dumps(
            {
                "model_list": [
                    {
                        "model_name": MODEL,
                        "litellm_params": {
                            "model": f"anthropic/{UPSTREAM_MODEL}",
                            "api_base": f"http://127.0.0.1:{up_port}",
                            "api_key": UPSTREAM_KEY,
                        },
                    }
                ],
                "general_settings": {"master_key": key},
                "litellm_settings": {"telemetry": False, "drop_params": True},
            }
        )
    )
    port = free_port()
    env = _clean_env(procs)
    # The fake upstream streams the same text delta every time; LiteLLM would stop such a stream
    # after 100 identical chunks ("The model is repeating the same chunk"). Its check still runs.
    env.update(
        LITELLM_LOG="ERROR",
        LITELLM_TELEMETRY="False",
        DISABLE_ADMIN_UI="True",
        REPEATED_STREAMING_CHUNK_LIMIT=str(REPEAT_LIMIT),
    )
    cmd = [str(exe), "--config", str(cfg), "--host", "127.0.0.1", "--port", str(port),
           "--num_workers", "1"]  # fmt: skip
    proc = procs.spawn("litellm", cmd, env=env, cpu=cpu)
    wait_http(f"http://127.0.0.1:{port}/health/liveliness", proc, procs, "litellm", timeout=180)
    return port, proc.pid, key


# --- Portkey --------------------------------------------------------------------------------------
def portkey_dir() -> Path:
    return PEERS_DIR / f"portkey-{PORTKEY_VERSION}"


def install_portkey() -> Path:
    """npm install @portkey-ai/gateway with @hono/node-server overridden; returns its entry."""
    root = portkey_dir()
    entry = root / "node_modules" / "@portkey-ai" / "gateway" / "build" / "start-server.js"
    marker = root / "installed"
    if marker.exists() and entry.exists():
        return entry
    npm = shutil.which("npm")
    if npm is None:
        raise BenchError("--peers portkey needs node and npm on PATH")
    root.mkdir(parents=True, exist_ok=True)
    package = {
        "name": "ezat-bench-portkey",
        "private": True,
        "dependencies": {"@portkey-ai/gateway": PORTKEY_VERSION},
        "overrides": {"@hono/node-server": HONO_NODE_SERVER},
    }
    (root / "package.json").write_text(json.dumps(package, indent=2))
    _run([npm, "install", "--no-audit", "--no-fund", "--omit=dev"], root, "npm install portkey")
    if not entry.exists():
        found = sorted((root / "node_modules" / "@portkey-ai" / "gateway").glob("build/*.js"))
        raise BenchError(f"portkey installed but {entry} is missing (build/: {found[:10]})")
    marker.write_text(PORTKEY_VERSION)
    return entry


def installed_version(root: Path, package: str) -> str:
    meta = root / "node_modules" / package / "package.json"
    return json.loads(meta.read_text())["version"] if meta.exists() else "?"


def start_portkey(procs: Procs, up_port: int, cpu: int | None) -> tuple[int, int, str]:
    entry = install_portkey()
    node = shutil.which("node") or "node"
    port = free_port()
    proc = procs.spawn(
        "portkey",
        [node, str(entry), f"--port={port}", "--headless"],
        env=_clean_env(procs),
        cpu=cpu,
    )
    wait_http(f"http://127.0.0.1:{port}/", proc, procs, "portkey", timeout=60)
    return port, proc.pid, UPSTREAM_KEY


def portkey_headers(up_port: int) -> tuple[tuple[str, str], ...]:
    return (
        ("x-portkey-provider", "anthropic"),
        ("x-portkey-custom-host", f"http://127.0.0.1:{up_port}/v1"),
    )


def _clean_env(procs: Procs) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "REDIS_URL"))}
    env["HOME"] = str(procs.tmp)  # caches and telemetry files land in the run's temp dir
    return env


def start_floor(procs: Procs, up_port: int, cpu: int | None) -> tuple[int, int, str]:
    """bench/floor_proxy.py on uvicorn with EZAT's options (uvloop, httptools, one worker)."""
    port = free_port()
    cmd = serve_command("127.0.0.1", port, 1, ["--backlog", "4096"], app="bench.floor_proxy:app")
    env = _clean_env(procs)
    env.update(FLOOR_UPSTREAM=f"http://127.0.0.1:{up_port}", FLOOR_UPSTREAM_KEY=UPSTREAM_KEY)
    proc = procs.spawn("floor", cmd, env=env, cpu=cpu)
    wait_http(f"http://127.0.0.1:{port}/", proc, procs, "floor", timeout=60)
    return port, proc.pid, "none"


def describe(names: list[str]) -> list[str]:
    """What the report says about the peers' provenance."""
    lines = [
        f"LiteLLM proxy {LITELLM_VERSION}: `pip install 'litellm[proxy]=={LITELLM_VERSION}'` "
        "into "
        f"`{litellm_dir().relative_to(REPO)}/venv`, `--num_workers 1`, "
        f"`REPEATED_STREAMING_CHUNK_LIMIT={REPEAT_LIMIT}` (the fake upstream repeats one delta).",
        f"Portkey gateway {PORTKEY_VERSION}: "
        f"`npm install @portkey-ai/gateway@{PORTKEY_VERSION}` in "
        f"`{portkey_dir().relative_to(REPO)}` with npm `overrides` pinning `@hono/node-server` "
        f"to {HONO_NODE_SERVER} (installed: "
        f"{installed_version(portkey_dir(), '@hono/node-server')}); 1.19.x breaks its streaming "
        "with `TypeError: immutable`.",
    ]
    lines.append(
        "floor: `bench/floor_proxy.py`, a Python ASGI proxy with no framework, auth, limits, "
        "billing or logs, on uvicorn with EZAT's options (uvloop, httptools, one worker): what "
        "any Python gateway on this server costs at least (issue 22, item 3)."
    )
    return [
        line
        for line, name in zip(lines, ("litellm", "portkey", "floor"), strict=True)
        if name in names
    ]


INSTALLERS = {"litellm": install_litellm, "portkey": install_portkey}


def main(argv: list[str] | None = None) -> None:
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 2 or args[0] != "install":
        sys.exit("usage: python -m bench.peers install litellm,portkey")
    for name in args[1].split(","):
        print(f"{name}: {INSTALLERS[name]()}")


if __name__ == "__main__":
    main()
