from __future__ import annotations

from django.apps import AppConfig


class PlaygroundConfig(AppConfig):
    """The dashboard's Playground: runs a prompt through the gateway's own API with a
    short-lived key minted for the signed-in session. Sits above accounts, catalog, billing."""

    name = "playground"
    default_auto_field = "django.db.models.BigAutoField"
