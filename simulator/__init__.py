"""EZAT upstream simulator: an Anthropic Messages API server with scripted faults, and on every
simulator an OpenAI-compatible front (``/v1/chat/completions``, ``/v1/models``, Azure's
``/openai/v1/...``: simulator/openai_front.py, docs/simulator.md).

Run it with ``python -m simulator --port 8787`` (no Django needed), or embed it:
``simulator.app.build_app(api_key)`` returns the aiohttp application and
``simulator.app.serve(host, port, api_key)`` runs it. ``simulator.testing.SimulatorThread`` runs
it in a background thread for tests.

Control API (no auth), under ``/_sim/``: ``GET requests`` (recorded requests), ``POST script`` /
``GET script`` / ``DELETE script`` (scripted faults: add, list, drop), ``GET clock`` /
``POST clock`` (``{"advance": s}`` or ``{"now": s}``: the prompt cache's TTLs on simulated time),
``POST reset`` (records, faults, cache, back to the wall clock, the OpenAI front's settings),
``GET stats``, ``GET health``, ``GET``/``POST platform`` (the platform front's state and the OpenAI
front's settings ``openai_auth``, ``openai_flavour``, ``openai_reasoning_field``).

It is test infrastructure, not the product: nothing in the product imports it (the layering
test, tests/foundation/test_layering.py, holds that). The package is also a Django app, only for
``python manage.py simulator``. Listed in INSTALLED_APPS, it is imported by every gateway
process at start-up: so this file imports nothing, and a worker never loads aiohttp or the
simulator's modules.
"""
