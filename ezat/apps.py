from __future__ import annotations

from django.apps import AppConfig


class EzatConfig(AppConfig):
    """The project core: connects request-level plumbing (no models)."""

    name = "ezat"
    verbose_name = "EZAT core"

    def ready(self) -> None:
        from django.core.signals import request_finished

        from ezat.db import close_request_connections

        request_finished.connect(close_request_connections, dispatch_uid="ezat-close-db")
