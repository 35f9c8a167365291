from __future__ import annotations

from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "gateway"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from billing.dashboard_selectors import set_open_holds_reader
        from billing.services import set_credit_listener
        from billing.usage_log import set_settler
        from gateway.durability import settle_logged
        from gateway.limits import notify_credit, open_holds_nano
        from gateway.metrics_collector import register

        register()
        # Pages in billing show available money net of open holds; the limiter lives here, so
        # it is handed down (billing never imports gateway).
        set_open_holds_reader(open_holds_nano)
        set_credit_listener(notify_credit)  # a grant is spendable at once, not at the next reseed
        # The usage log's flusher settles the requests whose rows it stored (same reason).
        set_settler(settle_logged)
