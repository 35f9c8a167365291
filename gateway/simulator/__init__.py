"""EZAT upstream simulator: an Anthropic Messages API server with scripted faults.

Run it with ``python -m gateway.simulator --port 8787`` (no Django needed), or embed it:
``build_app(api_key)`` returns the aiohttp application and ``serve(host, port, api_key)`` runs
it. ``gateway.simulator.testing.SimulatorThread`` runs it in a background thread for tests.
"""

from __future__ import annotations

from gateway.simulator.app import build_app, serve

__all__ = ["build_app", "serve"]
