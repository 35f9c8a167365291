"""Dashboard routes for alerts (mounted under /dashboard/)."""

from __future__ import annotations

from django.urls import path

from alerts import views

urlpatterns = [
    path("alerts/", views.alerts_page, name="alerts"),
    path("alerts/secret/", views.rotate_webhook_secret, name="alerts-rotate-secret"),
    path("alerts/test/", views.send_test_event, name="alerts-test-event"),
]
