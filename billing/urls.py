"""Dashboard routes for usage, requests and balance (mounted under /dashboard/)."""

from __future__ import annotations

from django.urls import path

from billing import views

urlpatterns = [
    path("", views.home, name="home"),
    path("usage/", views.usage, name="usage"),
    path("requests/", views.requests_log, name="requests"),
    path("requests/<str:request_id>", views.request_detail, name="request"),
    path("requests/<str:request_id>/", views.request_detail),
    path("balance/", views.balance, name="balance"),
]
