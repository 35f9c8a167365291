from __future__ import annotations

from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "gateway"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from billing.dashboard_selectors import set_open_holds_reader
        from gateway.limits import open_holds_nano
        from gateway.metrics_collector import register

        register()
        # Pages in billing show available money net of open holds; the limiter lives here, so
        # it is handed down (billing never imports gateway).
        set_open_holds_reader(open_holds_nano)
