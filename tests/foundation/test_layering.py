"""Imports between the apps point one way: down the layers below (docs/design.md, "Dependencies between
the apps"). A back-edge fails this test, naming the file, the line and the two layers; so does
an app importing another app's views (only the URLconfs do).

Every `import` and `from … import` counts, wherever it is: at the top, inside a function (lazy
imports are still dependencies) or under `if TYPE_CHECKING:`. Relative imports are resolved.
Migrations are left out: they are generated, and must not change.

An AST walk rather than import-linter: the rule is one table and forty lines, needs no new
dependency, and `ezat` has to be split by module (its shared helpers are the lowest layer, its
URLconfs and ASGI entry point the highest), which this table says directly.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "core",
    "ezat",
    "catalog",
    "accounts",
    "billing",
    "gateway",
    "alerts",
    "playground",
    "simulator",
)

# Lowest first. A module belongs to the layer of its longest matching prefix. Within a layer
# marked independent, its packages do not import each other either.
LAYERS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    # money, template filters, CLI parsing, audit, DB and logging helpers, Redis clients. With
    # them the Celery app object (`ezat.celery`): every app's tasks.py registers on it, and it
    # imports nothing of the project (its configuration is read from settings at run time).
    ("core (shared helpers)", ("core", "ezat.celery"), False),
    ("catalog", ("catalog",), False),
    ("accounts", ("accounts",), False),
    ("billing", ("billing",), False),
    ("gateway", ("gateway",), False),
    # the simulator is test infrastructure: it may use the product's helpers, never the reverse
    ("alerts | playground | simulator", ("alerts", "playground", "simulator"), True),
    # the composition root: settings, URLconfs, websocket routing, the ASGI entry point, the
    # server launcher, the health and docs views
    ("ezat (project wiring)", ("ezat",), False),
)


@dataclass(frozen=True)
class Unit:
    layer: int
    name: str  # the layer's name
    prefix: str  # the matched prefix: the unit independence is checked between


def unit_of(module: str) -> Unit | None:
    best: Unit | None = None
    for index, (name, prefixes, _) in enumerate(LAYERS):
        for prefix in prefixes:
            matches = module == prefix or module.startswith(prefix + ".")
            if matches and (best is None or len(prefix) > len(best.prefix)):
                best = Unit(index, name, prefix)
    return best


def imported_modules(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, dotted name) of everything a module imports; `from a import b` gives "a.b"."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                keep = len(parts) - node.level + (1 if is_package else 0)
                base = ".".join([*parts[:keep], *([base] if base else [])])
            found.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names)
    return found


def back_edges(source: str, module: str, is_package: bool = False) -> list[str]:
    """The imports in `source` (the text of `module`) that point up, or sideways between
    independent packages of one layer."""
    here = unit_of(module)
    if here is None:
        return []
    problems = []
    for line, target in imported_modules(ast.parse(source), module, is_package):
        there = unit_of(target)
        if there is None:
            continue  # third-party or standard library
        sideways = (
            there.layer == here.layer and LAYERS[here.layer][2] and there.prefix != here.prefix
        )
        if there.layer > here.layer or sideways:
            problems.append(
                f"{module}:{line} imports {target}: {here.name} must not import {there.name}"
            )
        elif (
            _is_views(target)
            and target.split(".")[0] != module.split(".")[0]
            and here.layer != len(LAYERS) - 1
        ):
            # Pages are leaves: what another app's pages share lives in a lower module
            # (accounts.web, accounts.api.base). Only the URLconfs import other apps' views.
            problems.append(f"{module}:{line} imports {target}: another app's views")
    return problems


def _is_views(target: str) -> bool:
    parts = target.split(".")
    return any(part == "views" or part.endswith("_views") for part in parts[1:])


def first_party_modules() -> list[tuple[Path, str, bool]]:
    modules = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if "migrations" in relative.parts:
                continue
            is_package = path.name == "__init__.py"
            parts = relative.parent.parts if is_package else relative.with_suffix("").parts
            modules.append((path, ".".join(parts), is_package))
    return modules


def test_imports_between_apps_point_down() -> None:
    modules = first_party_modules()
    assert len(modules) > 100, "the walk found too few modules: ROOT or PACKAGES is wrong"
    problems = [
        problem
        for path, module, is_package in modules
        for problem in back_edges(path.read_text(encoding="utf-8"), module, is_package)
    ]
    assert not problems, "imports that point back up:\n" + "\n".join(problems)


def test_the_layer_table_names_modules_that_exist() -> None:
    # A renamed module would otherwise silently fall into the wrong layer.
    names = {module for _, module, _ in first_party_modules()}
    for _, prefixes, _ in LAYERS:
        for prefix in prefixes:
            assert prefix in names, f"{prefix} is in LAYERS but is not a module"


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        # the edges this layering removed, one of each kind
        (
            "catalog.snapshot",
            "from billing.pricing import Prices",
            "catalog must not import billing",
        ),
        ("accounts.admin", "from billing.services import grant_credit", "must not import billing"),
        ("billing.services", "def f():\n    from gateway.limits import notify_credit", "gateway"),
        ("core.money", "from accounts.models import Organization", "must not import accounts"),
        ("gateway.app", "from ezat.health import healthz", "must not import ezat (project wiring)"),
        ("alerts.views", "from playground import relay", "must not import alerts | playground"),
        ("accounts.api.views", "from ..models import x\nfrom ...billing import y", "billing"),
        ("accounts.forms", "if TYPE_CHECKING:\n    import billing.models", "billing"),
        ("billing.views", "from accounts.views import org_view, page", "another app's views"),
        ("billing.api.views", "from accounts.api.views import OrgScopedAPIView", "views"),
    ],
)
def test_a_back_edge_is_caught(module: str, source: str, expected: str) -> None:
    problems = back_edges(source, module)
    assert problems and expected in problems[-1], problems


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("billing.views", "from accounts.web import org_view"),
        ("gateway.exchange", "from catalog.snapshot import Route\nfrom core import money"),
        ("billing.tasks", "from ezat.celery import app"),
        ("ezat.urls", "from playground import urls\nfrom gateway.app import GatewayApp"),
        ("accounts.views", "from . import selectors\nfrom .web import page"),
        ("billing.api.views", "from ..models import RequestLog"),
    ],
)
def test_an_import_that_points_down_is_allowed(module: str, source: str) -> None:
    assert back_edges(source, module) == []
