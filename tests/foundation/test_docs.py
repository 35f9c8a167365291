"""The documentation a clone carries (issue 17, item 6): the README links into docs/, every
relative link resolves inside the repository, nothing points outside it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = (
    "docs/api.md",
    "docs/operator-guide.md",
    "docs/architecture.md",
    "docs/design.md",
    "docs/features.md",
    "docs/deployments.md",
    "docs/settings.md",
    "docs/production.md",
    "docs/testing.md",
    "docs/performance.md",
    "docs/scaling.md",
)


def test_the_readme_links_the_docs() -> None:
    readme = (ROOT / "README.md").read_text()
    for doc in DOCS:
        assert (ROOT / doc).is_file(), doc
        assert f"({doc})" in readme, doc


def test_links_stay_inside_the_repository() -> None:
    for page in [ROOT / "README.md", *(ROOT / d for d in DOCS)]:
        text = page.read_text()
        assert "../shared" not in text, page
        for target in re.findall(r"\]\(([^)#]+)\)", text):
            if target.startswith(("http://", "https://")):
                continue
            resolved = (page.parent / target).resolve()
            assert resolved.is_relative_to(ROOT) and resolved.exists(), (page.name, target)


def test_the_docker_env_example_is_documented() -> None:
    assert (ROOT / "docker/.env.example").is_file()
    readme = (ROOT / "README.md").read_text()
    assert "docker/.env.example" in readme and "docker/.env" in readme
