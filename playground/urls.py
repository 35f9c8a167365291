"""Dashboard routes for the Playground (mounted under /dashboard/)."""

from __future__ import annotations

from django.urls import path

from playground import views

urlpatterns = [
    path("playground/", views.playground_page, name="playground"),
    path("playground/run", views.playground_run, name="playground-run"),
]
