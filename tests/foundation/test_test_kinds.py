"""Every test is exactly one kind (unit, e2e, browser, cluster: tests/conftest.py KINDS), a
marker rather than a directory, since the tests mirror the product's tree (docs/testing.md).
Every run checks its own tests at collection (tests/conftest.py); here the rule itself."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from tests.conftest import KINDS, kind_problems


@dataclass
class FakeItem:
    nodeid: str
    markers: tuple[str, ...]
    fixturenames: list[str] = field(default_factory=list)

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.markers else None


def test_this_run_has_only_tests_of_one_kind(request: pytest.FixtureRequest) -> None:
    items = request.session.items
    assert items
    assert kind_problems(items) == []
    for item in items:
        assert sum(item.get_closest_marker(kind) is not None for kind in KINDS) == 1, item.nodeid


def test_the_unmarked_test_of_this_module_is_unit(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("unit") is not None


@pytest.mark.parametrize(
    ("item", "problem"),
    [
        (FakeItem("t.py::none", ()), "kinds [], must be exactly one"),
        (FakeItem("t.py::two", ("unit", "e2e")), "kinds ['unit', 'e2e'], must be exactly one"),
        (FakeItem("t.py::stack", ("unit",), ["stack"]), "uses the `stack` fixture, so it is e2e"),
        (FakeItem("t.py::app", ("e2e",), ["app"]), "uses the `app` fixture, so it is browser"),
        (FakeItem("t.py::lb", ("unit",), ["cluster"]), "uses the `cluster` fixture, so it is"),
    ],
)
def test_a_test_of_no_kind_two_kinds_or_the_wrong_kind_is_found(
    item: FakeItem, problem: str
) -> None:
    problems = kind_problems([item])
    assert len(problems) == 1 and problem in problems[0], problems


def test_a_test_of_one_kind_using_its_fixtures_passes() -> None:
    assert kind_problems([FakeItem("t.py::ok", ("e2e",), ["stack", "e2e", "tmp_path"])]) == []
