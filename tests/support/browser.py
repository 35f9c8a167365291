"""The browser tests' fixtures (a pytest plugin, loaded by tests/conftest.py for every
directory: the browser tests live with their app, tests/dashboard and tests/playground).

A running EZAT Router (uvicorn, the production ASGI app) in front of the upstream simulator,
driven by a real headless Debian Chromium through Playwright.

The server shares the pytest-django test database: data is created outside test transactions
(committed, visible to the server process), as the end-to-end tests do. Names carry a unique
suffix so these rows never collide with other tests in the same session.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import services
from tests.support.stack import database_url, free_port

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
PASSWORD = "browser-pass-2468"
SIM_KEY = "sk-sim-browser-" + secrets.token_hex(4)

EXPECT_MS = 30_000  # Playwright's waits: generous for a loaded 2-core box
SERVER_ENV = {
    # Plain http on 127.0.0.1: cookies must not be Secure-only, and the app serves /static/.
    "SESSION_COOKIE_SECURE": "false",
    "CSRF_COOKIE_SECURE": "false",
    "EZAT_SERVE_STATIC": "true",
    "DEBUG": "false",
    # One process: the live feed's in-memory channel layer and the gateway share it.
    "REDIS_URL": "",
    "EZAT_KEY_CACHE_TTL": "0.5",
    "EZAT_CATALOG_POLL_INTERVAL": "0.5",
    "LOG_LEVEL": "WARNING",
    # Alert webhooks to the tests' receiver on 127.0.0.1 (test-only switch).
    "EZAT_WEBHOOK_ALLOW_LOOPBACK": "true",
}


def require_chromium() -> None:
    """The browser tests need Debian's chromium. Checked when a test asks for the app or the
    browser (this module is a plugin every run loads, tests/conftest.py): a missing one is a
    MissingTool, which the suite reports as a skip with this reason, and as a failure in CI."""
    if not Path(CHROMIUM).exists():  # pragma: no cover - depends on the machine
        raise services.MissingTool(
            "the browser tests need Debian's chromium (apt-get install chromium; scripts/test.sh "
            "offers to install it)"
        )


def _wait_for(url: str, process: subprocess.Popen[bytes], log: Path, what: str) -> None:
    deadline = time.monotonic() + 120  # a loaded 2-core box
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited early:\n{log.read_text(errors='replace')[-4000:]}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not start:\n{log.read_text(errors='replace')[-4000:]}")


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        args, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()


@dataclass
class App:
    url: str
    org_id: int
    org_name: str
    seed_cost_nano: int  # what the org's seeded usage costs once reconciled
    customer: str  # username of the org's owner
    operator: str  # username of a superuser
    blocker: Any
    log: Path

    def server_log(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def _seed(suffix: str, sim_url: str) -> tuple[int, str, int]:
    """Catalog, the simulator as deployment, an operator, and the session's customer org."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    call_command("load_catalog", verbosity=0)
    call_command("add_deployment", "sim", url=sim_url, api_key=SIM_KEY, verbosity=0)
    get_user_model().objects.create_superuser(f"operator-{suffix}", password=PASSWORD)
    return seed_org(suffix)


def seed_org(suffix: str) -> tuple[int, str, int]:
    """A customer org (owner `customer-<suffix>`) with $10 credit and two weeks of usage.
    Returns its id, its name and what the seeded usage costs (charged when the server's
    reconciliation gets to it)."""
    from django.contrib.auth import get_user_model
    from django.db import transaction
    from django.utils import timezone

    from accounts import services
    from billing.models import UsageRecord
    from billing.request_log import mirror_usage
    from billing.services import grant_credit

    customer = get_user_model().objects.create_user(f"customer-{suffix}", password=PASSWORD)
    org = services.create_org(name=f"Browser Co {suffix}")
    services.add_member(org=org, user=customer, role="owner")
    grant_credit(org=org, amount_nano=10_000_000_000, memo="welcome credit")
    seed_key = services.create_api_key(org=org, name="batch-jobs", created_by=customer).key
    prices = {
        "input": "3",
        "output": "15",
        "cacheRead": "0.3",
        "cacheWrite5m": "3.75",
        "cacheWrite1h": "6",
    }
    now = timezone.now()
    cost = 0
    # One transaction: the running server's reconciliation sees the seeded usage all at once or
    # not at all. Row by row, a loaded CI run reconciled part of it first, and the balance page
    # showed a ledger balance between "before" and "after" ($35.22).
    with transaction.atomic():
        for day in range(1, 14):
            for n, model in enumerate(("anthropic/claude-sonnet-5-5", "anthropic/claude-opus-5-5")):
                if model.endswith("opus-5-5") and day % 3:
                    continue
                record = UsageRecord.objects.create(
                    request_id=f"req_seed_{suffix}_{day}_{n}",
                    org=org,
                    api_key=seed_key,
                    api="chat",
                    model_id=model,
                    model_name=model.split("/")[1],
                    deployment="sim",
                    input_tokens=2000 + 300 * day,
                    output_tokens=400 + 40 * day,
                    cache_read_tokens=5000 * (day % 4),
                    cost_nano=(9 + day) * 1_000_000 * (n + 1),
                    prices=prices,
                    started_at=now - timedelta(days=day),
                    latency_ms=300 + day * 20,
                    attempts=[{"deployment": "sim", "outcome": "ok"}],
                )
                UsageRecord.objects.filter(pk=record.pk).update(
                    created_at=now - timedelta(days=day)
                )
                mirror_usage(record, created_at=now - timedelta(days=day))
                cost += record.cost_nano
    return org.pk, org.name, cost


@pytest.fixture(scope="session")
def app(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[App]:
    from django.db import connection

    require_chromium()
    tmp = tmp_path_factory.mktemp("browser")
    suffix = f"{os.getpid()}{secrets.token_hex(2)}"
    sim_port, app_port = free_port(), free_port()
    env = {**os.environ, **SERVER_ENV}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    sim_log = tmp / "simulator.log"
    simulator = _start(
        [sys.executable, "-m", "simulator", "--port", str(sim_port), "--api-key", SIM_KEY],
        env,
        sim_log,
    )
    server: subprocess.Popen[bytes] | None = None
    try:
        sim_url = f"http://127.0.0.1:{sim_port}"
        _wait_for(sim_url + "/", simulator, sim_log, "simulator")
        with django_db_blocker.unblock():
            org_id, org_name, seed_cost = _seed(suffix, sim_url)
            env["DATABASE_URL"] = database_url(connection.settings_dict)
        log = tmp / "server.log"
        server = _start(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "ezat.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(app_port),
                "--no-access-log",
            ],
            env,
            log,
        )
        url = f"http://127.0.0.1:{app_port}"
        _wait_for(url + "/healthz", server, log, "server")
        yield App(
            url=url,
            org_id=org_id,
            org_name=org_name,
            seed_cost_nano=seed_cost,
            customer=f"customer-{suffix}",
            operator=f"operator-{suffix}",
            blocker=django_db_blocker,
            log=log,
        )
    finally:
        if server is not None:
            _stop(server)
        _stop(simulator)


@pytest.fixture(scope="module")
def browser(app: App) -> Iterator[Any]:
    """Depends on `app` on purpose: Playwright's sync API runs an event loop in this thread, and
    Django refuses ORM calls while one runs, so every database write must happen before.

    Module-scoped so that loop stops when the browser tests end: left running for the session,
    every later test would see "a running event loop" (asyncio.run and the ORM refuse to work).
    """
    from playwright.sync_api import sync_playwright

    require_chromium()
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def new_page(browser: Any, width: int = 1320, height: int = 900) -> Any:
    context = browser.new_context(viewport={"width": width, "height": height})
    context.set_default_timeout(EXPECT_MS)
    return context.new_page()


@pytest.fixture
def own_app(app: App) -> App:
    """The app with a customer org of this test's own: a test that reads money or counts must
    not see what other tests (or the server's reconciliation of their usage) did.

    Seeded from another thread: Playwright's event loop runs in this one, and Django refuses
    ORM calls from a thread with a running loop.
    """
    suffix = f"{os.getpid()}{secrets.token_hex(3)}"

    def seed() -> tuple[int, str, int]:
        from django.db import connection

        try:
            with app.blocker.unblock():
                return seed_org(suffix)
        finally:
            connection.close()

    with ThreadPoolExecutor(1) as pool:
        org_id, org_name, cost = pool.submit(seed).result()
    return dataclasses.replace(
        app,
        org_id=org_id,
        org_name=org_name,
        seed_cost_nano=cost,
        customer=f"customer-{suffix}",
    )


@pytest.fixture
def own_customer_page(browser: Any, own_app: App) -> Iterator[Any]:
    page = new_page(browser)
    sign_in(page, own_app, own_app.customer)
    yield page
    page.context.close()


@pytest.fixture
def customer_page(browser: Any, app: App) -> Iterator[Any]:
    page = new_page(browser)
    sign_in(page, app, app.customer)
    yield page
    page.context.close()


@pytest.fixture
def operator_page(browser: Any, app: App) -> Iterator[Any]:
    page = new_page(browser, width=1700)  # the admin's change lists are wide
    page.goto(app.url + "/admin/login/")
    page.fill("#id_username", app.operator)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")
    yield page
    page.context.close()


def sign_in(page: Any, app: App, username: str) -> None:
    page.goto(app.url + "/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url("**/dashboard/")


def shot(page: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
