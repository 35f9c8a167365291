"""EZAT upstream simulator: an Anthropic Messages API server with scripted faults, and on every
simulator an OpenAI-compatible front (``/v1/chat/completions``, ``/v1/models``, Azure's
``/openai/v1/...``: gateway/simulator/openai_front.py, docs/simulator.md).

Run it with ``python -m gateway.simulator --port 8787`` (no Django needed), or embed it:
``build_app(api_key)`` returns the aiohttp application and ``serve(host, port, api_key)`` runs
it. ``gateway.simulator.testing.SimulatorThread`` runs it in a background thread for tests.

Control API (no auth), under ``/_sim/``: ``GET requests`` (recorded requests), ``POST script`` /
``GET script`` / ``DELETE script`` (scripted faults: add, list, drop), ``GET clock`` /
``POST clock`` (``{"advance": s}`` or ``{"now": s}``: the prompt cache's TTLs on simulated time),
``POST reset`` (records, faults, cache, back to the wall clock, the OpenAI front's settings),
``GET stats``, ``GET health``, ``GET``/``POST platform`` (the platform front's state and the OpenAI
front's settings ``openai_auth``, ``openai_flavour``, ``openai_reasoning_field``).
"""

from __future__ import annotations

from gateway.simulator.app import build_app, serve

__all__ = ["build_app", "serve"]
