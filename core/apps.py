from __future__ import annotations

from django.apps import AppConfig


class CoreConfig(AppConfig):
    """The shared helpers' app: request-level plumbing (no models) and the dashboard's template
    filters (`{% load dashboard %}`), which Django finds in an installed app's templatetags."""

    name = "core"
    verbose_name = "EZAT core"

    def ready(self) -> None:
        from django.core.signals import request_finished

        from core.db import close_request_connections

        request_finished.connect(close_request_connections, dispatch_uid="ezat-close-db")
