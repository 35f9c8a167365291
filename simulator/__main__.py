"""python -m simulator --port P|auto [--host 127.0.0.1] [--api-key K]"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from django.core.management.base import CommandError

from core.cli import port
from simulator.app import serve


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m simulator",
        description=(
            "EZAT upstream simulator (Anthropic Messages API with scripted faults, and an"
            " OpenAI-compatible front)."
        ),
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--port", type=port("--port"), default=8787, help="1-65535, or auto for a free port"
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get("EZAT_SIM_API_KEY") or None,
        help="require this key (x-api-key, Bearer; OpenAI front: Bearer, api-key); default: none",
    )
    try:
        return parser.parse_args(argv)
    except CommandError as exc:  # raised by a `type=` parser: one line, no traceback
        sys.stderr.write(f"{parser.prog}: error: {exc}\n")
        sys.exit(2)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        asyncio.run(serve(args.host, args.port, args.api_key))
    except KeyboardInterrupt:
        # Ctrl-C is the normal way to stop it; no traceback.
        return


if __name__ == "__main__":
    main()
