"""EZAT Router's Django project package: the wiring (settings, URLconfs, the ASGI entry point,
the Celery app, the server launcher). The helpers every app imports live in `core/`, below
every app; this package sits above them all.

The Celery app lives in `ezat.celery` and is not imported here (unlike Celery's Django recipe):
importing it costs every gateway process ~10 MB, and only workers, beat and code that sends
tasks need it. `billing.tasks` binds its tasks to that app explicitly; `celery -A ezat` finds it
as `ezat.celery.app`.
"""
