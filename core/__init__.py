"""EZAT's ground floor: the helpers every app imports (money, CLI parsing, audit lines, JSON
logs, Redis clients, read-through caches, single-flight, DB-connection plumbing, the dashboard's
template filters). It imports no app of the project, and the project's wiring (`ezat/`: settings,
URLconfs, the ASGI entry point, the Celery app, the server launcher) imports it, never the
reverse: tests/foundation/test_layering.py holds both rules.
"""
