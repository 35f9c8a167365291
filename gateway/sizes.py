"""Byte sizes in messages: exact, never rounded down (a limit of 1000 bytes is not "0 MB")."""

from __future__ import annotations

from typing import Final

MIB: Final = 1024 * 1024
KIB: Final = 1024


def format_size(limit: int) -> str:
    """ "32 MB" for whole mebibytes, "256 KB" for whole kibibytes, else the exact byte count."""
    if limit and limit % MIB == 0:
        return f"{limit // MIB} MB"
    if limit and limit % KIB == 0:
        return f"{limit // KIB} KB"
    return f"{limit} bytes"
