"""`python -m ezat.serve`: start the gateway's ASGI server with the right number of workers.

How many worker processes (`EZAT_WORKERS`, read like every setting through django-environ, the
environment first, then the checkout's `.env`):

- unset, `REDIS_URL` set (the production shape: the Docker image, `make run` with `REDIS_URL`):
  one worker per core this process may use (CPU affinity, capped by a cgroup CPU quota such as
  `docker run --cpus`). Limits, concurrency caps, holds and counters live in Redis, which every
  worker shares, so more workers add throughput without loosening any limit.
- unset, no `REDIS_URL` (the embedded default): one worker. There the limiter's windows, caps
  and holds live in the worker's memory; N workers would each allow the full RPM and the full
  concurrency cap, N times over. An explicit `EZAT_WORKERS` above 1 without Redis is refused.
- set: that many (1–64).

On SIGTERM each worker drains first (ezat/graceful.py: /readyz 503 at once, open streams
finish within EZAT_SHUTDOWN_GRACE_SECONDS). The server is uvicorn (uvloop + httptools): the
benchmark measured granian at more CPU per request in every cell (bench/README.md, "Other
servers"). Arguments after `--` go to uvicorn's own CLI unchanged (then without the drain
and the batched accept of core/accept.py).

    python -m ezat.serve [--host H] [--port P] [--dry-run] [-- extra uvicorn args]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Mapping
from pathlib import Path

MAX_WORKERS = 64
BASE_DIR = Path(__file__).resolve().parent.parent


class ServeError(ValueError):
    """A worker setting the server refuses; the message names the setting."""


def usable_cpus(cgroup_root: Path = Path("/sys/fs/cgroup")) -> int:
    """CPUs this process may run on, capped by a cgroup v2 quota (`cpu.max`, e.g. docker --cpus)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    try:
        quota, period = (cgroup_root / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return max(1, cpus)
    if quota != "max" and int(period) > 0:
        cpus = min(cpus, math.ceil(int(quota) / int(period)))
    return max(1, cpus)


def worker_count(env: Mapping[str, str], cpus: int) -> int:
    """How many workers to start for these settings (see the module docstring)."""
    redis = bool(env.get("REDIS_URL", "").strip())
    raw = env.get("EZAT_WORKERS", "").strip()
    if not raw:
        return min(cpus, MAX_WORKERS) if redis else 1
    try:
        workers = int(raw)
    except ValueError:
        raise ServeError(f"EZAT_WORKERS must be a whole number, got {raw!r}") from None
    if not 1 <= workers <= MAX_WORKERS:
        raise ServeError(f"EZAT_WORKERS must be between 1 and {MAX_WORKERS}, got {workers}")
    if workers > 1 and not redis:
        raise ServeError(
            f"EZAT_WORKERS={workers} needs REDIS_URL: without Redis the limits live in each "
            "worker's memory, so every worker would allow the full RPM and concurrency cap"
        )
    return workers


def settings_env() -> dict[str, str]:
    """The environment as the settings module sees it: the process first, then `.env`."""
    import environ

    env_file = BASE_DIR / ".env"
    if env_file.exists():
        environ.Env.read_env(env_file, overwrite=False)  # what ezat/settings.py does
    return dict(os.environ)


def command(
    host: str, port: int, workers: int, extra: list[str], app: str = "ezat.asgi:application"
) -> list[str]:
    """uvicorn's own command line with the production options (the benchmark also runs other
    ASGI apps with it)."""
    return [
        sys.executable,
        "-m",
        "uvicorn",
        app,
        "--host",
        host,
        "--port",
        str(port),
        "--loop",
        "uvloop",
        "--http",
        "httptools",
        "--no-access-log",
        "--no-proxy-headers",  # the gateway reads X-Forwarded-For itself (EZAT_TRUSTED_PROXIES)
        "--workers",
        str(workers),
        *extra,
    ]


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(prog="python -m ezat.serve", description=__doc__)
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--dry-run", action="store_true", help="print the command and exit")
    args = parser.parse_args(argv)
    try:
        workers = worker_count(settings_env(), usable_cpus())
    except ServeError as exc:
        sys.exit(f"ezat.serve: {exc}")
    cmd = command(args.host, args.port, workers, extra)
    print(f"ezat.serve: {workers} worker(s): {' '.join(cmd[2:])}", file=sys.stderr, flush=True)
    if args.dry_run:
        print(" ".join(cmd))
        return
    if extra:
        # Options for uvicorn itself: its own CLI, without the graceful drain on SIGTERM and
        # the batched accept.
        os.execv(cmd[0], cmd)
    from ezat import graceful

    # The same server and options in this process, draining on SIGTERM (ezat/graceful.py).
    graceful.run(args.host, args.port, workers)


if __name__ == "__main__":
    main()
