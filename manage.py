#!/usr/bin/env python
"""Django's command-line utility for EZAT Router."""

from __future__ import annotations

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ezat.settings")
    from core.cli import main as run

    run(sys.argv)


if __name__ == "__main__":
    main()
