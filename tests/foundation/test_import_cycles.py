"""No circles of imports between the project's modules (issue 36: "No circles are left inside
rooms except where a comment says why"). test_layering keeps the apps' imports pointing down;
this keeps the modules inside one app from going round in a loop, where a newcomer reading one
file is sent to another that sends them back.

Every import counts, as in test_layering: at the top, inside a function (a lazy import is still
a dependency, often one that hides a circle) or under `if TYPE_CHECKING:`. `from a import b`
counts as an import of the module `a.b` when there is one, else of `a`.

A circle that stays is listed in ALLOWED with why it is one, and the lazy import that closes it
says so in a comment at its line."""

from __future__ import annotations

import ast

from tests.foundation.test_layering import first_party_modules, imported_modules

# Each allowed circle, as the set of its modules, with the reason it stays.
ALLOWED: dict[frozenset[str], str] = {
    frozenset({"billing.recorder", "billing.spool", "billing.usage_log"}): (
        "the spool is the recorder's fallback when the database refuses a record, and the group-"
        "commit log (usage_log) is built on the spool's files; replaying them stores records with "
        "the recorder's idempotent insert and settles them through the log, and the recorder "
        "waits on the log when it drains. The spool imports the recorder and the log lazily, at "
        "replay; the recorder the log lazily, at drain. Moving the replay to a module of its own "
        "would break the circle"
    ),
    frozenset({"alerts.services", "alerts.tasks"}): (
        "Celery's pattern: a task calls its service, and a service queues the next task; the "
        "services import the tasks lazily, at the moment they queue one"
    ),
}


def import_graph() -> dict[str, set[str]]:
    modules = first_party_modules()
    names = {name for _, name, _ in modules}
    graph: dict[str, set[str]] = {}
    for path, name, is_package in modules:
        targets: set[str] = set()
        for _, target in imported_modules(ast.parse(path.read_text()), name, is_package):
            while target and target not in names:
                target = target.rpartition(".")[0]  # `from a import function` imports a
            if target and target != name:
                targets.add(target)
        graph[name] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative: the graph has hundreds of modules)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, pending = work[-1]
            if pending:
                child = pending.pop()
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, sorted(graph.get(child, ()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_no_module_imports_go_round_in_a_circle() -> None:
    unexplained = [sorted(c) for c in circles(import_graph()) if c not in ALLOWED]
    assert not unexplained, (
        "modules that import each other (directly or round a loop): move what they share to "
        f"a module both import, or list the circle in ALLOWED with why: {unexplained}"
    )


def test_every_allowed_circle_still_exists() -> None:
    """A circle that was broken leaves ALLOWED, so the list never excuses a new one."""
    present = set(circles(import_graph()))
    assert [sorted(c) for c in ALLOWED if c not in present] == []


def test_a_circle_is_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [frozenset({"a", "b", "c"})]
    assert circles({"a": {"b"}, "b": set()}) == []
