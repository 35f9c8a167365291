"""Dashboard and management API routes (filled in by the dashboard issue)."""

from __future__ import annotations

urlpatterns: list = []
