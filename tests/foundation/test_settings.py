"""Settings safety: a weak SECRET_KEY refuses to start with DEBUG off."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from core.secrets import check_secret_key, is_weak_secret_key

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "key", ["", "changeme", "django-insecure-abc" + "x" * 60, "a" * 60, "short"]
)
def test_weak_keys(key: str) -> None:
    assert is_weak_secret_key(key)
    with pytest.raises(ImproperlyConfigured):
        check_secret_key(key, debug=False)
    check_secret_key(key, debug=True)  # allowed while debugging


def test_strong_key_accepted() -> None:
    check_secret_key("kJ3n-8fQ_zP2" * 5, debug=False)


def test_process_refuses_to_start_with_a_weak_key(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DEBUG")}
    env.update(SECRET_KEY="changeme", DEBUG="false")
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'ezat.settings'); django.setup()",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr
