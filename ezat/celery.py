"""The Celery app. Tasks live in each app's `tasks.py`; beat runs reconciliation."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ezat.settings")

app = Celery("ezat")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
