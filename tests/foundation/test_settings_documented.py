"""Every setting the code reads from the environment is in docs/settings.md's table
(issue 17, item 6): a new `env.int("EZAT_X")` or `os.environ.get("X")` without a row there fails
here. The scan reads the source, so a read behind a branch is found too."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("accounts", "billing", "catalog", "core", "ezat", "gateway", "simulator")
# env("X"), env.int("X", …), env.str(\n "X"), os.environ.get("X"), os.environ["X"],
# os.environ.setdefault("X", …), os.getenv("X")
READS = re.compile(
    r"""(?:\benv(?:\.\w+)?|os\.environ(?:\.get|\.setdefault)?|os\.getenv)\s*[(\[]\s*["']([A-Z][A-Z0-9_]*)["']"""
)
# A read whose name is not a literal would escape the scan: refused.
DYNAMIC = re.compile(r"""\benv(?:\.(?!read_env\b)\w+)?\(\s*(?!["'\s)])""")


def _sources() -> list[Path]:
    files = [ROOT / "manage.py"]
    for package in PACKAGES:
        files += [p for p in (ROOT / package).rglob("*.py") if "migrations" not in p.parts]
    return files


def _documented() -> set[str]:
    table = (ROOT / "docs" / "settings.md").read_text()
    return set(re.findall(r"`([A-Z][A-Z0-9_]*)`", table))


def test_the_scan_finds_reads() -> None:
    read = {name for path in _sources() for name in READS.findall(path.read_text())}
    # Known reads of different shapes, so a broken pattern cannot pass by finding nothing.
    assert {"SECRET_KEY", "DATABASE_URL", "EZAT_SQLITE_TEST_PATH", "EZAT_SIM_SECRET"} <= read


def test_every_setting_read_is_in_the_settings_table() -> None:
    documented = _documented()
    missing = sorted(
        f"{name} ({path.relative_to(ROOT)})"
        for path in _sources()
        for name in READS.findall(path.read_text())
        if name not in documented
    )
    assert missing == [], "add these to docs/settings.md's table"


def test_no_setting_is_read_under_a_computed_name() -> None:
    dynamic = [
        f"{path.relative_to(ROOT)}: {m.group(0)}"
        for path in _sources()
        if path.name == "settings.py"
        for m in DYNAMIC.finditer(path.read_text())
    ]
    assert dynamic == []
