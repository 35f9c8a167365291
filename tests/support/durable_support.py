"""Helpers for the durable-usage fault tests: a private PostgreSQL cluster the test may stop
(never the shared server), seeding it through the project's own services in a subprocess, SDK
clients that keep a ledger of what was answered, and the billing checks on the private database.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import openai
import psycopg

from tests.services import ServiceError, free_port

ROOT = Path(__file__).resolve().parents[2]
PG_BIN = Path("/usr/local/bin")
MODEL = "anthropic/claude-sonnet-5-5"


class PrivatePostgres:
    """A throwaway cluster (initdb + pg_ctl, trust auth) on a free loopback port, in a temporary
    directory of its own. PostgreSQL refuses to run as root: under root (CI containers) the
    cluster runs as the `postgres` system user, which owns its directory."""

    def __init__(self) -> None:
        initdb = shutil.which("initdb") or str(PG_BIN / "initdb")
        self.pg_ctl = shutil.which("pg_ctl") or str(PG_BIN / "pg_ctl")
        if not Path(initdb).exists():
            raise ServiceError("the outage test needs PostgreSQL's initdb and pg_ctl on PATH")
        self.directory = Path(tempfile.mkdtemp(prefix="ezat-private-pg-"))
        self._as: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.directory, user.pw_uid, user.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        self.data = self.directory / "pgdata"
        self.log = self.directory / "postgres.log"
        self.port = free_port()
        self._run(initdb, "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self.start()
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute("CREATE DATABASE ezat")

    def _run(self, *args: str) -> None:
        result = subprocess.run(
            [*self._as, *args],
            capture_output=True,
            text=True,
            env={**os.environ, "LC_ALL": "C"},
            cwd=self.directory,
        )
        if result.returncode:
            raise ServiceError(f"{args[0]} failed: {result.stderr}{result.stdout}")

    def _ctl(self, *args: str) -> None:
        self._run(self.pg_ctl, "-D", str(self.data), *args)

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.directory} "
            "-c fsync=off -c max_connections=60"
        )
        self._ctl("-o", options, "-l", str(self.log), "-w", "-t", "60", "start")

    def stop(self) -> None:
        """A fast shutdown: every session is cut, new connections are refused."""
        self._ctl("-m", "fast", "-w", "-t", "60", "stop")

    def destroy(self) -> None:
        try:
            self._ctl("-m", "immediate", "-w", "stop")
        except ServiceError:
            pass  # already stopped
        shutil.rmtree(self.directory, ignore_errors=True)

    def dsn(self, name: str = "ezat") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/ezat"


def durable_env(tmp: Path, usage_commit: str = "direct") -> dict[str, str]:
    """A gateway's durability settings for these tests (spool, checkpoints, fast retries)."""
    return {
        "EZAT_USAGE_SPOOL_DIR": str(tmp / "spool"),
        "EZAT_CHECKPOINT_DIR": str(tmp / "checkpoints"),
        "EZAT_USAGE_SPOOL_RETRY_SECONDS": "1",
        "EZAT_CHECKPOINT_STALE_SECONDS": "3",
        "EZAT_USAGE_COMMIT": usage_commit,
    }


def manage(db_url: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": db_url, "REDIS_URL": "", "LOG_LEVEL": "WARNING"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=check,
        timeout=600,
    )


_SEED = """
import json
from decimal import Decimal
from accounts.services import create_api_key, create_org
from core.money import usd_to_nano
from billing.services import grant_credit
from catalog.models import Deployment
from catalog.services import load_catalog, upsert_deployment
load_catalog()
Deployment.objects.exclude(name="sim-a").delete()
upsert_deployment(name="sim-a", base_url=SIM_URL, api_key="sk-sim-a")
org = create_org(name="durable-org")
grant_credit(org=org, amount_nano=usd_to_nano(Decimal("100")), memo="durable test")
keys = [create_api_key(org=org, name=f"k{i}", rpm_limit=100000).secret for i in range(KEYS)]
print(json.dumps({"org_id": org.pk, "keys": keys}))
"""


def seed(db_url: str, sim_url: str, keys: int) -> dict[str, Any]:
    code = _SEED.replace("SIM_URL", repr(sim_url)).replace("KEYS", str(keys))
    out = manage(db_url, "shell", "-c", code).stdout
    return json.loads(out.strip().splitlines()[-1])


@dataclass
class Outcome:
    request_id: str
    kind: str
    started: float
    ended: float
    status: int  # 200 = answered in full (a stream to its end)
    should_retry: str | None = None
    error: str = ""


@dataclass
class Load:
    """SDK clients in threads, each in a loop of requests until stopped."""

    url: str
    secret: str
    marker: str
    outcomes: list[Outcome] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self, kinds: list[str]) -> None:
        for kind in kinds:
            thread = threading.Thread(target=self._loop, args=(kind,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def finish(self) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(120)

    def _loop(self, kind: str) -> None:
        anthropic_client = anthropic.Anthropic(
            base_url=self.url, api_key=self.secret, max_retries=0, timeout=60
        )
        openai_client = openai.OpenAI(
            base_url=self.url + "/openai/v1", api_key=self.secret, max_retries=0, timeout=60
        )
        while not self.stop.is_set():
            rid = f"dur-{kind}-{uuid.uuid4().hex}"
            started = time.time()
            outcome = Outcome(rid, kind, started, 0.0, 0)
            try:
                self._call(kind, rid, anthropic_client, openai_client)
                outcome.status = 200
            except (anthropic.APIStatusError, openai.APIStatusError) as exc:
                outcome.status = exc.status_code
                outcome.should_retry = exc.response.headers.get("x-should-retry")
                outcome.error = str(exc)[:300]
            except (anthropic.APIError, openai.APIError) as exc:
                outcome.status = -1  # connection-level: not answered
                outcome.error = repr(exc)[:300]
            outcome.ended = time.time()
            with self._lock:
                self.outcomes.append(outcome)

    def _call(self, kind: str, rid: str, ac: anthropic.Anthropic, oc: openai.OpenAI) -> None:
        headers = {"x-request-id": rid}
        text = f"{self.marker} {rid}"
        if kind == "anthropic":
            ac.messages.create(
                model=MODEL,
                max_tokens=200,
                messages=[{"role": "user", "content": text}],
                extra_headers=headers,
            )
        elif kind == "anthropic-stream":
            with ac.messages.stream(
                model=MODEL,
                max_tokens=200,
                messages=[{"role": "user", "content": text}],
                extra_headers=headers,
            ) as stream:
                for _ in stream.text_stream:
                    pass
                stream.get_final_message()  # raises if the stream did not end properly
        elif kind == "openai":
            oc.chat.completions.create(
                model=MODEL,
                max_tokens=200,
                messages=[{"role": "user", "content": text}],
                extra_headers=headers,
            )
        elif kind == "openai-stream":
            finished = False
            for chunk in oc.chat.completions.create(
                model=MODEL,
                max_tokens=200,
                messages=[{"role": "user", "content": text}],
                stream=True,
                stream_options={"include_usage": True},
                extra_headers=headers,
            ):
                if chunk.choices and chunk.choices[0].finish_reason:
                    finished = True
            if not finished:
                raise openai.APIConnectionError(request=None)  # type: ignore[arg-type]
        else:
            raise AssertionError(kind)


def usage_rows(dsn: str, org_id: int) -> list[dict[str, Any]]:
    with psycopg.connect(dsn) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        cur.execute(
            "SELECT request_id, output_exact, output_tokens, cost_nano, ledger_entry_id, attempts"
            " FROM billing_usagerecord WHERE org_id = %s",
            (org_id,),
        )
        return list(cur.fetchall())


def base_id(request_id: str) -> str:
    """A record's request id without the suffix a reused caller id gets."""
    return request_id.split("~", 1)[0]


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except psycopg.OperationalError:
            last = None
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last: {last!r})")
