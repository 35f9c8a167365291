"""Running real Celery workers and management commands as subprocesses against the test DB.

Data a subprocess must see has to be committed: tests using these helpers use pytest-django's
`transactional_db`. The subprocess reaches the same test database through a DATABASE_URL built
from `connection.settings_dict` (Postgres test DB, or the SQLite test file, which several
processes can share).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import redis
from celery import Celery
from django.conf import settings
from django.db import connection

from billing.reconcile import TEST_SLEEP_ENV
from tests import services

BASE_DIR = Path(settings.BASE_DIR)
TASK_NAME = "billing.tasks.reconcile_usage"
# A Redis database of its own for worker tests, so they never touch the app's queues.
BROKER_URL = services.redis_url(services.REDIS_DB_BROKER)
STARTUP_TIMEOUT = 60.0


class HarnessError(AssertionError):
    """A subprocess did not do what the test waited for; the message carries its log."""


def database_url() -> str:
    """DATABASE_URL of the database this test process uses (the test DB once set up)."""
    s = connection.settings_dict
    engine = s["ENGINE"]
    if engine == "django.db.backends.sqlite3":
        name = str(s["NAME"])
        if name == ":memory:" or name.startswith("file:"):
            raise HarnessError("subprocess tests need a file SQLite database, not in-memory")
        return f"sqlite:///{Path(name).resolve()}"
    if engine == "django.db.backends.postgresql":
        auth = quote(s["USER"] or "", safe="")
        if s["PASSWORD"]:
            auth += ":" + quote(s["PASSWORD"], safe="")
        host = s["HOST"] or "127.0.0.1"
        port = f":{s['PORT']}" if s["PORT"] else ""
        return f"postgres://{auth}@{host}{port}/{quote(s['NAME'], safe='')}"
    raise HarnessError(f"no DATABASE_URL form for {engine}")


def is_postgres() -> bool:
    return connection.vendor == "postgresql"


def subprocess_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != TEST_SLEEP_ENV}
    env.update(
        DATABASE_URL=database_url(),
        REDIS_URL=BROKER_URL,
        CELERY_BROKER_URL=BROKER_URL,
        CELERY_TASK_ALWAYS_EAGER="false",
        DJANGO_SETTINGS_MODULE="ezat.settings",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def manage(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """`python manage.py ARGS` against the test database, as an operator would run it."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=BASE_DIR,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def require_broker() -> None:
    """Worker tests need Redis; fail (never skip) with a clear message when it is missing."""
    try:
        redis.Redis.from_url(BROKER_URL, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        raise HarnessError(f"worker tests need a Redis broker at {BROKER_URL}: {exc}") from exc


class CeleryWorker:
    """`celery -A ezat worker` in its own session on one private queue, logging to a file."""

    def __init__(self, queue: str, log_path: Path, *, concurrency: int, env: dict[str, str]):
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "ezat",
                "worker",
                "-Q",
                queue,
                "-n",
                f"{log_path.stem}@%h",
                "-P",
                "prefork",
                "-c",
                str(concurrency),
                "-l",
                "INFO",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
            cwd=BASE_DIR,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            # Its own process group, so kill_all() takes the pool children with it.
            start_new_session=True,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(
        self, pattern: str, *, count: int = 1, timeout: float = 60.0
    ) -> list[re.Match[str]]:
        """The first `count` matches of `pattern` in the log, waiting for them to appear."""
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        while True:
            matches = list(regex.finditer(self.log()))
            if len(matches) >= count:
                return matches[:count]
            if self.proc.poll() is not None:
                raise HarnessError(f"worker exited ({self.proc.returncode}):\n{self.log()}")
            if time.monotonic() > deadline:
                raise HarnessError(f"{count}× {pattern!r} not seen in {timeout}s:\n{self.log()}")
            time.sleep(0.05)

    def kill_all(self, sig: signal.Signals = signal.SIGKILL) -> None:
        """Signal the whole worker (main process and pool children) and reap it."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass  # already gone between poll() and killpg()
        self.proc.wait(timeout=30)
        # Children of a killed group may outlive the leader by a moment; wait until none is left.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        self._log.close()


class WorkerPool:
    """Starts workers on one private queue and sends tasks to it through the real broker."""

    def __init__(self, tmp_path: Path):
        require_broker()
        self.queue = f"ezat-test-{uuid.uuid4().hex}"
        self.tmp_path = tmp_path
        self.workers: list[CeleryWorker] = []
        self.client = Celery("ezat-test-client", broker=BROKER_URL)
        # The workers' settings put EZAT_REDIS_PREFIX before every broker key (ezat/settings.py):
        # the client names the same queue only with the same prefix.
        self.client.conf.broker_transport_options = {"global_keyprefix": _broker_prefix()}

    def start(self, *, concurrency: int = 1, **env: str) -> CeleryWorker:
        worker = CeleryWorker(
            self.queue,
            self.tmp_path / f"worker{len(self.workers)}.log",
            concurrency=concurrency,
            env=subprocess_env(**env),
        )
        self.workers.append(worker)
        worker.wait_for(r"\bready\.", timeout=STARTUP_TIMEOUT)
        return worker

    def send(self, *, task_id: str | None = None, **kwargs: int) -> str:
        result = self.client.send_task(
            TASK_NAME, kwargs=kwargs, queue=self.queue, task_id=task_id or str(uuid.uuid4())
        )
        return str(result.id)

    def close(self) -> None:
        for worker in self.workers:
            worker.kill_all()
        self._drop_queue()
        self.client.close()

    def _drop_queue(self) -> None:
        """Leave nothing of ours in the broker (killed workers leave unacked messages behind)."""
        r = redis.Redis.from_url(BROKER_URL)
        p = _broker_prefix()
        # The queue, and the bindings of the direct exchange kombu named after it.
        r.delete(
            f"{p}{self.queue}",
            f"{p}_kombu.binding.{self.queue}",
            f"{p}_kombu.binding_permanent.{self.queue}",
        )
        for tag, raw in r.hscan_iter(f"{p}unacked"):
            try:
                routing_key = json.loads(raw)[2]
            except (ValueError, IndexError, TypeError):
                continue
            if routing_key == self.queue:
                r.hdel(f"{p}unacked", tag)
                r.zrem(f"{p}unacked_index", tag)
        r.close()


def _broker_prefix() -> str:
    from django.conf import settings

    return str(settings.EZAT_REDIS_PREFIX)


def succeeded_pattern(task_id: str) -> str:
    """Celery's success log line for `task_id`; group 1 is the task's return value (a dict)."""
    task = re.escape(f"{TASK_NAME}[{task_id}]")
    return rf"Task {task} succeeded in [^:]+: (\{{[^}}]*\}})"
