"""Usage survives a database outage and a gateway crash (issue 13, item 2).

(a) A private PostgreSQL cluster is stopped for 10 s while SDK clients load a real gateway
    (uvicorn subprocess, embedded reconcile service, the simulator upstream): every answered
    request is billed exactly once afterwards (records spooled during the outage are replayed),
    nothing answers 500, a key the gateway has not cached gets 503 + `x-should-retry: true`.
(b) A gateway is SIGKILLed with open streams: the next process's sweeper bills each stream's
    delivered output once, from its last checkpoint, marked estimated.
`check_ledger` is clean after both.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest
from django.core.management import call_command

from simulator.testing import SimulatorThread
from tests.support.durable_support import (
    MODEL,
    Load,
    PrivatePostgres,
    base_id,
    durable_env,
    manage,
    seed,
    usage_rows,
    wait_for,
)
from tests.support.limits_billing_support import expected_cost_nano
from tests.support.stack import Stack, database_url, e2e_redis_url, start_gateway

pytestmark = pytest.mark.e2e

OUTAGE_SECONDS = 10.0


@pytest.fixture(params=["direct", "group"])
def usage_commit(request: pytest.FixtureRequest) -> str:
    """Each test runs with both ways of recording usage (EZAT_USAGE_COMMIT)."""
    return str(request.param)


def test_postgres_stopped_10s_under_load_every_answered_request_billed_exactly_once(
    tmp_path: Path, usage_commit: str
) -> None:
    pg = PrivatePostgres()
    sim = SimulatorThread(api_key="sk-sim-a").start()
    gateway = None
    load: Load | None = None
    try:
        manage(pg.url, "migrate", "--noinput")
        seeded = seed(pg.url, sim.url, keys=2)
        org_id = seeded["org_id"]
        cached_key, uncached_key = seeded["keys"]
        env = {
            **durable_env(tmp_path, usage_commit),
            "EZAT_RECONCILE_INTERVAL": "1",
            "CELERY_TASK_ALWAYS_EAGER": "true",
            # The key in use stays cached through the outage (the cache serves until its TTL).
            "EZAT_KEY_CACHE_TTL": "120",
            "EZAT_CATALOG_POLL_INTERVAL": "1",
            # group: at most two unflushed records in memory, so the outage spills records
            # to the log's segments only, read back when PostgreSQL returns.
            "EZAT_USAGE_LOG_MEMORY_RECORDS": "2",
        }
        gateway = start_gateway(pg.url, "", tmp_path, extra_env=env)
        marker = f"durable-outage-{uuid.uuid4().hex}"
        # Streams take a while, so some are in flight when the database goes away.
        sim.script({"match": marker, "event_delay": 0.05, "times": -1})
        load = Load(gateway.url, cached_key, marker)
        load.start(["anthropic", "anthropic-stream", "openai", "openai-stream"])
        wait_for(lambda: sum(o.status == 200 for o in load.outcomes) >= 12, 120, "warm-up")

        down_at = time.time()
        pg.stop()
        # A key the gateway has never seen cannot be checked: 503, retry, in the API's shape.
        refused = httpx.post(
            gateway.url + "/v1/messages",
            headers={"x-api-key": uncached_key, "anthropic-version": "2023-06-01"},
            json={"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]},
            timeout=30,
        )
        refused_chat = httpx.post(
            gateway.url + "/openai/v1/chat/completions",
            headers={"authorization": f"Bearer {uncached_key}"},
            json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]},
            timeout=30,
        )
        time.sleep(max(0.0, OUTAGE_SECONDS - (time.time() - down_at)))  # the outage itself
        pg.start()
        up_at = time.time()
        wait_for(
            lambda: sum(o.status == 200 and o.started > up_at for o in load.outcomes) >= 8,
            120,
            "requests answered after the outage",
        )
        load.finish()

        assert refused.status_code == 503, refused.text
        assert refused.headers["x-should-retry"] == "true"
        body = refused.json()
        assert body["type"] == "error" and body["error"]["type"] == "api_error"
        assert "database is unavailable" in body["error"]["message"]
        assert refused_chat.status_code == 503 and refused_chat.headers["x-should-retry"] == "true"
        assert "database is unavailable" in refused_chat.json()["error"]["message"]

        outcomes = list(load.outcomes)
        statuses = sorted({o.status for o in outcomes})
        server_errors = [o for o in outcomes if o.status >= 500 and o.status != 503]
        assert server_errors == [], server_errors[:3]
        answered = {o.request_id for o in outcomes if o.status == 200}
        during = [o for o in outcomes if o.status == 200 and o.ended > down_at and o.ended < up_at]
        # Answers went out while PostgreSQL was down: their records were spooled.
        assert len(during) >= 4, (statuses, len(during))
        assert {o.kind for o in during} == {
            "anthropic",
            "anthropic-stream",
            "openai",
            "openai-stream",
        }

        def billed() -> list[dict[str, Any]] | None:
            rows = usage_rows(pg.dsn(), org_id)
            have = {base_id(r["request_id"]) for r in rows}
            # Spooled files are in the folder of their database (billing/spool_owner.py).
            spooled = list((tmp_path / "spool").rglob("usage-*.jsonl"))
            return rows if answered <= have and not spooled else None

        rows = wait_for(billed, 120, "every answered request billed and the spool replayed")
        counts: dict[str, int] = {}
        for row in rows:
            counts[base_id(row["request_id"])] = counts.get(base_id(row["request_id"]), 0) + 1
        lost = len(answered - set(counts))
        double_billed = sum(1 for rid in answered if counts.get(rid, 0) > 1)
        print(  # the figures, for the run's log
            f"outage: {len(outcomes)} requests, {len(answered)} answered "
            f"({len(during)} while PostgreSQL was down), statuses {statuses}; "
            f"lost records {lost}, double-billed {double_billed}"
        )
        assert (lost, double_billed) == (0, 0), (lost, double_billed)
        assert all(r["cost_nano"] > 0 for r in rows)
        if usage_commit == "group":
            # The outage did spill: those rows came back from the segments on disk.
            assert _metric(gateway.url, "ezat_usage_log_spilled_total") > 0

        # The embedded reconcile service charges every record to the ledger, once.
        wait_for(
            lambda: all(r["ledger_entry_id"] for r in usage_rows(pg.dsn(), org_id)),
            120,
            "every record reconciled",
        )
        checked = manage(pg.url, "check_ledger", check=False)
        assert checked.returncode == 0, checked.stderr
        assert "no violations" in checked.stdout
    finally:
        if load is not None:
            load.finish()
        if gateway is not None:
            gateway.stop()
        sim.stop()
        pg.destroy()


# --- (b) a gateway killed with open streams ------------------------------------------------------
def _checkpoints(redis_url: str, directory: Path) -> list[dict[str, Any]]:
    """Every checkpoint any gateway process has written (Redis or files)."""
    if redis_url:
        import redis

        client = redis.Redis.from_url(redis_url)
        try:
            found = []
            for key in client.scan_iter(match="{ezat}:ckpt:*"):
                if key != b"{ezat}:ckpt:procs":
                    found.extend(orjson.loads(v) for v in client.hvals(key))
            return found
        finally:
            client.close()
    found = []
    for path in directory.glob("ckpt-*.json"):
        try:
            found.extend(orjson.loads(path.read_bytes()))
        except (FileNotFoundError, orjson.JSONDecodeError):
            continue  # replaced under us: read again on the next poll
    for path in directory.glob("ckpt-*.new"):  # first-token entries since the last snapshot
        try:
            lines = path.read_bytes().splitlines()
        except FileNotFoundError:
            continue
        for line in lines:
            try:
                found.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                continue  # a line being appended: read again on the next poll
    return found


class StreamReader(threading.Thread):
    """One SDK stream, read until its connection dies; counts what was delivered."""

    def __init__(self, url: str, secret: str, kind: str, text: str) -> None:
        super().__init__(daemon=True)
        self.url, self.secret, self.kind, self.text = url, secret, kind, text
        self.request_id = f"dur-kill-{kind}-{uuid.uuid4().hex}"
        self.chars = 0
        self.deltas = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        headers = {"x-request-id": self.request_id}
        messages = [{"role": "user", "content": self.text}]
        try:
            if self.kind == "anthropic":
                client = anthropic.Anthropic(base_url=self.url, api_key=self.secret, max_retries=0)
                with client.messages.stream(
                    model=MODEL, max_tokens=1000, messages=messages, extra_headers=headers
                ) as stream:
                    for text in stream.text_stream:
                        self.chars += len(text)
                        self.deltas += 1
            else:
                oc = openai.OpenAI(
                    base_url=self.url + "/openai/v1", api_key=self.secret, max_retries=0
                )
                for chunk in oc.chat.completions.create(
                    model=MODEL, max_tokens=1000, messages=messages, stream=True,
                    extra_headers=headers,
                ):  # fmt: skip
                    if chunk.choices and chunk.choices[0].delta.content:
                        self.chars += len(chunk.choices[0].delta.content)
                        self.deltas += 1
        except Exception as exc:
            self.error = exc


def test_gateway_sigkilled_with_open_streams_bills_delivered_output_once_estimated(
    stack: Stack, tmp_path: Path, usage_commit: str
) -> None:
    from django.db import connection

    from accounts.models import Organization
    from billing.models import UsageRecord
    from billing.reconcile import reconcile_all

    redis_url = e2e_redis_url()
    checkpoint_dir = Path(os.environ["EZAT_CHECKPOINT_DIR"])
    env = {**durable_env(tmp_path, usage_commit), "EZAT_CHECKPOINT_DIR": str(checkpoint_dir)}
    with stack.blocker.unblock():
        db_url = database_url(connection.settings_dict)
    key = stack.new_key()
    text = f"long answer durable-kill-{uuid.uuid4().hex}"
    # The full answer's output, for the upper bound (the reply depends only on the text).
    reference = anthropic.Anthropic(base_url=stack.url, api_key=key.secret, max_retries=0)
    full_output = reference.messages.create(
        model=MODEL, max_tokens=1000, messages=[{"role": "user", "content": text}]
    ).usage.output_tokens
    stack.sim.script({"match": text, "event_delay": 0.4, "times": -1})

    doomed = start_gateway(db_url, redis_url, tmp_path, extra_env=env)
    restarted = None
    readers = [
        StreamReader(doomed.url, key.secret, kind, text)
        for kind in ("anthropic", "anthropic", "openai", "openai")
    ]
    try:
        for reader in readers:
            reader.start()
        wait_for(lambda: all(r.deltas >= 3 for r in readers), 60, "every stream delivering")
        delivered = {r.request_id: r.chars for r in readers}

        def checkpointed() -> bool:
            seen = {
                c["request_id"]: c["tokens"]["output"]
                for c in _checkpoints(redis_url, checkpoint_dir)
            }
            return all(
                seen.get(rid, -1) >= math.ceil(chars / 4) for rid, chars in delivered.items()
            )

        # The checkpoint (at most once a second) has caught up with what was delivered.
        wait_for(checkpointed, 30, "checkpoints covering the delivered output", interval=0.1)
        assert all(r.is_alive() for r in readers), "a stream ended before the kill"
        os.kill(doomed.process.pid, signal.SIGKILL)
        doomed.process.wait(30)
        for reader in readers:
            reader.join(30)
        assert all(r.error is not None for r in readers)  # each stream was cut, unfinished

        # A new process's sweeper finds the dead one's checkpoints and bills them.
        restarted = start_gateway(db_url, redis_url, tmp_path, extra_env=env)
        ids = [r.request_id for r in readers]

        def records() -> list[Any] | None:
            rows = stack.usage(org_id=key.org_id, stream=True)
            return rows if {base_id(r.request_id) for r in rows} >= set(ids) else None

        wait_for(records, 60, "the dead gateway's streams billed")
        wait_for(
            lambda: (
                not [c for c in _checkpoints(redis_url, checkpoint_dir) if c["request_id"] in ids]
            ),
            60,
            "the dead process's checkpoints forgotten once billed",
        )
        rows = stack.usage(org_id=key.org_id, stream=True)
        per_id = {rid: [r for r in rows if base_id(r.request_id) == rid] for rid in ids}
        lost = sum(1 for found in per_id.values() if not found)
        double_billed = sum(1 for found in per_id.values() if len(found) > 1)
        print(  # the figures, for the run's log
            f"kill: {len(ids)} streams cut, lost records {lost}, double-billed {double_billed}, "
            f"delivered chars {sorted(delivered.values())}, "
            f"billed output tokens {sorted(r.output_tokens for r in rows if base_id(r.request_id) in ids)}"
        )
        assert (lost, double_billed) == (0, 0)
        for rid, (record,) in per_id.items():
            assert record.output_exact is False  # estimated, and says so
            assert record.attempts[-1]["outcome"] == "gateway_lost"
            # Delivered output is never free: at least what the client had received (4 chars
            # a token, the gateway's estimate), at most the whole answer.
            assert math.ceil(delivered[rid] / 4) <= record.output_tokens <= full_output
            assert record.cost_nano == expected_cost_nano(record) > 0

        with stack.blocker.unblock():
            reconcile_all()
            assert not UsageRecord.objects.filter(
                org_id=key.org_id, ledger_entry__isnull=True
            ).exists()
            org = Organization.objects.get(pk=key.org_id)
            call_command("check_ledger", "--org", org.name)  # raises on any violation
    finally:
        stack.sim.clear_script()
        if doomed.process.poll() is None:
            doomed.stop()
        if restarted is not None:
            restarted.stop()


# --- (c) a gateway killed a moment after a stream's first token --------------------------------
class FirstTokenReader(threading.Thread):
    """One anthropic-SDK stream: message_start's usage, the text delivered, when the first token
    arrived; read until the connection dies."""

    def __init__(self, url: str, secret: str, text: str) -> None:
        super().__init__(daemon=True)
        self.url, self.secret, self.text = url, secret, text
        self.request_id = f"dur-first-{uuid.uuid4().hex}"
        self.usage: dict[str, int] = {}
        self.chars = 0
        self.first_token_at: float | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        client = anthropic.Anthropic(base_url=self.url, api_key=self.secret, max_retries=0)
        try:
            with client.messages.stream(
                model=MODEL,
                max_tokens=1000,
                messages=[{"role": "user", "content": self.text}],
                extra_headers={"x-request-id": self.request_id},
            ) as stream:
                for event in stream:
                    if event.type == "message_start":
                        u = event.message.usage
                        self.usage = {
                            "input": u.input_tokens,
                            "cache_read": u.cache_read_input_tokens or 0,
                            "cache_write": u.cache_creation_input_tokens or 0,
                        }
                    elif event.type == "content_block_delta" and event.delta.type == "text_delta":
                        self.chars += len(event.delta.text)
                        if self.first_token_at is None:
                            self.first_token_at = time.monotonic()
        except Exception as exc:
            self.error = exc


def _metric(url: str, name: str) -> float:
    text = httpx.get(url + "/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} is missing from /metrics")


def _checkpoint_writes(url: str) -> float:
    return _metric(url, "ezat_checkpoint_writes_total")


def test_gateway_sigkilled_right_after_a_first_token_bills_it(
    stack: Stack, tmp_path: Path, usage_commit: str
) -> None:
    """Before the first periodic checkpoint (EZAT_CHECKPOINT_INTERVAL, 60 s here so it cannot
    happen), the stream's entry is already durable: written right after its first token."""
    from django.db import connection

    redis_url = e2e_redis_url()
    checkpoint_dir = Path(os.environ["EZAT_CHECKPOINT_DIR"])
    env = {
        **durable_env(tmp_path, usage_commit),
        "EZAT_CHECKPOINT_DIR": str(checkpoint_dir),
        "EZAT_CHECKPOINT_INTERVAL": "60",
    }
    with stack.blocker.unblock():
        db_url = database_url(connection.settings_dict)
    key = stack.new_key()
    text = f"long answer first-token-kill-{uuid.uuid4().hex}"
    # message_start, ping, content_block_start and the first delta; then silence.
    stack.sim.script({"match": text, "pause_after_events": 4, "pause": 60})
    doomed = start_gateway(db_url, redis_url, tmp_path, extra_env=env)
    restarted = None
    reader = FirstTokenReader(doomed.url, key.secret, text)
    try:
        reader.start()
        wait_for(lambda: reader.first_token_at is not None, 60, "the first token", interval=0.01)
        wait_for(
            lambda: any(
                c["request_id"] == reader.request_id
                for c in _checkpoints(redis_url, checkpoint_dir)
            ),
            10,
            "the first-token checkpoint",
            interval=0.01,
        )
        assert reader.first_token_at is not None
        writes = _checkpoint_writes(doomed.url)
        killed_after = time.monotonic() - reader.first_token_at
        os.kill(doomed.process.pid, signal.SIGKILL)
        doomed.process.wait(30)
        print(f"killed {killed_after:.3f} s after the first token; checkpoint writes {writes}")
        assert writes == 1  # the first-token write alone: no periodic one had happened
        reader.join(30)
        assert reader.error is not None  # the stream was cut, unfinished
        stack.sim.release()

        restarted = start_gateway(
            db_url, redis_url, tmp_path, extra_env={**env, "EZAT_CHECKPOINT_INTERVAL": "1"}
        )
        record = wait_for(
            lambda: next(iter(stack.usage(org_id=key.org_id)), None),
            60,
            "the killed stream billed from its first-token checkpoint",
        )
        assert [r.request_id for r in stack.usage(org_id=key.org_id)] == [reader.request_id]
        assert record.output_exact is False
        assert record.attempts[-1]["outcome"] == "gateway_lost"
        assert record.input_tokens == reader.usage["input"]
        assert record.cache_read_tokens == reader.usage["cache_read"]
        assert (
            record.cache_write_5m_tokens + record.cache_write_1h_tokens
            == (reader.usage["cache_write"])
        )
        # The first delta's text, 4 characters a token (at least message_start's placeholder 1).
        assert reader.chars > 0
        assert record.output_tokens == max(1, math.ceil(reader.chars / 4))
        assert record.cost_nano == expected_cost_nano(record) > 0
        print(f"billed {record.cost_nano} nano-USD for {record.output_tokens} output tokens")
    finally:
        stack.sim.clear_script()
        stack.sim.release()
        if doomed.process.poll() is None:
            doomed.stop()
        if restarted is not None:
            restarted.stop()


# --- (d) the spool cannot write either (disk full, unwritable) during a database outage ----------
def test_an_unwritable_spool_during_an_outage_holds_the_bill_and_refuses_new_work_with_503(
    tmp_path: Path, usage_commit: str
) -> None:
    """PostgreSQL is stopped while a stream is in flight, and the spool's directory cannot be
    created (its parent is a file). The stream still ends normally (no 500): its record is held
    in memory. New requests get 503 before any upstream call. When the disk is back the held
    record goes to the spool, requests are served again, and after the outage every answered
    request is billed exactly once."""
    pg = PrivatePostgres()
    sim = SimulatorThread(api_key="sk-sim-a").start()
    gateway = None
    try:
        manage(pg.url, "migrate", "--noinput")
        seeded = seed(pg.url, sim.url, keys=1)
        org_id, (secret,) = seeded["org_id"], seeded["keys"]
        blocked = tmp_path / "blocked"
        blocked.write_bytes(b"a file where the spool's directory should be")
        env = {
            **durable_env(tmp_path, usage_commit),
            "EZAT_USAGE_SPOOL_DIR": str(blocked / "spool"),
            "CELERY_TASK_ALWAYS_EAGER": "true",
            "EZAT_KEY_CACHE_TTL": "120",
        }
        gateway = start_gateway(pg.url, "", tmp_path, extra_env=env)
        client = anthropic.Anthropic(base_url=gateway.url, api_key=secret, max_retries=0)
        user = [{"role": "user", "content": "warm up"}]
        client.messages.create(model=MODEL, max_tokens=8, messages=user)  # the key is cached

        marker = f"long answer held-{uuid.uuid4().hex}"
        sim.script({"match": marker, "pause_after_events": 4, "pause": 60})
        done: dict[str, Any] = {}

        def read_stream() -> None:
            try:
                with client.messages.stream(
                    model=MODEL,
                    max_tokens=1000,
                    messages=[{"role": "user", "content": marker}],
                    extra_headers={"x-request-id": f"held-{marker[-32:]}"},
                ) as stream:
                    done["text"] = "".join(stream.text_stream)
            except Exception as exc:
                done["error"] = exc

        reader = threading.Thread(target=read_stream, daemon=True)
        reader.start()
        wait_for(lambda: sim.requests() and any(
            marker in str(r["body"]) for r in sim.requests()
        ), 60, "the stream in flight")  # fmt: skip
        pg.stop()
        sim.release()  # the stream runs to its end while neither store can take its record
        reader.join(60)
        assert "error" not in done, done.get("error")
        assert done["text"].startswith("Simulated long reply")

        # No upstream work is started for a request whose bill could not be kept.
        upstream_before = len(sim.requests())
        refused = httpx.post(
            gateway.url + "/v1/messages",
            headers={"x-api-key": secret, "anthropic-version": "2023-06-01"},
            json={"model": MODEL, "max_tokens": 8, "messages": user},
            timeout=30,
        )
        assert refused.status_code == 503, refused.text
        assert refused.headers["x-should-retry"] == "true"
        assert "cannot record usage" in refused.json()["error"]["message"]
        with pytest.raises(openai.APIStatusError) as raised:
            openai.OpenAI(
                base_url=gateway.url + "/openai/v1", api_key=secret, max_retries=0
            ).chat.completions.create(model=MODEL, max_tokens=8, messages=user)  # type: ignore[arg-type]
        assert raised.value.status_code == 503
        assert len(sim.requests()) == upstream_before
        metrics = httpx.get(gateway.url + "/metrics", timeout=10).text
        assert "ezat_usage_held_in_memory 1.0" in metrics

        # The disk is back (the database is not): the retry loop spools the held record and
        # requests are served again, their records spooled too.
        blocked.unlink()

        def served() -> str | None:
            response = httpx.post(
                gateway.url + "/v1/messages",
                headers={"x-api-key": secret, "anthropic-version": "2023-06-01"},
                json={"model": MODEL, "max_tokens": 8, "messages": user},
                timeout=30,
            )
            return response.headers["x-request-id"] if response.status_code == 200 else None

        after_id = wait_for(served, 60, "requests served once the spool can write", interval=0.5)

        pg.start()
        wanted = {f"held-{marker[-32:]}", after_id}

        def replayed() -> list[dict[str, Any]] | None:
            found = usage_rows(pg.dsn(), org_id)
            return found if wanted <= {base_id(r["request_id"]) for r in found} else None

        rows = wait_for(replayed, 120, "the held and the spooled records in the database")
        counts = [base_id(r["request_id"]) for r in rows]
        assert all(counts.count(rid) == 1 for rid in wanted), counts  # exactly once
        print(f"held then spooled then replayed: {sorted(wanted)}; rows {len(rows)}")
    finally:
        if gateway is not None:
            gateway.stop()
        sim.stop()
        pg.destroy()
