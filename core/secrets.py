"""Refuse to run production on a guessable SECRET_KEY."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

# Values that have shipped in examples; a key equal to one of them is public knowledge.
KNOWN_DEFAULTS = frozenset({"", "changeme", "secret", "insecure", "dev", "django-insecure"})
MIN_LENGTH = 50
MIN_UNIQUE_CHARS = 5


def is_weak_secret_key(key: str) -> bool:
    return (
        key.lower() in KNOWN_DEFAULTS
        or key.startswith("django-insecure")
        or len(key) < MIN_LENGTH
        or len(set(key)) < MIN_UNIQUE_CHARS
    )


def check_secret_key(key: str, *, debug: bool) -> None:
    """With DEBUG off, a weak key would let anyone forge sessions and CSRF tokens."""
    if not debug and is_weak_secret_key(key):
        raise ImproperlyConfigured(
            "SECRET_KEY is missing, a known default or too weak (at least 50 characters, "
            "5 distinct). Run `scripts/quickstart.sh` or set SECRET_KEY in the environment/.env."
        )
